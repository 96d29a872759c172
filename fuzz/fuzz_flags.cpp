// libFuzzer target for trainbench's flag parser: any command line must either parse into flags
// within their documented ranges or raise tb::InputError naming the flag; anything else (a crash,
// a sanitizer report, another exception, a value past its range) is a bug. The input is the
// arguments after the program's name, separated by NUL bytes.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/cli/flags.hpp"
#include "engine/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kMaxArgs = 16;
  std::vector<std::string> args{"trainbench"};
  std::string current;
  for (std::size_t i = 0; i < size && args.size() <= kMaxArgs; ++i) {
    if (data[i] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current += char(data[i]);
    }
  }
  if (!current.empty() && args.size() <= kMaxArgs) args.push_back(current);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  int argc = int(argv.size());
  try {
    const tb::bench::Flags f = tb::bench::parse_flags(argc, argv.data());
    // What parsed stays in range: the fields feed int, size and thread counts.
    if (argc < 1 || argc > int(args.size())) __builtin_trap();
    if (f.batch && (*f.batch < 1 || *f.batch > (std::int64_t(1) << 20))) __builtin_trap();
    if (f.loader_workers < 0 || f.loader_workers > 1024 || f.prefetch < 1 || f.prefetch > 1024) __builtin_trap();
    if (f.iterations < 1 || (f.epochs && *f.epochs < 1) || (f.warmup_steps && *f.warmup_steps < 0)) __builtin_trap();
    if (!std::isfinite(f.gpu_memory_limit) || f.gpu_memory_limit < 0) __builtin_trap();
    if (f.lr && !(std::isfinite(*f.lr) && *f.lr > 0 && *f.lr <= 1e6)) __builtin_trap();
    if (f.target_accuracy < 0 || f.target_accuracy > 1) __builtin_trap();
    for (int g : f.gpus)
      if (g < 0 || g > 1023) __builtin_trap();
  } catch (const tb::InputError&) {
    // A refused flag: the message names it.
  }
  return 0;
}
