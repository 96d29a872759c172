// Checks the datasets: the IDX and CIFAR-10 parsers on broken and good files (plain and gzip),
// Debian's Fashion-MNIST, the loader (shuffling, worker determinism, normalisation, augmentation,
// shutdown), the sine wave, the splits, and that the MLP and the LSTM learn from real data.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "datasets/loader.hpp"
#include "datasets/readers.hpp"
#include "datasets/sine.hpp"
#include "datasets/sources.hpp"
#include "engine/core/error.hpp"
#include "engine/core/timer.hpp"
#include "engine/cpu/network.hpp"
#include "engine/train/epochs.hpp"
#include "engine/train/trainer.hpp"
#include "models/models.hpp"

namespace tb::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

constexpr const char* kDebianFashion = "/usr/share/datasets/fashion-mnist";
constexpr std::int64_t kCifarRecord = 1 + 3 * 32 * 32;

// A fresh folder under the system's temporary directory, removed with its content at the end:
// tests running in parallel (ctest -j) each get their own.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device entropy;
    path_ = fs::temp_directory_path() /
            fmt::format("tb_test_datasets_{}_{}_{:08x}", ::getpid(), counter++, std::uint32_t(entropy()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

void put_be32(Bytes& b, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(std::uint8_t(v >> shift));
}

Bytes random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (std::uint8_t& x : b) x = std::uint8_t(rng());
  return b;
}

// An IDX image file: magic, count, rows, cols, then the pixels.
Bytes idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x00000803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

// An IDX label file: magic, count (the number of labels unless given), then the labels.
Bytes idx_labels(const Bytes& labels, std::int64_t count = -1, std::uint32_t magic = 0x00000801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, std::uint32_t(count < 0 ? std::int64_t(labels.size()) : count));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// CIFAR-10 records whose pixels follow a pattern of the record's global index, so that the
// order of records and of the colour planes can be checked.
Bytes cifar_records(int first, int count) {
  Bytes b;
  for (int r = first; r < first + count; ++r) {
    b.push_back(std::uint8_t((r * 3) % 10));
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 32 * 32; ++i) b.push_back(std::uint8_t(r * 7 + c * 85 + i));
  }
  return b;
}

void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

void write_gzip(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb9");
  ASSERT_NE(f, nullptr) << "cannot write " << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size())) << path;
  ASSERT_EQ(gzclose(f), Z_OK) << path;
}

Bytes read_plain(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// `f` must throw tb::InputError whose message holds every one of `parts`: the file's name,
// what was wrong and what was expected.
template <class F>
void expect_input_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const InputError& e) {
    const std::string message = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(message.find(part), std::string::npos) << "the message \"" << message << "\" lacks \"" << part << "\"";
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than tb::InputError: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw";
}

// The message of the tb::Error `f` throws, or "(no error)".
template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---------------------------------------------------------------------------------------------
// Parsers on broken files.

class BrokenFiles : public testing::Test {
 protected:
  // Writes an image and a label file and parses them as MNIST (28x28, 10 classes).
  void parse(const Bytes& images, const Bytes& labels) {
    write_file(images_path(), images);
    write_file(labels_path(), labels);
    read_idx(images_path(), labels_path(), 28, 28, 10);
  }
  std::string images_path() const { return dir_.file("train-images-idx3-ubyte"); }
  std::string labels_path() const { return dir_.file("train-labels-idx1-ubyte"); }
  static Bytes pixels(std::size_t count) { return random_bytes(count * 28 * 28, 7); }

  TempDir dir_;
};

TEST_F(BrokenFiles, ImageMagic) {
  expect_input_error(
      [&] {
        parse(idx_images(3, 28, 28, pixels(3), 0x00000801), idx_labels({1, 2, 3}));
      },
      {images_path(), "magic number 0x00000801", "expected 0x00000803", "image file"});
}

TEST_F(BrokenFiles, LabelMagic) {
  expect_input_error(
      [&] {
        parse(idx_images(3, 28, 28, pixels(3)), idx_labels({1, 2, 3}, -1, 0x00000803));
      },
      {labels_path(), "magic number 0x00000803", "expected 0x00000801", "label file"});
}

TEST_F(BrokenFiles, WrongDimensions) {
  expect_input_error(
      [&] {
        parse(idx_images(3, 27, 28, random_bytes(3 * 27 * 28, 1)), idx_labels({1, 2, 3}));
      },
      {images_path(), "27x28", "expected 28x28"});
  expect_input_error(
      [&] {
        parse(idx_images(3, 28, 27, random_bytes(3 * 28 * 27, 1)), idx_labels({1, 2, 3}));
      },
      {images_path(), "28x27", "expected 28x28"});
}

TEST_F(BrokenFiles, TruncatedImages) {
  Bytes images = idx_images(3, 28, 28, pixels(3));
  images.resize(images.size() - 100);
  expect_input_error(
      [&] {
        parse(images, idx_labels({1, 2, 3}));
      },
      {images_path(), fmt::format("{} bytes", 16 + 3 * 784 - 100), fmt::format("expected {}", 16 + 3 * 784),
       "truncated"});
}

TEST_F(BrokenFiles, ImageHeaderCut) {
  expect_input_error(
      [&] {
        parse(Bytes{0, 0, 8, 3, 0, 0}, idx_labels({1}));
      },
      {images_path(), "6 bytes", "too short", "16 bytes"});
}

// Headers one byte short of their 16 and 8 bytes are refused as such, not read past their end.
TEST_F(BrokenFiles, HeadersOneByteShort) {
  const Bytes images = idx_images(1, 28, 28, pixels(1)), labels = idx_labels({1});
  expect_input_error([&] { parse(Bytes(images.begin(), images.begin() + 15), labels); },
                     {images_path(), "15 bytes", "too short", "16 bytes"});
  expect_input_error([&] { parse(images, Bytes(labels.begin(), labels.begin() + 7)); },
                     {labels_path(), "7 bytes", "too short", "8 bytes"});
}

TEST_F(BrokenFiles, TruncatedLabels) {
  expect_input_error(
      [&] {
        parse(idx_images(5, 28, 28, pixels(5)), idx_labels({1, 2, 3}, 5));
      },
      {labels_path(), "11 bytes", "expected 13", "truncated"});
  expect_input_error(
      [&] {
        parse(idx_images(1, 28, 28, pixels(1)), Bytes{0, 0, 8, 1});
      },
      {labels_path(), "4 bytes", "too short", "8 bytes"});
}

TEST_F(BrokenFiles, TrailingBytes) {
  Bytes images = idx_images(3, 28, 28, pixels(3));
  images.insert(images.end(), 7, 0);
  expect_input_error(
      [&] {
        parse(images, idx_labels({1, 2, 3}));
      },
      {images_path(), fmt::format("expected {}", 16 + 3 * 784), "trailing bytes"});
  Bytes labels = idx_labels({1, 2, 3});
  labels.push_back(4);
  expect_input_error([&] { parse(idx_images(3, 28, 28, pixels(3)), labels); },
                     {labels_path(), "12 bytes", "expected 11", "trailing bytes"});
}

// parse_idx, which the fuzz targets call on bytes in memory, checks the sizes itself: read_idx's
// limit on the file is not the only check of trailing bytes.
TEST_F(BrokenFiles, ParseIdxRefusesTrailingBytesInMemory) {
  Bytes images = idx_images(3, 28, 28, pixels(3));
  images.push_back(0);
  expect_input_error(
      [&] {
        parse_idx(images, "images", idx_labels({1, 2, 3}), "labels", 28, 28, 10);
      },
      {"images: 2369 bytes", "expected 2368", "trailing bytes"});
  Bytes labels = idx_labels({1, 2, 3});
  labels.push_back(4);
  expect_input_error([&] { parse_idx(idx_images(3, 28, 28, pixels(3)), "images", labels, "labels", 28, 28, 10); },
                     {"labels: 12 bytes", "expected 11", "trailing bytes"});
}

// A gzip file that expands to a few bytes more than its header allows is refused while it is read,
// as soon as the bytes pass the limit, not after the whole stream is in memory.
TEST_F(BrokenFiles, GzipTrailingBytesRefusedWhileReading) {
  Bytes images = idx_images(3, 28, 28, pixels(3));
  images.insert(images.end(), 7, 0);
  const std::string path = dir_.file("train-images-idx3-ubyte.gz");
  write_gzip(path, images);
  write_file(labels_path(), idx_labels({1, 2, 3}));
  expect_input_error([&] { read_idx(path, labels_path(), 28, 28, 10); },
                     {path, "more than 2368 bytes once decompressed", "expected 2368"});
}

TEST_F(BrokenFiles, CountsDisagree) {
  expect_input_error(
      [&] {
        parse(idx_images(3, 28, 28, pixels(3)), idx_labels({1, 2}));
      },
      {images_path(), labels_path(), "3 images", "2 labels", "same split"});
}

TEST_F(BrokenFiles, LabelOutOfRange) {
  expect_input_error(
      [&] {
        parse(idx_images(3, 28, 28, pixels(3)), idx_labels({1, 10, 3}));
      },
      {labels_path(), "label 10 of sample 1", "[0, 10)"});
}

TEST_F(BrokenFiles, CifarSizeNotRecords) {
  const std::string path = dir_.file("data_batch_1.bin");
  Bytes bytes = cifar_records(0, 2);
  bytes.resize(bytes.size() - 5);
  write_file(path, bytes);
  expect_input_error([&] { read_cifar10({path}); },
                     {path, fmt::format("{} bytes", 2 * kCifarRecord - 5), "3073-byte", "truncated"});
}

TEST_F(BrokenFiles, CifarEmpty) {
  const std::string path = dir_.file("data_batch_1.bin");
  write_file(path, {});
  expect_input_error([&] { read_cifar10({path}); }, {path, "empty", "3073-byte"});
}

TEST_F(BrokenFiles, CifarLabelOutOfRange) {
  const std::string good = dir_.file("data_batch_1.bin"), bad = dir_.file("data_batch_2.bin");
  write_file(good, cifar_records(0, 1));
  Bytes bytes = cifar_records(0, 3);
  bytes[std::size_t(kCifarRecord)] = 10;  // record 1
  write_file(bad, bytes);
  expect_input_error([&] { read_cifar10({good, bad}); }, {bad, "label 10 of record 1", "[0, 10)", "CIFAR-100"});
  // A failed append leaves the set as it was: count, labels and pixels in step.
  ImageSet set;
  append_cifar10(read_plain(good), good, set);
  EXPECT_THROW(append_cifar10(read_plain(bad), bad, set), InputError);
  EXPECT_EQ(set.count, 1);
  EXPECT_EQ(set.labels.size(), 1u);
  EXPECT_EQ(set.pixels.size(), std::size_t(kCifarRecord - 1));
  // The last record's label is checked like every other.
  Bytes last_bad = cifar_records(0, 3);
  last_bad[std::size_t(2 * kCifarRecord)] = 255;
  write_file(bad, last_bad);
  expect_input_error([&] { read_cifar10({bad}); }, {bad, "label 255 of record 2", "[0, 10)"});
}

TEST_F(BrokenFiles, CorruptGzip) {
  // A valid gzip header (magic, deflate, no flags, mtime, xfl, OS) followed by garbage whose
  // first byte asks for deflate block type 3, which does not exist.
  Bytes bytes{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
  Bytes garbage = random_bytes(300, 3);
  garbage[0] = 0xff;
  bytes.insert(bytes.end(), garbage.begin(), garbage.end());
  const std::string path = dir_.file("train-images-idx3-ubyte.gz");
  write_file(path, bytes);
  write_file(labels_path(), idx_labels({1}));
  expect_input_error([&] { read_idx(path, labels_path(), 28, 28, 10); },
                     {path, "corrupt gzip stream", "download the file again"});
  expect_input_error([&] { read_cifar10({path}); }, {path, "corrupt gzip stream", "download the file again"});
}

TEST_F(BrokenFiles, GzipCutInHalf) {
  // Random pixels do not compress, so half the file cuts the deflate data, not the header.
  const std::string whole = dir_.file("whole.gz"), half = dir_.file("train-images-idx3-ubyte.gz");
  write_gzip(whole, idx_images(50, 28, 28, pixels(50)));
  Bytes bytes = read_plain(whole);
  ASSERT_GT(bytes.size(), 20000u);
  bytes.resize(bytes.size() / 2);
  write_file(half, bytes);
  write_file(labels_path(), idx_labels(Bytes(50, 1)));
  expect_input_error([&] { read_idx(half, labels_path(), 28, 28, 10); },
                     {half, "gzip stream ends early", "expected the rest", "truncated download"});

  const std::string cifar_half = dir_.file("data_batch_1.bin.gz");
  write_gzip(whole, cifar_records(0, 10));
  bytes = read_plain(whole);
  bytes.resize(bytes.size() / 2);
  write_file(cifar_half, bytes);
  expect_input_error([&] { read_cifar10({cifar_half}); }, {cifar_half, "gzip stream ends early"});
}

TEST_F(BrokenFiles, MissingFile) {
  const std::string missing = dir_.file("t10k-images-idx3-ubyte.gz");
  write_file(labels_path(), idx_labels({1}));
  expect_input_error([&] { read_idx(missing, labels_path(), 28, 28, 10); },
                     {missing, "no such file", "scripts/fetch_datasets.sh", "--data_dir"});
  expect_input_error([&] { read_cifar10({dir_.file("test_batch.bin")}); },
                     {dir_.file("test_batch.bin"), "scripts/fetch_datasets.sh", "--data_dir"});
  // Through the splits too: an empty MNIST folder names the first file it looked for.
  expect_input_error(
      [&] { make_splits("mnist", dir_.path(), models::workload("mlp", "mnist").spec, LoaderConfig{.batch = 10}); },
      {dir_.file("train-images-idx3-ubyte.gz"), "scripts/fetch_datasets.sh"});
}

// A symbolic link in a file's place that points nowhere is named as one, with where it points:
// before, the error named a .gz beside it that the folder never had.
TEST_F(BrokenFiles, DanglingSymlinkInAFilesPlace) {
  std::filesystem::create_symlink("/nonexistent/images", images_path());
  write_file(labels_path(), idx_labels({1}));
  expect_input_error(
      [&] { make_splits("mnist", dir_.path(), models::workload("mlp", "mnist").spec, LoaderConfig{.batch = 1}); },
      {images_path() + ": a symbolic link to /nonexistent/images, which is not there"});
}

// A split smaller than one batch names the split, its file and the fix. A small training split
// fails the splits; a small validation split only what validates (epochs/ rows): train/ rows never
// read it, and failed for it with "mnist: 50 samples are fewer than one batch".
TEST_F(BrokenFiles, SplitsSmallerThanABatch) {
  const auto write_split = [&](const char* prefix, std::uint32_t count) {
    write_file(dir_.file(std::string(prefix) + "-images-idx3-ubyte"), idx_images(count, 28, 28, pixels(count)));
    write_file(dir_.file(std::string(prefix) + "-labels-idx1-ubyte"), idx_labels(Bytes(count, 1)));
  };
  const ModelSpec& mlp = models::workload("mlp", "mnist").spec;
  write_split("train", 50);
  write_split("t10k", 200);
  expect_input_error([&] { make_splits("mnist", dir_.path(), mlp, LoaderConfig{.batch = 100}); },
                     {"mnist: its training split", images_path(), "holds 50 samples", "batch of 100", "--batch"});
  write_split("train", 200);
  write_split("t10k", 50);
  const Splits s = make_splits("mnist", dir_.path(), mlp, LoaderConfig{.batch = 100});
  EXPECT_TRUE(s.train);
  EXPECT_FALSE(s.validation);
  for (const std::string& part :
       {std::string("mnist: its validation split"), dir_.file("t10k-images-idx3-ubyte"), std::string("holds 50")})
    EXPECT_NE(s.no_validation.find(part), std::string::npos) << s.no_validation;
}

// A file whose header promises little but whose gzip stream expands to 64 MB: refused once the
// stream passes what the header allows, naming the file, without reading the rest.
TEST_F(BrokenFiles, GzipBombPastItsHeader) {
  Bytes images = idx_images(3, 28, 28, pixels(3));
  images.resize(images.size() + (std::size_t(64) << 20), 0);
  const std::string path = dir_.file("train-images-idx3-ubyte.gz");
  write_gzip(path, images);
  ASSERT_LT(fs::file_size(path), std::uintmax_t(1) << 20) << "zeros compress";
  write_file(labels_path(), idx_labels({1, 2, 3}));
  expect_input_error([&] { read_idx(path, labels_path(), 28, 28, 10); },
                     {path, "more than 2368 bytes once decompressed", "expected 2368", "3 images of 28x28"});
}

// Bytes this process has read through read() and its kin so far (/proc/self/io's rchar), or -1
// where the kernel keeps no such count.
long long bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long value = 0;
  while (io >> key >> value)
    if (key == "rchar:") return value;
  return -1;
}

// A 2 GB sparse file: its size is checked against its header before anything is read, and a file
// whose header is not IDX's is refused after 16 bytes. Counted in bytes read, not in seconds (a
// busy machine takes any time).
TEST_F(BrokenFiles, HugeSparseFileIsNotReadWhole) {
  constexpr std::uintmax_t kHuge = std::uintmax_t(2) << 30;
  write_file(images_path(), idx_images(3, 28, 28, pixels(3)));
  fs::resize_file(images_path(), kHuge);
  write_file(labels_path(), idx_labels({1, 2, 3}));
  const long long read_before = bytes_read_so_far();
  if (read_before < 0) GTEST_SKIP() << "no rchar in /proc/self/io (a kernel without task I/O accounting)";
  expect_input_error([&] { read_idx(images_path(), labels_path(), 28, 28, 10); },
                     {images_path(), fmt::format("{} bytes", kHuge), "expected 2368"});
  write_file(images_path(), Bytes{1, 2, 3, 4});
  fs::resize_file(images_path(), kHuge);
  expect_input_error([&] { read_idx(images_path(), labels_path(), 28, 28, 10); },
                     {images_path(), "magic number 0x01020304"});
  const std::string cifar = dir_.file("data_batch_1.bin");
  write_file(cifar, cifar_records(0, 1));
  fs::resize_file(cifar, kHuge);
  expect_input_error([&] { read_cifar10({cifar}); }, {cifar, fmt::format("{} bytes", kHuge), "at most", "60000"});
  // Three refusals read their headers and a few blocks: far below one of the files, read whole.
  EXPECT_LT(bytes_read_so_far() - read_before, 16LL << 20) << "nothing read whole";
}

TEST_F(BrokenFiles, HeaderDeclaringMoreSamplesThanAnyDataset) {
  expect_input_error([&] { parse(idx_images(20'000'000, 28, 28, {}), idx_labels({}, 20'000'000)); },
                     {images_path(), "20000000 images", "more than the 10000000"});
  // The most is allowed: such a header is read on, and this file is then too short for it.
  expect_input_error([&] { parse(idx_images(10'000'000, 28, 28, {}), idx_labels({}, 10'000'000)); },
                     {images_path(), "16 bytes", "expected 7840000016", "truncated download?"});
}

TEST_F(BrokenFiles, DirectoryOrSymlinkLoopInAFilesPlace) {
  fs::create_directory(images_path());
  write_file(labels_path(), idx_labels({1}));
  expect_input_error([&] { read_idx(images_path(), labels_path(), 28, 28, 10); },
                     {images_path(), "is a directory", "expected the dataset file"});
  const std::string a = dir_.file("a.bin"), b = dir_.file("b.bin");
  fs::create_symlink(b, a);
  fs::create_symlink(a, b);
  expect_input_error([&] { read_cifar10({a}); }, {a, "loop of symbolic links"});
}

// A named pipe in a file's place is named as one before anything opens it (opening a FIFO for
// reading waits for a writer that never comes).
TEST_F(BrokenFiles, NamedPipeInAFilesPlaceIsNamedWithoutOpeningIt) {
  const std::string fifo = dir_.file("data_batch_1.bin");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << fifo;
  expect_input_error([&] { read_cifar10({fifo}); }, {fifo, "is a named pipe (FIFO)", "expected the dataset file"});
}

// A gzip label file that expands past its header's count is refused while it is read, like an
// image file: the limit on the labels is exactly 8 bytes and one per label.
TEST_F(BrokenFiles, GzipLabelTrailingBytesRefusedWhileReading) {
  Bytes labels = idx_labels({1, 2, 3});
  labels.push_back(4);
  const std::string path = dir_.file("train-labels-idx1-ubyte.gz");
  write_file(images_path(), idx_images(3, 28, 28, pixels(3)));
  write_gzip(path, labels);
  expect_input_error([&] { read_idx(images_path(), path, 28, 28, 10); },
                     {path, "more than 11 bytes once decompressed", "expected 11", "for 3 labels (its header)"});
}

// A file shorter than one record is not a whole number of records either, but no truncated
// download: the hint is for files that hold at least one record.
TEST_F(BrokenFiles, CifarFileShorterThanOneRecordIsNotCalledTruncated) {
  const std::string path = dir_.file("data_batch_1.bin");
  write_file(path, random_bytes(100, 5));
  const std::string message = error_message([&] { read_cifar10({path}); });
  EXPECT_NE(message.find(path + ": 100 bytes is not a whole number of 3073-byte CIFAR-10 records"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("truncated"), std::string::npos) << message;
}

// A CIFAR-10 file one record larger than the whole dataset (60000 records) is refused by its size,
// before it is read, naming the limit in bytes.
TEST_F(BrokenFiles, CifarFileLargerThanTheWholeDatasetIsRefusedUnread) {
  const std::string path = dir_.file("data_batch_1.bin");
  write_file(path, cifar_records(0, 1));
  fs::resize_file(path, std::uintmax_t(60'001) * kCifarRecord);  // sparse; its labels are 0 and valid
  expect_input_error([&] { read_cifar10({path}); },
                     {path, "184383073 bytes", "at most 184380000 for 60000 CIFAR-10 records"});
}

// A file this user may not read is named with the system's reason and the fix. Root reads any
// file, so under root the test skips.
TEST_F(BrokenFiles, UnreadableFileIsNamedWithItsPermissions) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads any file whatever its permissions";
  write_file(images_path(), idx_images(1, 28, 28, pixels(1)));
  write_file(labels_path(), idx_labels({1}));
  fs::permissions(images_path(), fs::perms::none);
  expect_input_error([&] { read_idx(images_path(), labels_path(), 28, 28, 10); },
                     {images_path(), "cannot be opened for reading (Permission denied); check its permissions"});
}

// ---------------------------------------------------------------------------------------------
// Parsers on good files.

TEST(GoodFiles, IdxPlainAndGzipIdentical) {
  TempDir dir;
  const Bytes pixels = random_bytes(5 * 784, 11);
  const Bytes labels{3, 0, 9, 4, 4};
  write_file(dir.file("images"), idx_images(5, 28, 28, pixels));
  write_file(dir.file("labels"), idx_labels(labels));
  write_gzip(dir.file("images.gz"), idx_images(5, 28, 28, pixels));
  write_gzip(dir.file("labels.gz"), idx_labels(labels));
  ASSERT_NE(read_plain(dir.file("images.gz"))[0], 0) << "the gzip file must not be stored plain";

  const ImageSet plain = read_idx(dir.file("images"), dir.file("labels"), 28, 28, 10);
  const ImageSet gz = read_idx(dir.file("images.gz"), dir.file("labels.gz"), 28, 28, 10);
  for (const ImageSet* set : {&plain, &gz}) {
    EXPECT_EQ(set->count, 5);
    EXPECT_EQ(set->channels, 1);
    EXPECT_EQ(set->rows, 28);
    EXPECT_EQ(set->cols, 28);
    EXPECT_TRUE(set->pixels == pixels);
    EXPECT_EQ(set->labels, std::vector<std::int32_t>(labels.begin(), labels.end()));
  }
  EXPECT_TRUE(plain.pixels == gz.pixels);
  EXPECT_EQ(plain.labels, gz.labels);
  EXPECT_TRUE(read_file_maybe_gzip(dir.file("images.gz")) == read_plain(dir.file("images")));
}

TEST(GoodFiles, CifarRoundTripAcrossFiles) {
  TempDir dir;
  write_file(dir.file("data_batch_1.bin"), cifar_records(0, 2));
  write_gzip(dir.file("data_batch_2.bin.gz"), cifar_records(2, 3));
  const ImageSet set = read_cifar10({dir.file("data_batch_1.bin"), dir.file("data_batch_2.bin.gz")});
  ASSERT_EQ(set.count, 5);
  EXPECT_EQ(set.channels, 3);
  EXPECT_EQ(set.rows, 32);
  EXPECT_EQ(set.cols, 32);
  ASSERT_EQ(set.labels.size(), 5u);
  ASSERT_EQ(set.pixels.size(), std::size_t(5 * 3072));
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(set.labels[r], (r * 3) % 10) << "record " << r;
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 1024; ++i)
        ASSERT_EQ(set.pixels[std::size_t(r * 3072 + c * 1024 + i)], std::uint8_t(r * 7 + c * 85 + i))
            << "record " << r << " plane " << c << " pixel " << i;
  }
}

// Debian's dataset-fashion-mnist package: gzip IDX files of the full dataset.
TEST(GoodFiles, DebianFashionMnist) {
  const std::string dir = kDebianFashion;
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << dir << " is absent: install dataset-fashion-mnist (apt-get install dataset-fashion-mnist; "
                 << "scripts/test.sh installs it)";
  struct Split {
    const char* prefix;
    std::int64_t count;
  };
  for (const Split& split : {Split{"train", 60000}, Split{"t10k", 10000}}) {
    SCOPED_TRACE(split.prefix);
    const ImageSet set = read_idx(fmt::format("{}/{}-images-idx3-ubyte.gz", dir, split.prefix),
                                  fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, split.prefix), 28, 28, 10);
    EXPECT_EQ(set.count, split.count);
    EXPECT_EQ(set.channels, 1);
    EXPECT_EQ(set.rows, 28);
    EXPECT_EQ(set.cols, 28);
    EXPECT_EQ(set.pixels.size(), std::size_t(split.count * 784));
    ASSERT_EQ(set.labels.size(), std::size_t(split.count));
    std::vector<std::int64_t> per_class(10, 0);
    for (std::int32_t label : set.labels) {
      ASSERT_TRUE(label >= 0 && label < 10) << label;
      ++per_class[std::size_t(label)];
    }
    // Fashion-MNIST is balanced: 6000 and 1000 of each class.
    for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[std::size_t(c)], split.count / 10) << "class " << c;
    EXPECT_NE(*std::max_element(set.pixels.begin(), set.pixels.end()), 0) << "all-black images";
  }
}

// ---------------------------------------------------------------------------------------------
// The loader.

// Samples of 1x1x4 whose pixels encode their index (count <= 256): pixel 0 = index,
// pixel 1 = 255 - index; label = index % 10.
std::shared_ptr<ImageSet> indexed_set(std::int64_t count) {
  auto set = std::make_shared<ImageSet>();
  set->count = count;
  set->channels = 1;
  set->rows = 1;
  set->cols = 4;
  for (std::int64_t i = 0; i < count; ++i) {
    set->pixels.insert(set->pixels.end(), {std::uint8_t(i), std::uint8_t(255 - i), 0, 7});
    set->labels.push_back(std::int32_t(i % 10));
  }
  return set;
}

// (x / 255 - 0) / (1 / 255) = x: the loader hands out the raw pixel values.
Normalisation identity() { return Normalisation{{0.0f}, {1.0f / 255.0f}}; }

// Random images whose channels have different means and spreads.
std::shared_ptr<ImageSet> random_images(std::int64_t count, std::int64_t channels, std::int64_t side,
                                        std::uint64_t seed) {
  auto set = std::make_shared<ImageSet>();
  set->count = count;
  set->channels = channels;
  set->rows = set->cols = side;
  std::mt19937_64 rng(seed);
  for (std::int64_t s = 0; s < count; ++s) {
    for (std::int64_t c = 0; c < channels; ++c) {
      std::normal_distribution<double> pixel(60.0 + 60.0 * double(c), 20.0 + 15.0 * double(c));
      for (std::int64_t i = 0; i < side * side; ++i)
        set->pixels.push_back(std::uint8_t(std::clamp(std::lround(pixel(rng)), 0L, 255L)));
    }
    set->labels.push_back(std::int32_t(rng() % 10));
  }
  return set;
}

// The sample indices of one epoch's batches from an indexed_set loader, checking as it goes
// that every sample's pixels and label belong together.
std::vector<std::int64_t> epoch_indices(ImageLoader& loader, i64 batch) {
  std::vector<std::int64_t> indices;
  for (i64 step = 0; step < loader.steps_per_epoch(); ++step) {
    const Batch& b = loader.next();
    EXPECT_EQ(b.input.size(), std::size_t(batch * 4));
    EXPECT_EQ(b.labels.size(), std::size_t(batch));
    for (i64 i = 0; i < batch; ++i) {
      const std::int64_t index = std::lround(b.input[std::size_t(i * 4)]);
      EXPECT_NEAR(b.input[std::size_t(i * 4)], float(index), 1e-3);
      EXPECT_NEAR(b.input[std::size_t(i * 4 + 1)], float(255 - index), 1e-3) << "sample " << index;
      EXPECT_NEAR(b.input[std::size_t(i * 4 + 3)], 7.0f, 1e-3);
      EXPECT_EQ(b.labels[std::size_t(i)], index % 10) << "sample " << index;
      indices.push_back(index);
    }
  }
  return indices;
}

TEST(Loader, EverySampleOncePerEpoch) {
  ImageLoader loader("indexed", "test", indexed_set(60), identity(), {4}, LoaderConfig{.batch = 6, .seed = 3});
  ASSERT_EQ(loader.steps_per_epoch(), 10);
  std::vector<std::int64_t> all(60);
  std::iota(all.begin(), all.end(), 0);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::int64_t> indices = epoch_indices(loader, 6);
    std::sort(indices.begin(), indices.end());
    EXPECT_EQ(indices, all) << "epoch " << epoch;
  }
  // With a partial last batch the leftover samples are dropped, never repeated.
  ImageLoader ragged("indexed", "test", indexed_set(64), identity(), {4}, LoaderConfig{.batch = 6, .seed = 3});
  ASSERT_EQ(ragged.steps_per_epoch(), 10);
  std::set<std::int64_t> seen_across;
  for (int epoch = 0; epoch < 3; ++epoch) {
    const std::vector<std::int64_t> indices = epoch_indices(ragged, 6);
    const std::set<std::int64_t> distinct(indices.begin(), indices.end());
    EXPECT_EQ(distinct.size(), 60u) << "epoch " << epoch;
    EXPECT_LT(*distinct.rbegin(), 64);
    seen_across.insert(distinct.begin(), distinct.end());
  }
  EXPECT_GT(seen_across.size(), 60u) << "the dropped samples should change from epoch to epoch";
}

TEST(Loader, OrdersPerEpochAndSeed) {
  auto set = indexed_set(60);
  auto epochs = [&](std::uint64_t seed, bool shuffle) {
    ImageLoader loader("indexed", "test", set, identity(), {4},
                       LoaderConfig{.batch = 6, .shuffle = shuffle, .seed = seed});
    std::vector<std::vector<std::int64_t>> out;
    for (int e = 0; e < 3; ++e) out.push_back(epoch_indices(loader, 6));
    return out;
  };
  const auto a = epochs(5, true), again = epochs(5, true), other = epochs(6, true), ordered = epochs(5, false);
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  EXPECT_NE(a[0], a[2]);
  EXPECT_EQ(a, again) << "the same seed must give the same orders";
  EXPECT_NE(a[0], other[0]) << "another seed should give another order";
  std::vector<std::int64_t> in_order(60);
  std::iota(in_order.begin(), in_order.end(), 0);
  for (const auto& epoch : ordered) EXPECT_EQ(epoch, in_order) << "shuffle off keeps the file's order";
}

// The seed is mixed into each epoch's order, not added to the epoch number: seed 6's first epoch is
// not seed 5's second, so runs a seed apart never replay each other's orders an epoch late.
TEST(Loader, AnEpochsOrderIsNotTheNextSeedsOrderOfTheEpochBefore) {
  auto set = indexed_set(60);
  ImageLoader five("indexed", "test", set, identity(), {4}, LoaderConfig{.batch = 6, .seed = 5});
  ImageLoader six("indexed", "test", set, identity(), {4}, LoaderConfig{.batch = 6, .seed = 6});
  epoch_indices(five, 6);
  EXPECT_NE(epoch_indices(five, 6), epoch_indices(six, 6)) << "seed 5's second epoch is seed 6's first";
}

// The worker queue hands out exactly the batches the serial loader prepares, whatever the
// number of workers and the prefetch depth (augmentation on, so its random draws count too).
TEST(Loader, WorkersMatchSerial) {
  auto set = random_images(50, 3, 8, 21);
  const Normalisation norm = Normalisation::of(*set);
  const LoaderConfig base{.batch = 4, .workers = 0, .augment = true, .seed = 9};
  constexpr int kBatches = 30;  // 2.5 epochs of 12 steps
  std::vector<Batch> serial;
  {
    ImageLoader loader("random", "test", set, norm, {3, 8, 8}, base);
    for (int i = 0; i < kBatches; ++i) serial.push_back(loader.next());
  }
  std::mt19937 jitter(4);
  for (int workers = 1; workers <= 3; ++workers) {
    for (int prefetch = 1; prefetch <= 3; ++prefetch) {
      SCOPED_TRACE(fmt::format("{} workers, prefetch {}", workers, prefetch));
      LoaderConfig config = base;
      config.workers = workers;
      config.prefetch = prefetch;
      ImageLoader loader("random", "test", set, norm, {3, 8, 8}, config);
      for (int i = 0; i < kBatches; ++i) {
        // An uneven consumer lets the workers run ahead by different amounts.
        if (jitter() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(jitter() % 500));
        const Batch& b = loader.next();
        ASSERT_TRUE(b.input == serial[std::size_t(i)].input) << "batch " << i << " inputs differ";
        ASSERT_EQ(b.labels, serial[std::size_t(i)].labels) << "batch " << i;
      }
    }
  }
}

// A batch handed out stays as it was until the next call, however far the workers run ahead: they
// fill only the slots the consumer has released, never the one it holds.
TEST(Loader, ABatchStaysAsHandedOutUntilTheNextCall) {
  auto set = random_images(48, 3, 8, 31);
  const Normalisation norm = Normalisation::of(*set);
  constexpr int kBatches = 4;
  std::vector<Batch> serial;
  {
    ImageLoader loader("random", "test", set, norm, {3, 8, 8}, LoaderConfig{.batch = 4, .seed = 2});
    for (int i = 0; i < kBatches; ++i) serial.push_back(loader.next());
  }
  for (int workers = 1; workers <= 3; ++workers) {
    for (int prefetch = 1; prefetch <= 2; ++prefetch) {
      SCOPED_TRACE(fmt::format("{} workers, prefetch {}", workers, prefetch));
      ImageLoader loader("random", "test", set, norm, {3, 8, 8},
                         LoaderConfig{.batch = 4, .workers = workers, .prefetch = prefetch, .seed = 2});
      for (int i = 0; i < kBatches; ++i) {
        const Batch& b = loader.next();
        // Time for the workers to fill every slot they may; the batch held must not be one of them.
        std::this_thread::sleep_for(std::chrono::milliseconds(15));
        ASSERT_TRUE(b.input == serial[std::size_t(i)].input) << "batch " << i << " changed while it was held";
        ASSERT_EQ(b.labels, serial[std::size_t(i)].labels) << "batch " << i;
      }
    }
  }
}

TEST(Loader, NormalisationPerChannel) {
  auto set = random_images(64, 3, 8, 5);
  const Normalisation norm = Normalisation::of(*set);
  ASSERT_EQ(norm.mean.size(), 3u);
  ImageLoader loader("random", "test", set, norm, {3, 8, 8}, LoaderConfig{.batch = 8, .seed = 2});
  ASSERT_EQ(loader.steps_per_epoch(), 8);  // the whole set, none dropped
  std::vector<double> sum(3, 0), sum_sq(3, 0);
  for (i64 step = 0; step < loader.steps_per_epoch(); ++step) {
    const Batch& b = loader.next();
    for (std::size_t i = 0; i < b.input.size(); ++i) {
      const std::size_t c = (i / 64) % 3;
      sum[c] += b.input[i];
      sum_sq[c] += double(b.input[i]) * b.input[i];
    }
  }
  const double n = 64.0 * 64.0;
  for (std::size_t c = 0; c < 3; ++c) {
    const double mean = sum[c] / n, var = sum_sq[c] / n - mean * mean;
    EXPECT_NEAR(mean, 0.0, 1e-4) << "channel " << c;
    EXPECT_NEAR(std::sqrt(var), 1.0, 1e-4) << "channel " << c;
  }
  // The channels differ before normalising, so per-channel statistics were needed.
  EXPECT_GT(norm.mean[2] - norm.mean[0], 0.3f);
}

// A channel of one value (a black plane) has no spread: it normalises to zeros, never to the NaN
// that a standard deviation of zero would give.
TEST(Loader, ConstantChannelNormalisesToZeroNotNan) {
  auto set = random_images(8, 3, 4, 6);
  for (std::int64_t s = 0; s < set->count; ++s)
    std::fill_n(set->pixels.begin() + s * 48 + 16, 16, std::uint8_t(0));  // channel 1 black
  const Normalisation norm = Normalisation::of(*set);
  ASSERT_EQ(norm.stddev.size(), 3u);
  EXPECT_EQ(norm.mean[1], 0.0f);
  EXPECT_GT(norm.stddev[1], 0.0f);
  ImageLoader loader("random", "test", set, norm, {3, 4, 4}, LoaderConfig{.batch = 4, .seed = 1});
  for (int step = 0; step < 2; ++step) {
    const Batch& b = loader.next();
    for (std::size_t i = 0; i < b.input.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b.input[i])) << "value " << i << " of step " << step;
      if ((i / 16) % 3 == 1) {
        ASSERT_EQ(b.input[i], 0.0f) << "value " << i << " of step " << step;
      }
    }
  }
}

// The loader refuses what it cannot batch: samples of another size than the model takes, fewer
// samples than one batch (naming both numbers), negative workers, a queue without room.
TEST(Loader, RefusesWhatItCannotBatch) {
  const auto set = indexed_set(5);
  EXPECT_NE(error_message([&] {
              ImageLoader("indexed", "test", set, identity(), {5}, LoaderConfig{.batch = 1});
            }).find("samples have 4 values, the model takes 5"),
            std::string::npos);
  expect_input_error([&] { ImageLoader("indexed", "test", set, identity(), {4}, LoaderConfig{.batch = 6}); },
                     {"indexed: 5 samples are fewer than one batch of 6"});
  for (const auto& [workers, prefetch] : {std::pair{-1, 2}, std::pair{1, 0}})
    EXPECT_NE(error_message([&] {
                ImageLoader("indexed", "test", set, identity(), {4},
                            LoaderConfig{.batch = 1, .workers = workers, .prefetch = prefetch});
              }).find(fmt::format("{} workers, prefetch {}", workers, prefetch)),
              std::string::npos)
        << workers << " workers, prefetch " << prefetch;
}

// Index of the value of channel c, row y, column x in a (3, 32, 32) sample.
std::size_t at(i64 c, i64 y, i64 x) { return std::size_t(c * 1024 + y * 32 + x); }

// Whether `augmented` is `plain` shifted by (dy, dx) after an optional horizontal flip, with
// exactly 0 where the shift leaves the image.
bool is_shifted_copy(const float* augmented, const float* plain, i64 dy, i64 dx, bool flip) {
  for (i64 c = 0; c < 3; ++c)
    for (i64 y = 0; y < 32; ++y)
      for (i64 x = 0; x < 32; ++x) {
        const i64 sy = y + dy, sx = (flip ? 31 - x : x) + dx;
        const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
        // Both loaders compute a pixel's value by the same expression: equality is exact.
        const float expected = inside ? plain[at(c, sy, sx)] : 0.0f;
        if (augmented[at(c, y, x)] != expected) return false;
      }
  return true;
}

TEST(Loader, AugmentationShiftsAndFlips) {
  auto set = random_images(16, 3, 32, 8);
  const Normalisation norm = Normalisation::of(*set);
  const LoaderConfig plain_config{.batch = 4, .augment = false, .seed = 4};
  LoaderConfig augment_config = plain_config;
  augment_config.augment = true;
  ImageLoader plain("cifar", "test", set, norm, {3, 32, 32}, plain_config);
  ImageLoader augmented("cifar", "test", set, norm, {3, 32, 32}, augment_config);
  int changed = 0, flipped = 0, samples = 0;
  for (int step = 0; step < 8; ++step) {
    const Batch p = plain.next();
    const Batch& a = augmented.next();
    ASSERT_EQ(a.labels, p.labels) << "augmentation must keep the labels (and the order), step " << step;
    for (i64 b = 0; b < 4; ++b) {
      const float* ap = a.input.data() + b * 3072;
      const float* pp = p.input.data() + b * 3072;
      for (i64 c = 0; c < 3; ++c) {
        const float lo = (0.0f - norm.mean[c]) / norm.stddev[c], hi = (1.0f - norm.mean[c]) / norm.stddev[c];
        for (i64 i = 0; i < 1024; ++i) {
          const float v = ap[c * 1024 + i];
          ASSERT_TRUE(v == 0.0f || (v >= lo - 1e-4f && v <= hi + 1e-4f))
              << v << " is neither padding nor in [" << lo << ", " << hi << "]";
        }
      }
      bool found = false;
      for (i64 dy = -4; dy <= 4 && !found; ++dy)
        for (i64 dx = -4; dx <= 4 && !found; ++dx)
          for (bool flip : {false, true})
            if (!found && is_shifted_copy(ap, pp, dy, dx, flip)) {
              found = true;
              changed += dy != 0 || dx != 0 || flip;
              flipped += flip;
            }
      EXPECT_TRUE(found) << "step " << step << " sample " << b << " is no shifted or flipped copy";
      ++samples;
    }
  }
  EXPECT_GT(changed, samples / 2) << "augmentation left most images as they were";
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, samples);
}

// Every one of the 9 x 9 x 2 crops and flips is drawn (a flip without a shift too), and each step
// draws anew: the same draws step after step would fix each batch position's augmentation.
TEST(Loader, AugmentationDrawsEveryCropAndFlipAnewEachStep) {
  auto set = random_images(16, 3, 32, 12);
  const Normalisation norm = Normalisation::of(*set);
  constexpr i64 kBatch = 16, kSteps = 64;  // 1024 draws of 162 kinds
  ImageLoader plain("cifar", "test", set, norm, {3, 32, 32}, LoaderConfig{.batch = kBatch, .seed = 5});
  ImageLoader augmented("cifar", "test", set, norm, {3, 32, 32},
                        LoaderConfig{.batch = kBatch, .augment = true, .seed = 5});
  std::set<std::tuple<i64, i64, bool>> kinds;
  std::set<std::vector<std::tuple<i64, i64, bool>>> step_draws;
  for (i64 step = 0; step < kSteps; ++step) {
    const Batch p = plain.next();
    const Batch& a = augmented.next();
    std::vector<std::tuple<i64, i64, bool>> draws;
    for (i64 b = 0; b < kBatch; ++b) {
      const float* ap = a.input.data() + b * 3072;
      const float* pp = p.input.data() + b * 3072;
      for (i64 dy = -4; dy <= 4 && draws.size() == std::size_t(b); ++dy)
        for (i64 dx = -4; dx <= 4 && draws.size() == std::size_t(b); ++dx)
          for (bool flip : {false, true})
            if (draws.size() == std::size_t(b) && is_shifted_copy(ap, pp, dy, dx, flip))
              draws.emplace_back(dy, dx, flip);
      ASSERT_EQ(draws.size(), std::size_t(b + 1)) << "step " << step << " sample " << b << " is no shifted copy";
    }
    kinds.insert(draws.begin(), draws.end());
    step_draws.insert(draws);
  }
  EXPECT_EQ(kinds.size(), 162u) << "some offsets in [-4, 4] or flips are never drawn";
  EXPECT_EQ(step_draws.size(), std::size_t(kSteps)) << "steps repeat the same draws";
}

TEST(Loader, AugmentationLeavesGreyscaleAlone) {
  auto set = random_images(16, 1, 28, 8);
  ImageLoader plain("mnist", "test", set, Normalisation::of(*set), {784}, LoaderConfig{.batch = 4, .seed = 4});
  ImageLoader augmented("mnist", "test", set, Normalisation::of(*set), {784},
                        LoaderConfig{.batch = 4, .augment = true, .seed = 4});
  for (int step = 0; step < 4; ++step) {
    const Batch p = plain.next();
    EXPECT_TRUE(augmented.next().input == p.input) << "step " << step;
  }
}

TEST(Loader, WaitSecondsGrows) {
  auto set = random_images(64, 3, 32, 1);
  for (int workers : {0, 2}) {
    SCOPED_TRACE(fmt::format("{} workers", workers));
    ImageLoader loader("cifar", "test", set, Normalisation::of(*set), {3, 32, 32},
                       LoaderConfig{.batch = 16, .workers = workers, .augment = true});
    EXPECT_EQ(loader.wait_seconds(), 0.0);
    double previous = 0;
    for (int i = 0; i < 12; ++i) {
      loader.next();
      const double now = loader.wait_seconds();
      EXPECT_GE(now, previous) << "batch " << i;
      EXPECT_TRUE(std::isfinite(now));
      previous = now;
    }
    // Preparing on the caller's thread is all waiting; the first batch from workers is waited for.
    EXPECT_GT(previous, 0.0);
    EXPECT_LT(previous, 60.0);
  }
}

// Destroying a loader whose workers are blocked on a full queue must wake and join them.
TEST(Loader, DestroyWithFullQueueDoesNotHang) {
  auto set = random_images(64, 3, 8, 2);
  const Normalisation norm = Normalisation::of(*set);
  for (int workers = 1; workers <= 3; ++workers) {
    for (int prefetch = 1; prefetch <= 3; ++prefetch) {
      for (int taken : {0, 1}) {
        auto loader = std::make_unique<ImageLoader>("random", "test", set, norm, Dims{3, 8, 8},
                                                    LoaderConfig{.batch = 4, .workers = workers, .prefetch = prefetch});
        for (int i = 0; i < taken; ++i) loader->next();
        std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the workers fill the queue and block
        std::promise<void> done;
        std::future<void> destroyed = done.get_future();
        std::thread destroyer([&] {
          loader.reset();
          done.set_value();
        });
        if (destroyed.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
          // A hung join cannot be recovered from: report and end the process with a failure.
          std::fprintf(stderr, "FAILED: ~ImageLoader hangs with %d workers, prefetch %d, %d batches taken\n", workers,
                       prefetch, taken);
          std::fflush(stderr);
          std::_Exit(1);
        }
        destroyer.join();
        EXPECT_FALSE(loader);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The sine wave.

float wave(std::int64_t t) { return float(std::sin(2 * M_PI * double(t) / SineWave::kPeriod)); }

TEST(Sine, TargetIsNextInput) {
  constexpr i64 T = 35, N = 20;
  SineWave train(T, N, false, 1);
  EXPECT_EQ(train.steps_per_epoch(), (SineWave::kTrainLength - 1) / (T * N));
  Batch first;
  for (int step = 0; step < 5; ++step) {
    const Batch& b = train.next();
    ASSERT_EQ(b.input.size(), std::size_t(T * N));
    ASSERT_EQ(b.targets.size(), std::size_t(T * N));
    for (i64 n = 0; n < N; ++n) {
      for (i64 t = 0; t + 1 < T; ++t)
        ASSERT_NEAR(b.targets[std::size_t(t * N + n)], b.input[std::size_t((t + 1) * N + n)], 1e-6)
            << "window " << n << " step " << t;
      for (i64 t = 0; t < T; ++t) ASSERT_LE(std::abs(b.input[std::size_t(t * N + n)]), 1.0f);
    }
    if (step == 0)
      first = b;
    else
      EXPECT_FALSE(b.input == first.input) << "training windows start at random points";
  }
}

TEST(Sine, ValidationRangeInOrderEveryEpoch) {
  constexpr i64 T = 35, N = 20;
  SineWave val(T, N, true, 1), other_seed(T, N, true, 99), train(T, N, false, 1);
  const i64 steps = val.steps_per_epoch();
  ASSERT_EQ(steps, (SineWave::kValidationLength - 1) / (T * N));
  std::vector<Batch> epoch1;
  for (i64 s = 0; s < steps; ++s) {
    const Batch& b = val.next();
    // Window n of step s covers points kTrainLength + (s * N + n) * T ... + T, all inside the
    // validation range (the last target included).
    for (i64 n = 0; n < N; ++n) {
      const std::int64_t start = SineWave::kTrainLength + (s * N + n) * T;
      ASSERT_LE(start + T, SineWave::kTrainLength + SineWave::kValidationLength - 1);
      for (i64 t = 0; t < T; ++t) {
        ASSERT_EQ(b.input[std::size_t(t * N + n)], wave(start + t)) << "step " << s << " window " << n;
        ASSERT_EQ(b.targets[std::size_t(t * N + n)], wave(start + t + 1)) << "step " << s << " window " << n;
      }
    }
    epoch1.push_back(b);
    EXPECT_TRUE(other_seed.next().input == b.input) << "validation does not depend on the seed";
    EXPECT_FALSE(train.next().input == b.input) << "step " << s;
  }
  for (i64 s = 0; s < steps; ++s) {
    const Batch& b = val.next();
    EXPECT_TRUE(b.input == epoch1[std::size_t(s)].input) << "epoch 2 step " << s;
    EXPECT_TRUE(b.targets == epoch1[std::size_t(s)].targets) << "epoch 2 step " << s;
  }
}

// Validation is the same every epoch at any window shape, not only where an epoch spans a whole
// number of periods (35 x 20 x 7 steps = 4900 points = 196 periods of the wave).
TEST(Sine, ValidationRepeatsEveryEpochAtAnyShape) {
  constexpr i64 T = 10, N = 3;
  SineWave val(T, N, true, 1);
  const i64 steps = val.steps_per_epoch();
  ASSERT_EQ(steps, 166);
  ASSERT_NE(steps * N * T % 25, 0) << "an epoch of whole periods would hide a validation that moves on";
  std::vector<Batch> epoch1;
  for (i64 s = 0; s < steps; ++s) epoch1.push_back(val.next());
  for (i64 s = 0; s < steps; ++s) {
    const Batch& b = val.next();
    ASSERT_TRUE(b.input == epoch1[std::size_t(s)].input) << "epoch 2 step " << s;
    for (i64 n = 0; n < N; ++n)
      ASSERT_EQ(b.input[std::size_t(n)], wave(SineWave::kTrainLength + (s * N + n) * T)) << "step " << s;
  }
}

// Replicas train on different windows: the training windows follow the seed.
TEST(Sine, TrainingWindowsFollowTheSeed) {
  SineWave one(35, 20, false, 1), two(35, 20, false, 2), again(35, 20, false, 1);
  const Batch first = one.next();
  EXPECT_FALSE(two.next().input == first.input);
  EXPECT_TRUE(again.next().input == first.input);
}

// An epoch is as many whole batches as end with their last target inside the range: 99 of 5 windows
// of 10 steps in the 5000 validation points, not the 100 that 5000 / 50 would give.
TEST(Sine, EpochEndsWithItsLastTargetInsideTheRange) {
  EXPECT_EQ(SineWave(10, 5, true, 1).steps_per_epoch(), 99);
  EXPECT_EQ(SineWave(10, 5, false, 1).steps_per_epoch(), 399);
}

TEST(Sine, RangeShorterThanOneBatchIsRefused) {
  expect_input_error([] { SineWave(35, 200, true, 1); }, {"sine: 200 windows of 35 steps do not fit in 5000 points"});
}

// ---------------------------------------------------------------------------------------------
// Splits.

// The data directory: the flag, else $TB_DATA_DIR, else ./data.
TEST(Splits, DataDirIsTheFlagThenTheEnvironmentThenData) {
  const char* before = std::getenv("TB_DATA_DIR");
  const std::string saved = before ? before : "";
  ASSERT_EQ(setenv("TB_DATA_DIR", "/from/env", 1), 0);
  EXPECT_EQ(data_dir("/from/flag"), "/from/flag");
  EXPECT_EQ(data_dir(""), "/from/env");
  ASSERT_EQ(setenv("TB_DATA_DIR", "", 1), 0);
  EXPECT_EQ(data_dir(""), "data");
  if (before)
    setenv("TB_DATA_DIR", saved.c_str(), 1);
  else
    unsetenv("TB_DATA_DIR");
}

// Synthetic CIFAR-10 images have CIFAR's three channels, so that --augment crops and flips them as
// it does the real files: a set of one channel is never augmented.
TEST(Splits, SyntheticCifarIsAugmentedLikeTheRealFiles) {
  const ModelSpec& lenet = models::workload("lenet5", "cifar10").spec;
  Splits s = make_splits("cifar10", "", lenet, LoaderConfig{.batch = 16, .augment = true, .seed = 1});
  const Batch& b = s.train->next();
  // Shifts pad with exact zeros (about 13% of the values at offsets uniform in [-4, 4]); a
  // normalised pixel is exactly zero only by chance.
  const auto zeros = std::count(b.input.begin(), b.input.end(), 0.0f);
  EXPECT_GT(double(zeros), 0.05 * double(b.input.size())) << "--augment left synthetic CIFAR-10 images as they were";
}

// CIFAR-10 files where the dataset's tarball unpacks them: cifar-10-batches-bin/ in its folder.
TEST(Splits, CifarFoundInTheFolderItsTarballUnpacks) {
  TempDir dir;
  const std::string nested = dir.file("cifar-10-batches-bin");
  fs::create_directory(nested);
  for (int i = 1; i <= 5; ++i)
    write_file(fmt::format("{}/data_batch_{}.bin", nested, i), cifar_records(4 * (i - 1), 4));
  write_file(nested + "/test_batch.bin", cifar_records(20, 8));
  const Splits s =
      make_splits("cifar10", dir.path(), models::workload("lenet5", "cifar10").spec, LoaderConfig{.batch = 4});
  EXPECT_EQ(s.source, nested);
  EXPECT_EQ(s.train->steps_per_epoch(), 5);  // 20 records
  EXPECT_EQ(s.validation_steps, 2);
}

// The validation split is read in file order, without augmentation, normalised with the training
// split's statistics, whatever the training loader does (shuffling, augmenting, workers); a split
// of exactly one batch validates.
TEST(Splits, ValidationInOrderUnaugmentedWithTrainingStatistics) {
  TempDir dir;
  std::vector<std::string> train_files;
  for (int i = 1; i <= 5; ++i) {
    train_files.push_back(dir.file(fmt::format("data_batch_{}.bin", i)));
    write_file(train_files.back(), cifar_records(4 * (i - 1), 4));
  }
  Bytes test = cifar_records(100, 8);
  for (std::size_t i = 0; i < test.size(); ++i)
    if (i % std::size_t(kCifarRecord) != 0) test[i] /= 2;  // darker than the training images
  write_file(dir.file("test_batch.bin"), test);
  const LoaderConfig train_config{.batch = 8, .workers = 1, .shuffle = true, .augment = true, .seed = 3};
  Splits s = make_splits("cifar10", dir.path(), models::workload("lenet5", "cifar10").spec, train_config);
  ASSERT_TRUE(s.validation) << s.no_validation;
  ASSERT_EQ(s.validation_steps, 1);

  const auto train_set = std::make_shared<ImageSet>(read_cifar10(train_files));
  const auto val_set = std::make_shared<ImageSet>(read_cifar10({dir.file("test_batch.bin")}));
  const Normalisation norm = Normalisation::of(*train_set);
  ASSERT_GT(std::abs(norm.mean[0] - Normalisation::of(*val_set).mean[0]), 0.1f) << "the splits' statistics differ";
  ImageLoader expected("cifar10", "test", val_set, norm, {3, 32, 32}, LoaderConfig{.batch = 8, .shuffle = false});
  for (int epoch = 0; epoch < 2; ++epoch) {
    const Batch& want = expected.next();
    const Batch& got = s.validation->next();
    EXPECT_EQ(got.labels, want.labels) << "epoch " << epoch;
    EXPECT_TRUE(got.input == want.input) << "epoch " << epoch;
  }
}

void check_classification_batches(Dataset& data, i64 batch, i64 features, i64 steps) {
  ASSERT_GT(data.steps_per_epoch(), 0);
  for (i64 s = 0; s < steps; ++s) {
    const Batch& b = data.next();
    ASSERT_EQ(b.input.size(), std::size_t(batch * features));
    ASSERT_EQ(b.labels.size(), std::size_t(batch));
    for (std::int32_t label : b.labels) ASSERT_TRUE(label >= 0 && label < 10) << label;
    for (float v : b.input) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(Splits, Synthetic) {
  {
    Splits s = make_splits("mnist", "", models::workload("mlp", "mnist").spec, LoaderConfig{.batch = 32, .seed = 1});
    EXPECT_EQ(s.source, "synthetic");
    EXPECT_EQ(s.train->source(), "synthetic");
    EXPECT_EQ(s.train->name(), "mnist");
    EXPECT_GT(s.validation_steps, 0);
    EXPECT_EQ(s.validation_steps, s.validation->steps_per_epoch());
    check_classification_batches(*s.train, 32, 784, 3);
    check_classification_batches(*s.validation, 32, 784, 3);
  }
  {
    Splits s = make_splits("cifar10", "", models::workload("lenet5", "cifar10").spec,
                           LoaderConfig{.batch = 16, .augment = true, .seed = 1});
    EXPECT_EQ(s.source, "synthetic");
    check_classification_batches(*s.train, 16, 3 * 32 * 32, 3);
    check_classification_batches(*s.validation, 16, 3 * 32 * 32, 3);
  }
  {
    Splits s = make_splits("sine", "", models::workload("lstm", "sine").spec, LoaderConfig{.batch = 20, .seed = 1});
    EXPECT_EQ(s.source, "generated");
    EXPECT_EQ(s.train->name(), "sine");
    const Batch& b = s.train->next();
    EXPECT_EQ(b.input.size(), std::size_t(35 * 20));
    EXPECT_EQ(b.targets.size(), std::size_t(35 * 20));
    EXPECT_EQ(s.validation_steps, s.validation->steps_per_epoch());
  }
}

TEST(Splits, FashionMnistFindsDebianFolder) {
  if (!fs::exists(std::string(kDebianFashion) + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << kDebianFashion << " is absent: install dataset-fashion-mnist (scripts/test.sh installs it)";
  TempDir dir;
  EXPECT_EQ(find_dataset("fashion-mnist", dir.path()), kDebianFashion);
  EXPECT_EQ(find_dataset("mnist", dir.path()), "") << "only Fashion-MNIST has a system folder";
  fs::create_directory(dir.file("fashion-mnist"));
  EXPECT_EQ(find_dataset("fashion-mnist", dir.path()), dir.file("fashion-mnist")) << "the data directory wins";

  Splits s = make_splits("fashion-mnist", kDebianFashion, models::workload("mlp", "mnist").spec,
                         LoaderConfig{.batch = 100, .seed = 1});
  EXPECT_EQ(s.source, kDebianFashion);
  EXPECT_EQ(s.train->source(), kDebianFashion);
  EXPECT_EQ(s.validation->source(), kDebianFashion);
  EXPECT_EQ(s.train->steps_per_epoch(), 600);
  EXPECT_EQ(s.validation_steps, 100);
  check_classification_batches(*s.train, 100, 784, 2);
}

// The datasets with files are looked for in their folders under the data directory; the others
// (the sine wave, ImageNet-shaped images) never are, even where a folder of their name is there.
TEST(Splits, OnlyTheDatasetsWithFilesAreLookedForInTheDataDirectory) {
  TempDir dir;
  for (const char* name : {"mnist", "fashion-mnist", "cifar10", "sine", "imagenet"})
    fs::create_directory(dir.file(name));
  for (const char* name : {"mnist", "fashion-mnist", "cifar10"}) {
    EXPECT_TRUE(has_files(name)) << name;
    EXPECT_EQ(find_dataset(name, dir.path()), dir.file(name)) << name;
  }
  for (const char* name : {"sine", "imagenet"}) {
    EXPECT_FALSE(has_files(name)) << name;
    EXPECT_EQ(find_dataset(name, dir.path()), "") << name;
  }
}

// CIFAR-10 files given to a model of another input (the MLP's 784 values) are refused naming the
// folder, the images' shape and the model's input, not by the loader's internal check.
TEST(Splits, CifarFilesForAModelOfAnotherInputAreRefusedNamingBoth) {
  TempDir dir;
  for (int i = 1; i <= 5; ++i) write_file(dir.file(fmt::format("data_batch_{}.bin", i)), cifar_records(i, 2));
  write_file(dir.file("test_batch.bin"), cifar_records(0, 4));
  expect_input_error(
      [&] { make_splits("cifar10", dir.path(), models::workload("mlp", "mnist").spec, LoaderConfig{.batch = 2}); },
      {dir.path() + ": samples of 3x32x32 do not fit mlp (input (784))"});
}

// A CIFAR-10 training split smaller than one batch names its five files and the fix.
TEST(Splits, CifarTrainingSplitSmallerThanABatchNamesItsFiles) {
  TempDir dir;
  for (int i = 1; i <= 5; ++i) write_file(dir.file(fmt::format("data_batch_{}.bin", i)), cifar_records(i, 1));
  write_file(dir.file("test_batch.bin"), cifar_records(0, 20));
  expect_input_error(
      [&] {
        make_splits("cifar10", dir.path(), models::workload("lenet5", "cifar10").spec, LoaderConfig{.batch = 10});
      },
      {"cifar10: its training split (" + dir.file("data_batch_{1..5}.bin") + ") holds 5 samples", "batch of 10",
       "--batch"});
}

// Only the training loader has worker threads: validation is read on the caller's thread, so
// --loader_workers=2 starts two threads, not four.
TEST(Splits, OnlyTheTrainingLoaderStartsWorkers) {
  const auto threads = [] {
    std::ifstream status("/proc/self/status");
    long value = -1;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Threads:", 0) == 0) value = std::stol(line.substr(8));
    return value;
  };
  const long before = threads();
  if (before < 0) GTEST_SKIP() << "no thread count in /proc/self/status";
  Splits s = make_splits("mnist", "", models::workload("mlp", "mnist").spec,
                         LoaderConfig{.batch = 32, .workers = 2, .seed = 1});
  ASSERT_TRUE(s.validation);
  EXPECT_EQ(threads() - before, 2);
}

// Synthetic data is as docs/datasets.md says: 8192 training and 2048 validation images at 28x28
// and 32x32, and at least two batches of training and one of validation at any batch.
TEST(Splits, SyntheticSetsHoldTheDocumentedCountsAndAtLeastABatch) {
  const ModelSpec& mlp = models::workload("mlp", "mnist").spec;
  const Splits small = make_splits("mnist", "", mlp, LoaderConfig{.batch = 32, .seed = 1});
  EXPECT_EQ(small.train->steps_per_epoch(), 8192 / 32);
  EXPECT_EQ(small.validation_steps, 2048 / 32);
  const Splits large = make_splits("mnist", "", mlp, LoaderConfig{.batch = 4100, .seed = 1});
  EXPECT_EQ(large.train->steps_per_epoch(), 2);
  ASSERT_TRUE(large.validation) << large.no_validation;
  EXPECT_EQ(large.validation_steps, 1);
}

// Synthetic classes are told apart by their patterns: the nearest class mean of the training
// batches classifies the validation images, every class is drawn, and the validation images are
// other draws than the training images.
TEST(Splits, SyntheticClassesAreSeparableAndValidationIsNotTheTrainingSet) {
  constexpr i64 kBatch = 64, kFeatures = 784, kClasses = 10;
  Splits s = make_splits("mnist", "", models::workload("mlp", "mnist").spec, LoaderConfig{.batch = kBatch, .seed = 1});
  std::vector<double> mean(std::size_t(kClasses * kFeatures), 0.0);
  std::vector<i64> per_class(kClasses, 0);
  std::set<std::vector<float>> training_heads;  // each training image's first 8 values
  for (i64 step = 0; step < s.train->steps_per_epoch(); ++step) {
    const Batch& b = s.train->next();
    for (i64 n = 0; n < kBatch; ++n) {
      const float* x = b.input.data() + n * kFeatures;
      training_heads.emplace(x, x + 8);
      if (step >= 16) continue;
      const i64 c = b.labels[std::size_t(n)];
      ++per_class[std::size_t(c)];
      for (i64 i = 0; i < kFeatures; ++i) mean[std::size_t(c * kFeatures + i)] += x[i];
    }
  }
  for (i64 c = 0; c < kClasses; ++c) {
    ASSERT_GT(per_class[std::size_t(c)], 0) << "class " << c << " is never drawn";
    for (i64 i = 0; i < kFeatures; ++i) mean[std::size_t(c * kFeatures + i)] /= double(per_class[std::size_t(c)]);
  }
  i64 right = 0, seen = 0;
  for (i64 step = 0; step < 4; ++step) {
    const Batch& b = s.validation->next();
    for (i64 n = 0; n < kBatch; ++n, ++seen) {
      const float* x = b.input.data() + n * kFeatures;
      EXPECT_FALSE(training_heads.count(std::vector<float>(x, x + 8)))
          << "validation image " << seen << " is a training image";
      i64 best = -1;
      double best_distance = 0;
      for (i64 c = 0; c < kClasses; ++c) {
        double d = 0;
        for (i64 i = 0; i < kFeatures; ++i) {
          const double e = x[i] - mean[std::size_t(c * kFeatures + i)];
          d += e * e;
        }
        if (best < 0 || d < best_distance) best = c, best_distance = d;
      }
      right += best == b.labels[std::size_t(n)];
    }
  }
  EXPECT_GT(double(right), 0.95 * double(seen)) << right << " of " << seen << " classified by the nearest class mean";
}

// synthetic_for draws its images from the seed it is given.
TEST(Splits, SyntheticForFollowsTheSeed) {
  const ModelSpec& mlp = models::workload("mlp", "mnist").spec;
  const auto first_batch = [&](std::uint64_t seed) { return synthetic_for("mnist", mlp, 8, seed)->next().input; };
  const std::vector<float> one = first_batch(1);
  EXPECT_TRUE(first_batch(1) == one);
  EXPECT_FALSE(first_batch(2) == one);
}

// The sine workload validates on the validation range in order, as SineWave(validation) gives it.
TEST(Splits, SineValidationIsTheValidationRangeInOrder) {
  Splits s = make_splits("sine", "", models::workload("lstm", "sine").spec, LoaderConfig{.batch = 20, .seed = 3});
  SineWave expected(35, 20, true, 3);
  EXPECT_EQ(s.validation_steps, expected.steps_per_epoch());
  for (int step = 0; step < 3; ++step) {
    const Batch& want = expected.next();
    const Batch& got = s.validation->next();
    EXPECT_TRUE(got.input == want.input) << "step " << step;
    EXPECT_TRUE(got.targets == want.targets) << "step " << step;
  }
}

// ---------------------------------------------------------------------------------------------
// Learning from real data.

using models::workload;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One epoch of the MLP workload (Adam 1e-3, batch 100) on Fashion-MNIST's 60000 training
// images; validation on t10k. Published MLPs of this size reach 84-86% after one epoch.
TEST(Learns, MlpFashionMnistOneEpoch) {
  const std::string folder = find_dataset("fashion-mnist", "data");
  if (folder.empty())
    GTEST_SKIP() << "no Fashion-MNIST: install dataset-fashion-mnist (scripts/test.sh installs it) or put it "
                 << "under data/fashion-mnist";
  const models::Workload& w = workload("mlp", "fashion-mnist");
  const auto start = std::chrono::steady_clock::now();
  Splits s = make_splits("fashion-mnist", folder, w.spec, LoaderConfig{.batch = w.batch, .seed = 1});
  Trainer trainer(std::make_unique<cpu::CpuNetwork>(
                      w.spec, NetworkOptions{.batch = w.batch, .optimizer = w.optimizer_for(w.batch), .seed = 1}),
                  std::move(s.train));
  const EpochResult result = train_epochs(trainer, *s.validation, s.validation_steps, EpochOptions{.epochs = 1}, {});
  ASSERT_EQ(result.records.size(), 1u);
  const EpochRecord& r = result.records[0];
  std::printf(
      "mlp on %s, 1 epoch (%lld steps of %lld): train loss %.4f, validation loss %.4f, validation accuracy "
      "%.2f%% (%.1f s)\n",
      folder.c_str(), static_cast<long long>(r.steps), static_cast<long long>(w.batch), r.train_loss, r.val_loss,
      100 * r.val_acc, seconds_since(start));
  EXPECT_EQ(r.steps, 600);
  EXPECT_GE(r.val_acc, 0.80);
}

// 20 epochs of the LSTM workload (Adam 1e-2, 20 windows of 35 steps) on the sine wave. Measured
// validation MSE after 20 epochs: 0.0011 at seed 1, 0.0010-0.0015 over seeds 1-12 (0.02-0.37
// after epoch 1). The threshold 0.005 leaves over 3x margin, while an LSTM that does not learn
// stays near the wave's variance, 0.5.
TEST(Learns, LstmSineTwentyEpochs) {
  const models::Workload& w = workload("lstm", "sine");
  const auto start = std::chrono::steady_clock::now();
  Splits s = make_splits("sine", "", w.spec, LoaderConfig{.batch = w.batch, .seed = 1});
  Trainer trainer(std::make_unique<cpu::CpuNetwork>(
                      w.spec, NetworkOptions{.batch = w.batch, .optimizer = w.optimizer_for(w.batch), .seed = 1}),
                  std::move(s.train));
  const double cpu0 = process_cpu_seconds();
  const EpochResult result = train_epochs(trainer, *s.validation, s.validation_steps, EpochOptions{.epochs = 20}, {});
  const double cpu = process_cpu_seconds() - cpu0;
  ASSERT_EQ(result.records.size(), 20u);
  const EpochRecord& first = result.records.front();
  const EpochRecord& last = result.records.back();
  std::printf("lstm on the sine wave, 20 epochs: validation MSE %.6f after epoch 1, %.6f after epoch 20 (%.1f s)\n",
              first.val_loss, last.val_loss, seconds_since(start));
  EXPECT_LT(last.val_acc, 0.0) << "regression has no accuracy";
  EXPECT_LT(last.val_loss, first.val_loss);
  EXPECT_LT(last.val_loss, 0.005);
  // The training steps' own CPU time, measured over them (an epochs/ row's host CPU): some of the
  // loop's, never more, and growing epoch by epoch.
  EXPECT_GT(first.train_cpu_s, 0);
  EXPECT_GT(last.train_cpu_s, first.train_cpu_s);
  EXPECT_LE(last.train_cpu_s, cpu);
}

}  // namespace
}  // namespace tb::data
