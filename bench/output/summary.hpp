// The table printed at the end of every run (and written as Markdown with --summary=FILE): the
// suite's headline. A line per workload and precision: samples/s per device configuration,
// speedup over the same machine's cpu row, scaling efficiency of each multi-device row, peak
// memory and communication share; then each skipped configuration once, with its reason.
#pragma once

#include <string>
#include <vector>

#include "bench/output/csv.hpp"

namespace tb::bench {

// The summary of `rows` (the CSV rows of one run: iterations, aggregates, epochs, skipped) as
// aligned text (markdown = false) or a Markdown document. Empty where no train/ row ran or was
// skipped.
std::string summary_table(const std::vector<Row>& rows, bool markdown);

}  // namespace tb::bench
