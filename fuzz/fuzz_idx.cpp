// libFuzzer target for the IDX parser (MNIST / Fashion-MNIST): arbitrary image and label files
// must either parse into a consistent set or raise tb::InputError naming the file; anything else
// (a crash, a sanitizer report, another exception, a broken set) is a bug.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "datasets/readers.hpp"
#include "engine/core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte is the length of the label file, taken from the end of the input; the
  // image file is what lies between. Counting from the end keeps a valid pair (16 + 784 n
  // image bytes, 8 + n label bytes) within reach of a one-byte split.
  const std::size_t rest = size - 1;
  const std::size_t label_bytes = std::min<std::size_t>(data[0], rest);
  const std::uint8_t* images_begin = data + 1;
  const std::uint8_t* labels_begin = images_begin + (rest - label_bytes);
  const std::vector<std::uint8_t> images(images_begin, labels_begin);
  const std::vector<std::uint8_t> labels(labels_begin, data + size);
  const std::string images_name = "fuzz-images-idx3-ubyte", labels_name = "fuzz-labels-idx1-ubyte";
  try {
    const tb::data::ImageSet set = tb::data::parse_idx(images, images_name, labels, labels_name, 28, 28, 10);
    // A set that parsed must be whole: the trainer indexes it without further checks.
    if (set.count < 0 || set.channels != 1 || set.rows != 28 || set.cols != 28) __builtin_trap();
    if (set.pixels.size() != std::size_t(set.count) * 784 || set.labels.size() != std::size_t(set.count))
      __builtin_trap();
    for (std::int32_t label : set.labels)
      if (label < 0 || label >= 10) __builtin_trap();
  } catch (const tb::InputError& e) {
    // Expected for broken input; the message must say which file is at fault.
    const std::string message = e.what();
    if (message.find(images_name) == std::string::npos && message.find(labels_name) == std::string::npos)
      __builtin_trap();
  }
  return 0;
}
