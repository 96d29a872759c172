// A row of trainbench's CSV as a record of named, typed fields: one field per column, declared
// once in TB_ROW_COLUMNS below, in the CSV's order (results/SCHEMA.md). The struct, the table of
// columns (bench/schema/columns.hpp), the CSV writer and the reader are all made from that list,
// so a column is added in one place and no code inside the process looks a row's own figure up
// by its name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tb::bench {

// A column's kind: what makes a row what it is, what its run measured (a counter), or the
// machine's context.
enum class ColumnKind { Identity, Counter, Context };

// A cell's type, and the field that holds it: text as written; a count (an integer, written
// with std::to_string); a number (written {:.6g}, as Google Benchmark's counters). Empty in the
// CSV: an empty text, no count, no number.
enum class CellType { Text, Count, Number };
using Text = std::string;
using Count = std::optional<std::int64_t>;
using Number = std::optional<double>;

// X(name, CellType, ColumnKind) for every column, in the CSV's order.
#define TB_ROW_COLUMNS(X)                                                                                        \
  /* Version 2: what the row is, and what its timed steps and epochs measured. */                                \
  X(schema_version, Text, Identity)                                                                              \
  X(benchmark, Text, Identity)                                                                                   \
  X(kind, Text, Identity)                                                                                        \
  X(model, Text, Identity)                                                                                       \
  X(dataset, Text, Identity)                                                                                     \
  X(data_source, Text, Identity)                                                                                 \
  X(device, Text, Identity)                                                                                      \
  X(threads, Count, Identity)                                                                                    \
  X(precision, Text, Identity)                                                                                   \
  X(batch, Count, Identity)                                                                                      \
  X(optimizer, Text, Identity)                                                                                   \
  X(framework, Text, Identity)                                                                                   \
  X(run_type, Text, Identity)                                                                                    \
  X(aggregate, Text, Identity)                                                                                   \
  X(repetition, Count, Identity)                                                                                 \
  X(status, Text, Identity)                                                                                      \
  X(message, Text, Identity)                                                                                     \
  X(iterations, Count, Identity)                                                                                 \
  X(warmup_steps, Count, Identity)                                                                               \
  X(step_time_s, Number, Counter)                                                                                \
  X(samples_per_s, Number, Counter)                                                                              \
  X(params, Count, Identity)                                                                                     \
  X(train_flops_per_sample, Number, Identity)                                                                    \
  X(model_tflops, Number, Counter)                                                                               \
  X(peak_gflops, Number, Counter)                                                                                \
  X(utilisation, Number, Counter)                                                                                \
  X(host_cpu_s_per_step, Number, Counter)                                                                        \
  X(host_cpu_util, Number, Counter)                                                                              \
  X(peak_rss_bytes, Number, Counter)                                                                             \
  X(loss_first, Number, Counter)                                                                                 \
  X(loss_last, Number, Counter)                                                                                  \
  X(data_s_per_step, Number, Counter)                                                                            \
  X(forward_s_per_step, Number, Counter)                                                                         \
  X(backward_s_per_step, Number, Counter)                                                                        \
  X(update_s_per_step, Number, Counter)                                                                          \
  X(data_wait_s_per_step, Number, Counter)                                                                       \
  X(loader_workers, Count, Identity)                                                                             \
  X(epoch, Number, Counter)                                                                                      \
  X(train_loss, Number, Counter)                                                                                 \
  X(val_loss, Number, Counter)                                                                                   \
  X(train_acc, Number, Counter)                                                                                  \
  X(val_acc, Number, Counter)                                                                                    \
  X(elapsed_s, Number, Counter)                                                                                  \
  X(target_acc, Number, Identity)                                                                                \
  X(time_to_target_s, Number, Counter)                                                                           \
  X(wall_step_time_s, Number, Counter)                                                                           \
  /* Version 2: memory, data parallelism and the machine. */                                                     \
  X(cuda_graph, Count, Identity)                                                                                 \
  X(data_on_device, Count, Identity)                                                                             \
  X(mem_peak_bytes, Number, Counter)                                                                             \
  X(mem_reserved_bytes, Number, Counter)                                                                         \
  X(mem_limit_bytes, Number, Counter)                                                                            \
  X(mem_weights_bytes, Number, Counter)                                                                          \
  X(mem_grads_bytes, Number, Counter)                                                                            \
  X(mem_optimizer_bytes, Number, Counter)                                                                        \
  X(mem_activations_bytes, Number, Counter)                                                                      \
  X(mem_workspace_bytes, Number, Counter)                                                                        \
  X(mem_data_bytes, Number, Counter)                                                                             \
  X(mem_context_bytes, Number, Counter)                                                                          \
  X(loss_scale, Number, Counter)                                                                                 \
  X(skipped_steps, Number, Counter)                                                                              \
  X(peak_source, Text, Identity)                                                                                 \
  X(ranks, Count, Identity)                                                                                      \
  X(replicas, Number, Counter)                                                                                   \
  X(comm_s_per_step, Number, Counter)                                                                            \
  X(comm_share, Number, Counter)                                                                                 \
  X(allreduce_bytes_per_step, Number, Counter)                                                                   \
  X(busbw_gbps, Number, Counter)                                                                                 \
  X(comm_overlap, Number, Counter)                                                                               \
  X(scaling_efficiency, Number, Counter)                                                                         \
  X(host, Text, Context)                                                                                         \
  X(os, Text, Context)                                                                                           \
  X(cpu_model, Text, Context)                                                                                    \
  X(cores, Count, Context)                                                                                       \
  X(compiler, Text, Context)                                                                                     \
  X(onednn, Text, Context)                                                                                       \
  X(benchmark_lib, Text, Context)                                                                                \
  X(git_commit, Text, Context)                                                                                   \
  X(timestamp, Text, Context)                                                                                    \
  X(gpu_name, Text, Context)                                                                                     \
  X(gpu_cc, Text, Context)                                                                                       \
  X(gpu_sms, Count, Context)                                                                                     \
  X(gpu_memory_gib, Text, Context)                                                                               \
  X(gpu_clock_mhz, Count, Context)                                                                               \
  X(gpu_memory_clock_mhz, Count, Context)                                                                        \
  X(driver_version, Text, Context)                                                                               \
  X(cuda_version, Text, Context)                                                                                 \
  X(cudnn_version, Text, Context)                                                                                \
  X(cublas_version, Text, Context)                                                                               \
  X(nccl_version, Text, Context)                                                                                 \
  /* Version 3: what nvidia-smi shows, sampled by NVML over the timed steps. */                                  \
  X(gpu_util, Number, Counter)                                                                                   \
  X(gpu_mem_used_bytes, Number, Counter)                                                                         \
  X(gpu_sm_clock_min_mhz, Number, Counter)                                                                       \
  X(gpu_sm_clock_median_mhz, Number, Counter)                                                                    \
  X(gpu_power_w, Number, Counter)                                                                                \
  X(energy_j_per_sample, Number, Counter)                                                                        \
  X(gpu_temp_max_c, Number, Counter)                                                                             \
  X(gpu_throttle, Text, Counter)                                                                                 \
  X(gpu_samples, Number, Counter)                                                                                \
  X(host_cpu_util_per_job, Number, Counter)                                                                      \
  X(cuda_driver_version, Text, Context)                                                                          \
  /* Version 4: variant, shared device, measured or predicted; load and sgemm; the link a prediction assumed. */ \
  X(variant, Text, Identity)                                                                                     \
  X(load_avg_1m, Number, Counter)                                                                                \
  X(sgemm_gflops, Number, Context)                                                                               \
  X(peak_spread, Number, Counter)                                                                                \
  X(shared_device, Count, Identity)                                                                              \
  X(measurement, Text, Identity)                                                                                 \
  X(link, Text, Identity)                                                                                        \
  X(link_busbw_gbps, Number, Counter)                                                                            \
  X(link_latency_us, Number, Counter)                                                                            \
  X(predicted_from, Text, Identity)                                                                              \
  X(peer_settings, Text, Identity)                                                                               \
  /* Version 5: the device clock, a prediction's band and dominant term, the jobs' window, the nodes. */         \
  X(device_step_time_s, Number, Counter)                                                                         \
  X(device_samples_per_s, Number, Counter)                                                                       \
  X(samples_per_s_low, Number, Counter)                                                                          \
  X(samples_per_s_high, Number, Counter)                                                                         \
  X(dominant_term, Text, Identity)                                                                               \
  X(jobs_window_s, Number, Counter)                                                                              \
  X(nodes, Count, Identity)                                                                                      \
  X(rank_hosts, Text, Identity)                                                                                  \
  X(emulated_nodes, Count, Identity)                                                                             \
  /* Version 6: the kind's facts, comparisons, verdicts, predictions over two levels, prediction inputs. */      \
  X(device_kind, Text, Identity)                                                                                 \
  X(backend, Text, Identity)                                                                                     \
  X(data_parallel, Count, Identity)                                                                              \
  X(baseline, Text, Identity)                                                                                    \
  X(cpu_baseline, Text, Identity)                                                                                \
  X(speedup_vs_cpu, Number, Counter)                                                                             \
  X(speedup_differs, Text, Identity)                                                                             \
  X(verdicts, Text, Identity)                                                                                    \
  X(prediction, Text, Identity)                                                                                  \
  X(algorithm, Text, Identity)                                                                                   \
  X(network, Text, Identity)                                                                                     \
  X(network_busbw_gbps, Number, Counter)                                                                         \
  X(network_latency_us, Number, Counter)                                                                         \
  X(network_nics, Number, Counter)                                                                               \
  X(prediction_inputs, Text, Identity)                                                                           \
  /* Version 7: instruction sets, the prediction model, windows of the timed steps. */                           \
  X(onednn_isa, Text, Context)                                                                                   \
  X(cpu_isa, Text, Context)                                                                                      \
  X(prediction_model, Count, Identity)                                                                           \
  X(window_samples_per_s, Text, Identity)

struct Row {
#define TB_ROW_FIELD(name, type, kind) type name{};
  TB_ROW_COLUMNS(TB_ROW_FIELD)
#undef TB_ROW_FIELD
};

}  // namespace tb::bench
