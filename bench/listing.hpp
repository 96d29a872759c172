// trainbench --list_models, --list_configs and --csv_header --json: the registered workloads with their parameters,
// FLOPs and memory plans as a table, or (--json) as one JSON object that other tools read instead of retyping the
// models (scripts/peers/pytorch_train.py).
#pragma once

#include <ostream>

#include "bench/cli/flags.hpp"

namespace tb::bench {

void list_models(std::ostream& out, const Flags& flags);
// {"format": 1, "workloads": [{"model", "dataset", "task", "classes", "input_shape", "seq_len",
// "batch", "gpu_batch", "warmup_steps", "epochs", "real_data_only", "optimizer": {"kind", "lr",
// "momentum", "weight_decay", "beta1", "beta2", "eps", "lr_reference_batch"}, "params",
// "forward_flops_per_sample", "train_flops_per_sample"}, ...]}; --batch sets batch and gpu_batch.
void list_models_json(std::ostream& out, const Flags& flags);

// trainbench --list_configs: the device kinds (bench/plan/device_kinds.hpp) as a table, or (--json) as
// {"format": 2, "grammar", "kinds": [{"name", "grammar", "pattern", "label", "backend", "run",
// "communicates", "across_ranks", "one_process", "shares_device", "check_word"}, ...],
// "variant_flags": [{"name", "meaning"}, ...], "verdicts": [{"word", "meaning"}, ...]}: what the
// scripts' parser of a row's device (scripts/tbdevices.py), their variant list and verdicts
// (scripts/tbcsv.py) are held against.
void list_configs(std::ostream& out);
void list_configs_json(std::ostream& out);

// trainbench --csv_header --json: {"schema_version": "7", "columns": [...]}, the schema a tool that
// writes trainbench's rows (the PyTorch peer) takes, version included, from the binary.
void csv_header_json(std::ostream& out);

}  // namespace tb::bench
