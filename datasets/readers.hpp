// Readers of the real dataset formats: MNIST/Fashion-MNIST IDX files (plain or gzip) and the
// CIFAR-10 binary version. Every error names the file, what was wrong and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tb::data {

// Images as bytes, sample-major: count x channels x rows x cols.
struct ImageSet {
  std::int64_t count = 0, channels = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;
  std::vector<std::int32_t> labels;  // count values in [0, classes)
  std::int64_t sample_size() const { return channels * rows * cols; }
};

// How many bytes a file may hold: exactly (an IDX file, from its header) or at most (a CIFAR-10
// file), and why, for the message.
struct SizeLimit {
  std::uint64_t bytes = ~std::uint64_t(0);
  bool exact = false;
  std::string why;  // "for 3 images of 28x28 (its header)"
};

// Whole content of a file, gunzipped when it is gzip-compressed (by its magic bytes), of at most
// `limit` bytes: a larger file (or gzip stream) is an error naming it and the limit, and nothing
// beyond the limit is read (a plain file's size is checked before reading). Throws
// tb::InputError on a path that is not a readable regular file (saying what it is), a corrupt
// gzip stream, or a larger file.
std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path, const SizeLimit& limit = {});
// The first `bytes` bytes (gunzipped), fewer where the file is shorter: a header, read first.
std::vector<std::uint8_t> read_prefix(const std::string& path, std::uint64_t bytes);

// The most samples an IDX file may declare (MNIST has 60000; a header claiming more is corrupt
// or foreign) and the most records a CIFAR-10 file may hold (the whole dataset has 60000).
inline constexpr std::int64_t kMaxIdxSamples = 10'000'000;
inline constexpr std::int64_t kMaxCifarRecords = 60'000;

// IDX images (magic 0x00000803, dims count x rows x cols) and labels (magic 0x00000801).
// expected_rows/cols: the dimensions the model needs (28 x 28 for MNIST).
ImageSet read_idx(const std::string& images_path, const std::string& labels_path, std::int64_t expected_rows,
                  std::int64_t expected_cols, std::int32_t classes);

// CIFAR-10 binary files: records of 1 label byte + 3072 pixel bytes (3 x 32 x 32, RGB planes).
ImageSet read_cifar10(const std::vector<std::string>& paths);

// Parsers over bytes already in memory; `name` is used in error messages. The fuzz targets
// call these.
ImageSet parse_idx(const std::vector<std::uint8_t>& images, const std::string& images_name,
                   const std::vector<std::uint8_t>& labels, const std::string& labels_name, std::int64_t expected_rows,
                   std::int64_t expected_cols, std::int32_t classes);
void append_cifar10(const std::vector<std::uint8_t>& bytes, const std::string& name, ImageSet& into);

}  // namespace tb::data
