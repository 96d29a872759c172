// The median of a row's repetitions, as the summary, the baselines of scaling efficiency and the
// precision notes take it.
#pragma once

#include <algorithm>
#include <vector>

namespace tb::bench {

// The median of `values`; -1 where there are none.
inline double median(std::vector<double> values) {
  if (values.empty()) return -1;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace tb::bench
