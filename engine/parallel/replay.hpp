// A one-device step replayed without its model (trainbench --replay_from): the network's truth
// without the GPUs. Each step waits out the compute a saved row measured (a step time drawn from
// its saved distribution, every phase scaled to it, so that stragglers are real) and makes the
// saved gradient buckets ready at their saved times, one flat segment each, so that the
// data-parallel path (ReplicaNetwork, bucket size 1: each segment its own bucket) all-reduces the
// same bytes at the same moments for real, over whatever links the ranks have.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/network.hpp"
#include "engine/parallel/predict.hpp"

namespace tb::parallel {

class ReplayNetwork final : public Network {
 public:
  // `timeline`: the saved buckets (bytes, ready times), backward's end and the step's end, the
  // means of the saved steps; `step_times`: the saved steps' distribution (its quantiles) that
  // each step's time is drawn from; `seed`: this replica's draws; `dp_overhead_s`: what the saved
  // device's data-parallel path added to a step (its probe's point; 0 where not measured), waited
  // out once the all-reduces are done, since the replay's own path moves no real gradients.
  ReplayNetwork(StepTimeline timeline, std::vector<double> step_times, std::uint64_t seed, double dp_overhead_s = 0);

  void set_batch(const BatchView&) override {}
  float forward() override;  // the step starts: its time drawn
  float evaluate() override { return 0; }
  std::int64_t correct() const override { return -1; }
  void backward() override;  // the buckets ready at their times, then backward's end
  void update() override;    // the rest of the step

  std::vector<float> read_output(int) const override { return {}; }
  std::vector<float> read_grad(int) const override { return {}; }
  void set_output_grad(const std::vector<float>&) override {}
  std::vector<float> read_param(int, int) const override { return params_; }
  std::vector<float> read_param_grad(int, int) const override { return {}; }
  void write_param(int, int, const std::vector<float>& value) override { params_ = value; }
  std::int64_t param_bytes() const override { return std::int64_t(params_.size() * sizeof(float)); }
  std::vector<FlatSegment> gradient_segments() override;
  std::vector<FlatSegment> param_segments() override;
  std::uint64_t param_checksum() override;
  void set_step_hook(std::function<void(int node)> hook) override { hook_ = std::move(hook); }

  // Called every kTurn while the compute is waited out, until it returns false: the
  // communicator's progress(), so that MPI moves the all-reduces in flight beside the wait as
  // NCCL moves a GPU's beside its kernels (between MPI calls, Open MPI moves none of a TCP
  // all-reduce beyond what its sockets hold).
  void set_progress(std::function<bool()> progress) { progress_ = std::move(progress); }
  static constexpr double kTurn = 100e-6;

  // The bucket size to give ReplicaNetwork: each segment is one saved bucket.
  static constexpr std::size_t kBucketBytes = 1;
  // The seconds the last step was drawn to take (its compute, before any communication).
  double last_step_s() const { return step_s_; }

 private:
  void wait_until(double seconds_after_start) const;

  StepTimeline timeline_;
  std::vector<double> step_times_;  // ascending
  std::mt19937_64 random_;
  std::vector<float> gradients_;  // every bucket's bytes, as floats
  std::vector<float> params_{0.0f};
  std::function<void(int node)> hook_;
  std::function<bool()> progress_;
  double dp_overhead_s_ = 0;
  double start_ = 0, step_s_ = 0, scale_ = 1;
};

// Batches of no data for a replay: `batch` samples each, endless.
class ReplayData final : public Dataset {
 public:
  explicit ReplayData(std::int64_t batch) { batch_.batch = batch; }
  const Batch& next() override { return batch_; }
  std::string name() const override { return "replay"; }
  std::string source() const override { return "replayed"; }
  void feed(Network&, const Batch&) const override {}

 private:
  Batch batch_;
};

}  // namespace tb::parallel
