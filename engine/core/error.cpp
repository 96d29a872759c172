// Formatting of failed checks.
#include "engine/core/error.hpp"

#include <string_view>

namespace tb {

void throw_check(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("{} ({} failed at {}:{})", msg, expr, source_file(file), line));
}

void fail_call(CallFailure kind, std::string_view library, std::string_view status, const char* call, const char* file,
               int line) {
  const std::string message = fmt::format("{} failed: {} ({}:{}) [{}]", library, status, source_file(file), line, call);
  if (kind == CallFailure::OutOfMemory)
    throw OutOfMemory(
        fmt::format("{}; the device is out of memory (lower --batch, or raise --gpu_memory_limit if "
                    "it is set)",
                    message));
  throw BackendError(message);
}

// __FILE__ is relative to the tree already: every source is compiled with the tree's path mapped
// away (-ffile-prefix-map, cmake/Install.cmake), so that no binary, installed or not, names it.
const char* source_file(const char* file) { return file; }

}  // namespace tb
