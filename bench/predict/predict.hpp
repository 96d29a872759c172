// Predicted N-device rows, from choice to row, in one place: which links and device counts a
// one-device train row is predicted over, what each one-device run measured for it (its
// timeline, step times, the data-parallel path's overhead, how much slower devices sharing a
// machine compute), the model (engine/parallel/predict.hpp), the predicted CSV rows with their
// console lines, and a measured multi-device row set beside the predictions made for it. The
// reporter writes the rows it is handed (docs/prediction.md).
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

class Predictor {
 public:
  // Parses --link (tb::InputError on a bad one, before anything is measured).
  explicit Predictor(const Flags& flags);

  // The links of the MPI world, swept at start-up (a collective: every rank calls it): MPI's,
  // which CPU rows under mpirun predict with (--link=measured, or by default), and where a gpu:N
  // across ranks runs among `benchmarks`, NCCL's between the ranks' GPUs, which GPU rows take
  // for --link=measured. Each is printed.
  void measure_world_link(const std::vector<BenchInfo>& benchmarks);

  // What a one-device run measured: its timeline and step times, the data-parallel overhead
  // and the sharing slow-down where it measured them (the runs call it; the last call wins).
  void record(const std::string& benchmark, parallel::OneDevice measured);

  // The predicted rows of one-device train row `info`, which ran at `samples_per_s` (its median
  // over repetitions); empty where it recorded nothing or no link applies. Remembers them for
  // compare().
  std::vector<PredictedRow> predict(const BenchInfo& info, double samples_per_s, const MachineContext& machine);

  // For a measured multi-device row: a line per prediction made for it in this run (from a row of
  // its per-replica threads, over each link), with the ratio and whether it fell in the band.
  std::vector<std::string> compare(const BenchInfo& measured, double samples_per_s) const;

 private:
  std::vector<parallel::Link> links_for(const BenchInfo& info) const;
  std::vector<int> device_counts(const BenchInfo& info, const parallel::Link& link) const;

  std::vector<std::string> links_;  // --link's names
  std::optional<parallel::Link> world_link_, nccl_link_;
  std::map<std::string, parallel::OneDevice> measured_;  // by benchmark
  struct Made {
    std::string from;
    int threads = 0;  // of the row it was made from
    parallel::Link link;
    parallel::Prediction prediction;
  };
  std::map<std::string, std::vector<Made>> made_;  // by what a measured row of the device would be
};

}  // namespace tb::bench
