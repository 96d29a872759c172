// Formatting of failed checks.
#include "engine/core/error.hpp"

namespace tb {

void throw_check(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("{} ({} failed at {}:{})", msg, expr, file, line));
}

}  // namespace tb
