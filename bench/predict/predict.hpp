// Predicted N-device rows, from policy to row, in one place: when a one-device row is predicted
// (after its last repetition) and over which links and device counts, the predicted CSV rows made
// from the one-device row's own CSV rows (its prediction_inputs column and its samples/s: the same
// whether in the run or after it, --predict_from), their console lines, and the comparison of a
// measured data-parallel row with the prediction made for it: its verdict (inside_band or
// outside_band) and the line that says so (docs/prediction.md). The model is
// engine/parallel/predict.hpp.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/cli/context.hpp"
#include "bench/output/csv.hpp"
#include "bench/plan/configs.hpp"
#include "engine/parallel/predict.hpp"

namespace tb::bench {

// A predicted row and what the console says of it.
struct PredictedRow {
  Row row;
  std::string line;
};

// What the predictions of a run are over: the links within a node (--link), the nodes
// (--nodes) and the links between them (--network), and the device counts.
struct PredictionPlan {
  std::vector<parallel::Link> links;  // "measured" ones are filled in by the run (measure_world_link)
  int nodes = 1;
  std::vector<parallel::Link> networks;  // with nodes > 1
  std::vector<int> counts;               // empty: per link (2, 4, 8, the machine's GPUs, or the run's ranks)
  // For a replay (--replay_from): mpi:N rows of ranks that wait out the compute (they share
  // nothing, and the all-reduces overlap the wait), whatever the saved row's backend.
  bool replay = false;
  // The samples/s of the source's cpu_baseline row, for the predicted rows' speedup_vs_cpu; 0: none.
  double cpu_samples_per_s = 0;
  int gpus_per_node = 8;  // the most an NVLink link joins in one node (--gpus_per_node)
};

// Refuses (tb::InputError naming the flag) `devices` that do not divide among `nodes` nodes.
void check_nodes_divide(int devices, int nodes);
// Refuses (tb::InputError naming the flags) `devices` on `nodes` nodes over `link` where they do
// not divide among the nodes, or one node would hold more than an NVLink link joins
// (gpus_per_node).
void check_prediction_shape(const parallel::Link& link, int devices, int nodes, int gpus_per_node);

// One all-reduce of `bytes` predicted over each of `plan`'s links (and networks, with nodes) for
// each of its counts (empty: 2, 4 and 8 per node): a line each with its time, NCCL's algorithm
// and protocol, and its bus bandwidth as nccl-tests reports it (bytes / time x 2(N-1)/N), each
// with its band (the links' slow and fast ends). Throws tb::InputError on a shape
// check_prediction_shape refuses.
std::vector<std::string> predict_allreduce_lines(double bytes, const PredictionPlan& plan);

// The predicted rows of one one-device benchmark from `rows`, its rows in a CSV (the ok
// iteration rows: their median samples/s, the last one's prediction_inputs), for `backend`'s
// devices over `plan`. Empty where the rows hold no prediction inputs; throws tb::InputError
// on inputs that cannot be read or hold no gradient buckets, and on a row without a batch. `now`: the git commit and
// time the predicted rows carry.
std::vector<PredictedRow> predict_rows(const std::vector<const Row*>& rows, const PredictionPlan& plan,
                                       const MachineContext& now);

class Predictor {
 public:
  // Parses --link, --nodes and --network (tb::InputError on a bad one, before anything is
  // measured).
  explicit Predictor(const Flags& flags);

  // The links of the MPI world, swept at start-up (a collective: every rank calls it): MPI's,
  // which CPU rows under mpirun predict with (--link=measured, or by default), and where a gpu:N
  // across ranks runs among `benchmarks`, NCCL's between the ranks' GPUs, which GPU rows take
  // for --link=measured. Each is printed.
  void measure_world_link(const std::vector<BenchInfo>& benchmarks);

  // The policy after the last repetition of `info`: a one-device train row with a timeline is
  // predicted over the run's links from `rows` (its rows so far); anything else is not.
  // Remembers them for compare().
  // `cpu_samples_per_s`: the run's rate of info's cpu_baseline row (0: none), for the predicted
  // rows' speedup over the CPU.
  std::vector<PredictedRow> after_benchmark(const BenchInfo& info, const std::vector<const Row*>& rows,
                                            const MachineContext& machine, double cpu_samples_per_s = 0);

  // The prediction a replay is compared with: the saved row predicted for this world's ranks over
  // the run's links (--link, default the ranks' measured one; --nodes, --network). Rank 0 only.
  std::vector<PredictedRow> for_replay(const BenchInfo& replay, const MachineContext& machine);

  // A measured (or replayed) data-parallel row against the predictions made for it in this run
  // (from a row of its per-replica threads): the one it is compared with (the run's measured
  // link where there is one, else the first), its verdict word and the console line.
  struct Comparison {
    std::string prediction;  // the predicted row's benchmark
    std::string verdict;     // inside_band or outside_band
    std::string line;
  };
  std::optional<Comparison> compare(const BenchInfo& measured, double samples_per_s) const;

 private:
  PredictionPlan plan_for(const BenchInfo& info) const;
  void remember(const BenchInfo& from, const std::vector<PredictedRow>& predicted);

  Flags flags_;
  std::optional<parallel::Link> world_link_, nccl_link_;
  struct Made {
    std::string benchmark, from;
    int threads = 0;  // of the row it was made from
    std::string link, link_text;
    double point = 0, low = 0, high = 0;
  };
  std::map<std::string, std::vector<Made>> made_;  // by what a measured row of the device would be
};

}  // namespace tb::bench
