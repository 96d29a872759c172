// The statistics every figure of a run is taken with, one definition each: the median of
// repetitions (rates, steps), the mean of a probe's steps, a quantile of step times, the spread
// of step times (their interquartile range), and scaling efficiency. The harness, the prediction
// model and its inputs all use these.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tb {

// The median of `values`; -1 where there are none.
inline double median(std::vector<double> values) {
  if (values.empty()) return -1;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The mean of `values` (a probe's steps: the ranks' sharing); 0 where there are none.
inline double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / double(values.size());
}

// The q-quantile (0 <= q <= 1) of ascending `sorted`, the nearest rank: sorted[round(q (n - 1))].
inline double quantile_of_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::size_t(q * double(sorted.size() - 1) + 0.5)];
}

// The spread of step times: the interquartile range (0 for fewer than 4 values, where quartiles
// say nothing). The same steps measured again move their median by about this much.
inline double interquartile_range(std::vector<double> values) {
  if (values.size() < 4) return 0;
  std::sort(values.begin(), values.end());
  return quantile_of_sorted(values, 0.75) - quantile_of_sorted(values, 0.25);
}

// The interquartile range over the median: the spread as a share of the step.
inline double relative_spread(const std::vector<double>& values) {
  const double m = median(values);
  return m > 0 ? interquartile_range(values) / m : 0;
}

// Scaling efficiency: the samples/s of N devices sharing gradients over N times one device's
// alone (1: perfect scaling). A measured row's (bench/run/run.cpp) and a predicted one's
// (engine/parallel/predict.cpp) both take it from here; scripts/tbcsv.py's scaling_efficiency()
// is the same definition for rows written before the column.
inline double scaling_efficiency(double samples_per_s, int devices, double one_device_samples_per_s) {
  return samples_per_s / (double(devices) * one_device_samples_per_s);
}

}  // namespace tb
