// What a prediction needs of a one-device row, kept in the row itself (the CSV's
// prediction_inputs column, results/SCHEMA.md): the gradient buckets' bytes and ready times, the
// step-time distribution in 21 quantiles, the data-parallel path's overhead and the sharing
// slow-down where they were measured. Predictions in the run and after it (--predict_from) and
// replays (--replay_from) all read it from there, so each is made from the same figures.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/output/csv.hpp"

#include "engine/parallel/predict.hpp"

namespace tb::bench {

// The step-time quantiles kept: 0, 5%, ..., 100%.
inline constexpr int kStepQuantiles = 21;

// `one`'s timeline, step times (as kStepQuantiles quantiles), overhead and sharing as the column's
// text: "v1;buckets=BYTES@READY_S,...;backward_end=S;step_end=S;timeline_steps=N;
// steps=Q0,...,Q20;dp=V,LOW,HIGH;sharing=V,LOW,HIGH;sharing_ranks=N;sharing_hosts=N" (numbers in
// %.9g; dp and the sharing fields only where measured).
std::string format_prediction_inputs(const parallel::OneDevice& one, int sharing_ranks, int sharing_hosts);

// The column's text read back: the OneDevice it describes (without step_s and batch, which are
// the row's), with the quantiles as its step times. Throws tb::InputError saying what is wrong.
struct PredictionInputs {
  parallel::OneDevice one;
  int sharing_ranks = 0, sharing_hosts = 0;  // 0: no sharing measured
};
PredictionInputs parse_prediction_inputs(const std::string& text);

// The rows of a saved run that predictions (--predict_from) and replays (--replay_from) start
// from: its ok, measured, one-device train/ iteration rows that `filter` (--benchmark_filter, a
// regular expression searched in the name) takes and that hold prediction_inputs, by benchmark
// in the file's order. Throws tb::InputError naming `flag` and `path` where there are none (with
// how many rows lacked the inputs) or the filter is no regular expression.
struct SavedRows {
  std::vector<std::string> names;
  std::map<std::string, std::vector<const Row*>> rows;  // by benchmark
};
SavedRows saved_one_device_rows(const std::vector<Row>& rows, const std::string& filter, const std::string& flag,
                                const std::string& path);

}  // namespace tb::bench
