// Typed errors and the one status-check pattern used everywhere in trainbench.
// A benchmark catches tb::Error, reports its row as failed with the message, and goes on.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace tb

// TB_CHECK(cond, "format", args...): throws tb::Error naming the condition and file:line.
#define TB_CHECK(cond, ...)                                                       \
  do {                                                                            \
    if (!(cond)) ::tb::throw_check(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)
