// Parsing of IDX and CIFAR-10 files; gzip through zlib, which also reads plain files.
#include "datasets/readers.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "engine/core/error.hpp"

namespace tb::data {
namespace {

constexpr std::int64_t kCifarSide = 32, kCifarRecord = 1 + 3 * kCifarSide * kCifarSide;

std::uint32_t big_endian32(const std::uint8_t* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
}

// What a path is when it is not a regular file, for the message.
std::string kind_of(const std::filesystem::file_status& s) {
  namespace fs = std::filesystem;
  switch (s.type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::fifo:
      return "a named pipe (FIFO)";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

// Opens a regular file for reading through zlib, or says exactly why not.
gzFile open_regular(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status s = fs::status(path, ec);
  if (ec == std::errc::too_many_symbolic_link_levels)
    throw InputError(fmt::format("{}: a loop of symbolic links; point it at the file itself", path));
  if (std::error_code link_ec; !fs::exists(s) && fs::is_symlink(fs::symlink_status(path, link_ec)))
    throw InputError(fmt::format("{}: a symbolic link to {}, which is not there; point it at the dataset file", path,
                                 fs::read_symlink(path, link_ec).string()));
  if (ec || !fs::exists(s))
    throw InputError(
        fmt::format("{}: no such file (run scripts/fetch_datasets.sh, or point --data_dir "
                    "at the folder that holds it)",
                    path));
  if (!fs::is_regular_file(s))
    throw InputError(fmt::format("{}: is {}, expected the dataset file of that name", path, kind_of(s)));
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f)
    throw InputError(
        fmt::format("{}: cannot be opened for reading ({}); check its permissions", path, std::strerror(errno)));
  return f;
}

// Closes `f` and throws: the gzip stream of `path` is corrupt, in zlib's words.
[[noreturn]] void corrupt_gzip(gzFile f, const std::string& path) {
  int code = 0;
  const std::string why = gzerror(f, &code);
  gzclose(f);
  throw InputError(fmt::format("{}: corrupt gzip stream ({}); download the file again", path, why));
}

// What an IDX image file and its label file declare in their headers (16 and 8 bytes), checked:
// the magic numbers, the image size the dataset has, as many labels as images.
struct IdxHeader {
  std::int64_t count = 0, rows = 0, cols = 0;
};
IdxHeader parse_idx_header(const std::vector<std::uint8_t>& images, const std::string& images_name,
                           const std::vector<std::uint8_t>& labels, const std::string& labels_name,
                           std::int64_t expected_rows, std::int64_t expected_cols) {
  if (images.size() < 16)
    throw InputError(
        fmt::format("{}: {} bytes, too short for an IDX image header (16 bytes)", images_name, images.size()));
  if (labels.size() < 8)
    throw InputError(
        fmt::format("{}: {} bytes, too short for an IDX label header (8 bytes)", labels_name, labels.size()));
  const std::uint32_t image_magic = big_endian32(images.data()), label_magic = big_endian32(labels.data());
  if (image_magic != 0x00000803)
    throw InputError(
        fmt::format("{}: magic number 0x{:08x}, expected 0x00000803 (IDX unsigned-byte images); "
                    "is this an image file?",
                    images_name, image_magic));
  if (label_magic != 0x00000801)
    throw InputError(
        fmt::format("{}: magic number 0x{:08x}, expected 0x00000801 (IDX unsigned-byte labels); "
                    "is this a label file?",
                    labels_name, label_magic));
  const IdxHeader h{big_endian32(images.data() + 4), big_endian32(images.data() + 8), big_endian32(images.data() + 12)};
  if (h.rows != expected_rows || h.cols != expected_cols)
    throw InputError(
        fmt::format("{}: images are {}x{}, expected {}x{}", images_name, h.rows, h.cols, expected_rows, expected_cols));
  const std::int64_t label_count = big_endian32(labels.data() + 4);
  if (label_count != h.count)
    throw InputError(
        fmt::format("{} holds {} images but {} holds {} labels; the two files must come from "
                    "the same split",
                    images_name, h.count, labels_name, label_count));
  return h;
}

}  // namespace

std::vector<std::uint8_t> read_prefix(const std::string& path, std::uint64_t bytes) {
  gzFile f = open_regular(path);
  std::vector<std::uint8_t> out(bytes);
  const int n = gzread(f, out.data(), unsigned(bytes));
  if (n < 0) corrupt_gzip(f, path);
  gzclose(f);
  out.resize(std::size_t(n));
  return out;
}

std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path, const SizeLimit& limit) {
  gzFile f = open_regular(path);
  const bool plain = gzdirect(f) == 1;
  const auto too_large = [&](const std::string& size) {
    gzclose(f);
    return InputError(fmt::format(
        "{}: {} bytes{}, {} {} {} (trailing bytes, a corrupt or foreign file, or a gzip "
        "stream that expands far beyond its data? download the file again)",
        path, size, plain ? "" : " once decompressed", limit.exact ? "expected" : "at most", limit.bytes, limit.why));
  };
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); plain && !ec && size > limit.bytes)
    throw too_large(std::to_string(size));
  std::vector<std::uint8_t> out;
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(f, chunk, sizeof(chunk));
    if (n > 0 && out.size() + std::uint64_t(n) > limit.bytes) throw too_large(fmt::format("more than {}", limit.bytes));
    if (n < 0) corrupt_gzip(f, path);
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  // gzread reports a gzip stream cut short as a clean end of file, leaving Z_BUF_ERROR
  // ("unexpected end of file") for gzerror: a truncated download would otherwise reach the
  // parsers as a shorter file.
  int code = 0;
  const std::string why = gzerror(f, &code);
  if (code != Z_OK && code != Z_BUF_ERROR) corrupt_gzip(f, path);
  gzclose(f);
  if (code == Z_BUF_ERROR)
    throw InputError(
        fmt::format("{}: gzip stream ends early ({}) after {} decompressed bytes, expected the rest "
                    "of the stream; truncated download? download the file again",
                    path, why, out.size()));
  return out;
}

ImageSet parse_idx(const std::vector<std::uint8_t>& images, const std::string& images_name,
                   const std::vector<std::uint8_t>& labels, const std::string& labels_name, std::int64_t expected_rows,
                   std::int64_t expected_cols, std::int32_t classes) {
  const IdxHeader h = parse_idx_header(images, images_name, labels, labels_name, expected_rows, expected_cols);
  ImageSet set;
  set.count = h.count;
  set.channels = 1;
  set.rows = h.rows;
  set.cols = h.cols;
  const std::int64_t label_count = h.count;
  const std::uint64_t image_bytes = 16 + std::uint64_t(set.count) * std::uint64_t(set.sample_size());
  if (images.size() != image_bytes)
    throw InputError(fmt::format("{}: {} bytes, expected {} for {} images of {}x{} ({})", images_name, images.size(),
                                 image_bytes, set.count, set.rows, set.cols,
                                 images.size() < image_bytes ? "truncated download?" : "trailing bytes"));
  if (labels.size() != 8 + std::uint64_t(label_count))
    throw InputError(fmt::format(
        "{}: {} bytes, expected {} for {} labels ({})", labels_name, labels.size(), 8 + label_count, label_count,
        labels.size() < 8 + std::uint64_t(label_count) ? "truncated download?" : "trailing bytes"));
  set.pixels.assign(images.begin() + 16, images.end());
  set.labels.resize(std::size_t(set.count));
  for (std::int64_t i = 0; i < set.count; ++i) {
    const std::int32_t label = labels[8 + i];
    if (label >= classes)
      throw InputError(
          fmt::format("{}: label {} of sample {} is out of range [0, {})", labels_name, label, i, classes));
    set.labels[i] = label;
  }
  return set;
}

ImageSet read_idx(const std::string& images_path, const std::string& labels_path, std::int64_t expected_rows,
                  std::int64_t expected_cols, std::int32_t classes) {
  // The headers first: they say how large the files may be, and nothing more is read (a header
  // the parser refuses, nothing at all).
  const IdxHeader h = parse_idx_header(read_prefix(images_path, 16), images_path, read_prefix(labels_path, 8),
                                       labels_path, expected_rows, expected_cols);
  if (h.count > kMaxIdxSamples)
    throw InputError(
        fmt::format("{} and {}: headers declare {} images and as many labels, more than the {} "
                    "trainbench reads; corrupt or foreign files?",
                    images_path, labels_path, h.count, kMaxIdxSamples));
  const SizeLimit image_limit{16 + std::uint64_t(h.count * h.rows * h.cols), true,
                              fmt::format("for {} images of {}x{} (its header)", h.count, h.rows, h.cols)};
  const SizeLimit label_limit{8 + std::uint64_t(h.count), true, fmt::format("for {} labels (its header)", h.count)};
  return parse_idx(read_file_maybe_gzip(images_path, image_limit), images_path,
                   read_file_maybe_gzip(labels_path, label_limit), labels_path, expected_rows, expected_cols, classes);
}

void append_cifar10(const std::vector<std::uint8_t>& bytes, const std::string& name, ImageSet& into) {
  if (bytes.empty())
    throw InputError(
        fmt::format("{}: empty file, expected whole {}-byte CIFAR-10 records (1 label + 3x32x32 "
                    "pixels); truncated download?",
                    name, kCifarRecord));
  if (bytes.size() % kCifarRecord != 0)
    throw InputError(fmt::format(
        "{}: {} bytes is not a whole number of {}-byte CIFAR-10 records "
        "(1 label + 3x32x32 pixels){}",
        name, bytes.size(), kCifarRecord, bytes.size() > std::size_t(kCifarRecord) ? "; truncated download?" : ""));
  const std::int64_t records = std::int64_t(bytes.size()) / kCifarRecord;
  // Every label is checked before `into` changes, so that a bad file leaves it as it was (count,
  // labels and pixels in step).
  for (std::int64_t r = 0; r < records; ++r)
    if (const std::uint8_t label = bytes[std::size_t(r * kCifarRecord)]; label >= 10)
      throw InputError(
          fmt::format("{}: label {} of record {} is out of range [0, 10); is this the CIFAR-10 "
                      "binary version (not CIFAR-100)?",
                      name, label, r));
  into.channels = 3;
  into.rows = into.cols = kCifarSide;
  into.pixels.reserve(into.pixels.size() + std::size_t(records * (kCifarRecord - 1)));
  for (std::int64_t r = 0; r < records; ++r) {
    const std::uint8_t* record = bytes.data() + r * kCifarRecord;
    into.labels.push_back(record[0]);
    into.pixels.insert(into.pixels.end(), record + 1, record + kCifarRecord);
  }
  into.count += records;
}

ImageSet read_cifar10(const std::vector<std::string>& paths) {
  ImageSet set;
  for (const std::string& path : paths)
    append_cifar10(read_file_maybe_gzip(
                       path, SizeLimit{std::uint64_t(kMaxCifarRecords * kCifarRecord), false,
                                       fmt::format("for {} CIFAR-10 records, the whole dataset", kMaxCifarRecords)}),
                   path, set);
  return set;
}

}  // namespace tb::data
