// Typed errors and the one status-check pattern used everywhere in trainbench: the one header of
// every check macro. A benchmark catches tb::Error, reports its row as failed with the message,
// and goes on.
//
// A failed library call (CUDA runtime, cuDNN, cuBLAS, oneDNN, NCCL, MPI) reads
//   <library> failed: <status> (<file>:<line>) [<call>]
// with the file relative to the source tree, and throws tb::OutOfMemory for an allocation
// failure, tb::BackendError otherwise. Each backend gives tb::check_status(status, call, file,
// line) for its library's status type; the macros below are the only definitions.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tb {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user: a flag, a file, a model name. The message names the fix.
class InputError : public Error {
 public:
  using Error::Error;
};

// A library call (oneDNN, CUDA, cuDNN, NCCL, MPI) returned an error status.
class BackendError : public Error {
 public:
  using Error::Error;
};

// A device or a cap ran out of memory.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// A run failed one of its own checks: non-finite loss, a loss that did not fall.
class CheckFailed : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_check(const char* expr, const char* file, int line, const std::string& msg);

// The one message format of a failed library call, thrown as tb::OutOfMemory or tb::BackendError.
enum class CallFailure { Backend, OutOfMemory };
[[noreturn]] void fail_call(CallFailure kind, std::string_view library, std::string_view status, const char* call,
                            const char* file, int line);
// `file` (a __FILE__) relative to the source tree, so that a CSV row shared from one machine does
// not carry its build machine's paths.
const char* source_file(const char* file);

// MPI returns plain ints: this gives them a type of their own for check_status.
struct MpiStatus {
  int code;
};

}  // namespace tb

// TB_CU(call): a CUDA runtime, cuDNN or cuBLAS call; TB_NCCL(call), TB_MPI(call): an NCCL or MPI
// call; TB_DNNL(expr): oneDNN code, whose dnnl::error becomes the same kind of failure.
#define TB_CU(expr) ::tb::check_status((expr), #expr, __FILE__, __LINE__)
#define TB_NCCL(expr) ::tb::check_status((expr), #expr, __FILE__, __LINE__)
#define TB_MPI(expr) ::tb::check_status(::tb::MpiStatus{(expr)}, #expr, __FILE__, __LINE__)
#define TB_DNNL(expr)                                    \
  do {                                                   \
    try {                                                \
      expr;                                              \
    } catch (const ::dnnl::error& e_) {                  \
      ::tb::check_status(e_, #expr, __FILE__, __LINE__); \
    }                                                    \
  } while (0)

// TB_CHECK(cond, "format", args...): throws tb::Error naming the condition and file:line.
#define TB_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) ::tb::throw_check(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
