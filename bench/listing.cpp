// The --list_models, --list_configs and --csv_header --json outputs (listing.hpp).
#include "bench/listing.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/plan/configs.hpp"
#include "bench/plan/device_kinds.hpp"
#include "bench/schema/columns.hpp"
#include "engine/backends.hpp"
#include "engine/parallel/replica.hpp"
#include "models/models.hpp"

namespace tb::bench {
namespace {

// A JSON string: the names here are plain, but a quote or a control character must not break
// the document.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\')
      out += {'\\', c};
    else if (static_cast<unsigned char>(c) < 0x20)
      out += fmt::format("\\u{:04x}", int(c));
    else
      out += c;
  }
  return out + "\"";
}

const char* task_name(Task task) { return task == Task::Regression ? "regression" : "classification"; }

// The width of the dataset column: its longest name (fashion-mnist pushed a column of 9 out of line).
std::size_t dataset_width() {
  std::size_t width = std::string_view("dataset").size();
  for (const models::Workload& w : models::workloads()) width = std::max(width, w.dataset.size());
  return width;
}

// What each workload needs before it runs, so that a batch can be picked for a card. The arena
// (values and gradients sharing bytes by lifetime) is exactly what the networks allocate;
// weights, gradients, optimizer state and batch buffers are counted from the parameters; on a
// GPU the cuDNN workspace cap and cuBLAS's workspace come on top.
void memory_plans(std::ostream& out, const Flags& flags) {
  constexpr double GB = double(1 << 30);  // GiB, as the charts and the summary print memory
  const std::size_t dataset = dataset_width();
  out << "\nMemory plan (GiB; GPU rows at the workload's GPU batch, which trainbench lowers to what fits "
         "the card; --batch sets both). On a GPU the CUDA context and the libraries' kernels come on top, "
         "outside this plan: about 0.5-1 GiB, measured in each GPU row as mem_context_bytes:\n"
      << fmt::format("{:<10} {:<{}} {:<4} {:<9} {:>6} {:>9} {:>9} {:>9}\n", "model", "dataset", dataset, "dev",
                     "precision", "batch", "arena", "fixed", "total");
  for (const models::Workload& w : models::workloads()) {
    const bool adam = w.optimizer.kind == OptimizerConfig::Kind::Adam;
    const i64 cpu_batch = flags.batch.value_or(w.batch);
    const MemoryPlanBytes c = memory_plan(Backend::Cpu, w.spec, cpu_batch, "fp32", adam);
    out << fmt::format("{:<10} {:<{}} {:<4} {:<9} {:>6} {:>9.3f} {:>9.3f} {:>9.3f}\n", w.model, w.dataset, dataset,
                       "cpu", "fp32", cpu_batch, double(c.arena) / GB, double(c.fixed) / GB, double(c.total()) / GB);
    const i64 gpu = flags.batch.value_or(w.batch_on_gpu());
    for (const char* precision : {"fp32", "tf32", "fp16", "bf16"}) {
      const MemoryPlanBytes p = memory_plan(Backend::Cuda, w.spec, gpu, precision, adam);
      out << fmt::format("{:<10} {:<{}} {:<4} {:<9} {:>6} {:>9.3f} {:>9.3f} {:>9.3f}\n", w.model, w.dataset, dataset,
                         "gpu", precision, gpu, double(p.arena) / GB, double(p.fixed + p.workspace) / GB,
                         double(p.total()) / GB);
    }
  }
}

}  // namespace

// The fp32 gradients data parallelism all-reduces per step and the buckets they make: the rule
// of plan_buckets (engine/parallel/replica.hpp) over the parameters in backward order, without
// the padding between layers' buffers.
struct GradientBuckets {
  double bytes = 0;
  int buckets = 0;
};
GradientBuckets gradient_buckets(const ModelSpec& spec) {
  const auto shapes = infer_shapes(spec, 1);
  GradientBuckets g;
  double open = 0;  // bytes of the bucket being filled
  for (std::size_t i = spec.nodes.size(); i-- > 1;) {
    double node_bytes = 0;
    for (const ParamSpec& p : node_params(spec.nodes[i].spec, shapes[std::size_t(spec.nodes[i].inputs.at(0))]))
      node_bytes += double(p.count()) * sizeof(float);
    if (node_bytes == 0) continue;
    if (g.buckets == 0 || open >= double(parallel::kDefaultBucketBytes)) ++g.buckets, open = 0;
    open += node_bytes;
    g.bytes += node_bytes;
  }
  return g;
}

void list_models(std::ostream& out, const Flags& flags) {
  const std::size_t dataset = dataset_width();
  out << fmt::format("{:<10} {:<{}} {:>6} {:>12} {:>16} {:>16} {:>14} {:>8}\n", "model", "dataset", dataset, "batch",
                     "params", "fwd GFLOP/sample", "train GFLOP/step", "gradient MiB", "buckets");
  for (const models::Workload& w : models::workloads()) {
    const ModelCost c = model_cost(w.spec);
    const i64 batch = flags.batch.value_or(w.batch);
    const GradientBuckets g = gradient_buckets(w.spec);
    out << fmt::format("{:<10} {:<{}} {:>6} {:>12} {:>16.6g} {:>16.6g} {:>14.1f} {:>8}\n", w.model, w.dataset, dataset,
                       batch, c.parameters, c.forward_flops_per_sample() * 1e-9,
                       c.train_flops_per_sample() * double(batch) * 1e-9, g.bytes / double(1 << 20), g.buckets);
  }
  out << fmt::format(
      "gradient MiB and buckets: fp32 gradients all-reduced per data-parallel step, in buckets of {} MiB "
      "(16-bit precisions halve the weights' share)\n",
      parallel::kDefaultBucketBytes >> 20);
  memory_plans(out, flags);
}

void list_models_json(std::ostream& out, const Flags& flags) {
  std::vector<std::string> entries;
  for (const models::Workload& w : models::workloads()) {
    const ModelCost c = model_cost(w.spec);
    const InputSpec& input = w.spec.input();
    const OptimizerConfig& o = w.optimizer;
    const std::string optimizer = fmt::format(
        R"({{"kind": {}, "lr": {}, "momentum": {}, "weight_decay": {}, "beta1": {}, "beta2": {}, "eps": {}, )"
        R"("lr_reference_batch": {}}})",
        json_string(optimizer_name(o.kind)), o.lr, o.momentum, o.weight_decay, o.beta1, o.beta2, o.eps,
        w.lr_reference_batch);
    entries.push_back(fmt::format(
        R"(  {{"model": {}, "dataset": {}, "task": {}, "classes": {}, "input_shape": [{}], "seq_len": {}, )"
        R"("batch": {}, "gpu_batch": {}, "warmup_steps": {}, "epochs": {}, "real_data_only": {}, "optimizer": {}, )"
        R"("params": {}, "forward_flops_per_sample": {}, "train_flops_per_sample": {}, "gradient_bytes": {}, )"
        R"("gradient_buckets": {}}})",
        json_string(w.model), json_string(w.dataset), json_string(task_name(w.spec.task)), w.spec.classes,
        fmt::join(input.sample_dims, ", "), input.seq_len, flags.batch.value_or(w.batch),
        flags.batch.value_or(w.batch_on_gpu()), w.warmup_steps, w.epochs, w.real_data_only, optimizer, c.parameters,
        c.forward_flops_per_sample(), c.train_flops_per_sample(), gradient_buckets(w.spec).bytes,
        gradient_buckets(w.spec).buckets));
  }
  out << fmt::format("{{\"format\": 1,\n \"workloads\": [\n{}]}}\n", fmt::join(entries, ",\n"));
}

void list_configs(std::ostream& out) {
  // Columns as wide as their longest entry (gpu:N as emulated nodes' launch line is 40 characters).
  std::size_t kind = 4, written = 7;
  for (const DeviceKind& k : device_kinds())
    kind = std::max(kind, std::strlen(k.name)), written = std::max(written, std::strlen(k.grammar));
  out << fmt::format("--devices entries: {}\n\n{:<{}} {:<{}} {:<12} {}\n", device_grammar(), "kind", kind, "written",
                     written, "runs as", "what its rows measure");
  for (const DeviceKind& k : device_kinds())
    out << fmt::format("{:<{}} {:<{}} {:<12} {}\n", k.name, kind, k.grammar, written, run_kind_name(k.run), k.label);
}

void list_configs_json(std::ostream& out) {
  std::vector<std::string> kinds;
  for (const DeviceKind& k : device_kinds())
    kinds.push_back(
        fmt::format(R"(  {{"name": {}, "grammar": {}, "pattern": {}, "label": {}, "backend": "{}", "run": "{}", )"
                    R"("communicates": {}, "across_ranks": {}, "one_process": {}, "shares_device": {}, )"
                    R"("check_word": {}}})",
                    json_string(k.name), json_string(k.grammar), json_string(k.pattern), json_string(k.label),
                    k.backend == Backend::Cpu ? "cpu" : "gpu", run_kind_name(k.run), k.wiring != nullptr,
                    k.across_ranks, k.one_process, k.shares_device, json_string(k.check_word)));
  std::vector<std::string> variants, words;
  for (const VariantFlag& v : variant_flags())
    variants.push_back(fmt::format(R"(  {{"name": {}, "meaning": {}}})", json_string(v.name), json_string(v.meaning)));
  for (const Verdict& v : verdicts())
    words.push_back(fmt::format(R"(  {{"word": {}, "meaning": {}}})", json_string(v.word), json_string(v.meaning)));
  std::vector<std::string> isas;
  for (const std::string& isa : own_cpu_isas()) isas.push_back(json_string(isa));
  out << fmt::format(
      "{{\"format\": 2,\n \"grammar\": {},\n \"kinds\": [\n{}],\n \"variant_flags\": [\n{}],\n \"verdicts\": "
      "[\n{}],\n \"cpu_isa\": {},\n \"cpu_isas\": [{}]}}\n",
      json_string(device_grammar()), fmt::join(kinds, ",\n"), fmt::join(variants, ",\n"), fmt::join(words, ",\n"),
      json_string(own_cpu_isa()), fmt::join(isas, ", "));
}

void csv_header_json(std::ostream& out) {
  std::vector<std::string> names;
  for (const std::string& c : csv_columns()) names.push_back(json_string(c));
  out << fmt::format("{{\"schema_version\": {},\n \"columns\": [{}]}}\n", json_string(kSchemaVersion),
                     fmt::join(names, ", "));
}

}  // namespace tb::bench
