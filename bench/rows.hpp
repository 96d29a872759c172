// The columns every row of a benchmark shares, measured or predicted: its identity and the
// machine context; and a row's counter cells.
#pragma once

#include <map>
#include <string>

#include "bench/configs.hpp"
#include "bench/context.hpp"
#include "bench/csv.hpp"

namespace tb::bench {

// The identity columns of `info`'s rows and the machine context.
Row identity_row(const BenchInfo& info, const MachineContext& machine);
// The counter columns among `counters`, formatted, into `row` (aggregate: a mean, median, ... row).
void add_counters(Row& row, const std::map<std::string, double>& counters, bool aggregate);

}  // namespace tb::bench
