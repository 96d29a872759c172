// libFuzzer target for the CIFAR-10 binary parser: arbitrary bytes must either append whole
// records or raise tb::InputError naming the file and leave the set untouched; anything else
// (a crash, a sanitizer report, another exception, a broken set) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/readers.hpp"
#include "engine/core/error.hpp"

namespace {

// The set must stay consistent: the loader indexes labels and pixels by count alone.
void check_whole(const tb::data::ImageSet& set) {
  if (set.labels.size() != std::size_t(set.count) || set.pixels.size() != std::size_t(set.count) * 3072)
    __builtin_trap();
  for (std::int32_t label : set.labels)
    if (label < 0 || label >= 10) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> bytes(data, data + size);
  const std::string name = "fuzz_batch.bin";
  // Start from one valid record so that a failed append has something to leave intact.
  tb::data::ImageSet set;
  std::vector<std::uint8_t> first(3073, 0);
  first[0] = 3;
  tb::data::append_cifar10(first, "first.bin", set);
  try {
    tb::data::append_cifar10(bytes, name, set);
    if (set.channels != 3 || set.rows != 32 || set.cols != 32 || set.count != 1 + std::int64_t(size / 3073))
      __builtin_trap();
  } catch (const tb::InputError& e) {
    if (std::string(e.what()).find(name) == std::string::npos) __builtin_trap();
    if (set.count != 1) __builtin_trap();
  }
  check_whole(set);
  return 0;
}
