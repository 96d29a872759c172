// Tests of the CUDA backend (engine/cuda): the caching allocator (over a fake memory source) and the
// device inventory's logic run anywhere; layers, training steps, mixed precision, CUDA graphs and the
// memory cap are checked against the CPU backend on a GPU, and skip themselves, saying why, without one.
// N = batch, C = channels, H, W = height, width, T = time steps, I = input features, H = hidden
// size (LSTM), K = classes, F = features.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/dataset.hpp"
#include "engine/core/error.hpp"
#include "engine/cpu/network.hpp"
#include "engine/cuda/allocator.hpp"
#include "engine/cuda/device.hpp"
#include "engine/cuda/network.hpp"
#include "engine/parallel/nccl_comm.hpp"
#include "engine/parallel/replica.hpp"
#include "engine/parallel/replica_run.hpp"
#include "engine/parallel/shared_device_comm.hpp"
#include "engine/parallel/timeline.hpp"
#include "engine/parallel/world.hpp"
#include "engine/train/trainer.hpp"
#include "models/models.hpp"
#include "tests/large_batch.hpp"
#include "tests/replica_checks.hpp"
#include "tests/tensors.hpp"
#include "tests/threads.hpp"

// Precisions by name in gtest's messages, rather than as bytes.
namespace tb::cuda {
static void PrintTo(Precision p, std::ostream* os) { *os << precision_name(p); }
}  // namespace tb::cuda

namespace tb {
namespace {

using Vec = std::vector<float>;
using cuda::MemoryKind;
using cuda::Precision;

constexpr std::size_t kKiB = 1024, kMiB = kKiB * kKiB;

// f() must throw E with `text` in its message.
template <class E, class F>
testing::AssertionResult throws_mentioning(F&& f, const std::string& text) {
  try {
    f();
  } catch (const E& e) {
    if (std::string(e.what()).find(text) != std::string::npos) return testing::AssertionSuccess();
    return testing::AssertionFailure() << "the message \"" << e.what() << "\" does not mention \"" << text << "\"";
  } catch (const std::exception& e) {
    return testing::AssertionFailure() << "threw another type of exception: " << e.what();
  }
  return testing::AssertionFailure() << "did not throw";
}

// ---- The caching allocator over host memory standing in for a device ----

// What a fake source saw. Kept by the test, so that it can be read after the allocator (which
// owns the source) is gone.
struct SourceLog {
  int obtains = 0;       // blocks handed out
  int refusals = 0;      // requests answered with null (the "device" was full)
  int give_backs = 0;    // blocks returned
  std::size_t held = 0;  // bytes handed out and not returned
};

// A device of `capacity` bytes made of host memory.
class HostMemory final : public cuda::MemorySource {
 public:
  HostMemory(std::size_t capacity, SourceLog& log) : capacity_(capacity), log_(log) {}
  // Blocks still handed out when the allocator goes (it leaves them to the driver) are freed here.
  ~HostMemory() override {
    for (const auto& [ptr, bytes] : blocks_) std::free(ptr);
  }
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  void* obtain(std::size_t bytes) override {
    if (log_.held + bytes > capacity_) {
      ++log_.refusals;
      return nullptr;
    }
    void* ptr = std::malloc(bytes);
    if (!ptr) throw std::bad_alloc();
    blocks_.emplace(ptr, bytes);
    log_.held += bytes;
    ++log_.obtains;
    return ptr;
  }
  void give_back(void* ptr) override {
    const auto it = blocks_.find(ptr);
    if (it == blocks_.end()) {
      ADD_FAILURE() << "the allocator gave back a pointer the source never handed out";
      return;
    }
    log_.held -= it->second;
    ++log_.give_backs;
    std::free(ptr);
    blocks_.erase(it);
  }

 private:
  std::size_t capacity_;
  SourceLog& log_;
  std::unordered_map<void*, std::size_t> blocks_;
};

std::size_t by_kind(const std::array<std::size_t, cuda::kMemoryKinds>& bytes, MemoryKind kind) {
  return bytes[std::size_t(kind)];
}

// Every field of two snapshots, so that a failed request can be shown to have changed nothing.
testing::AssertionResult same_stats(const cuda::MemoryStats& a, const cuda::MemoryStats& b) {
  if (a.in_use == b.in_use && a.reserved == b.reserved && a.peak_in_use == b.peak_in_use &&
      a.peak_reserved == b.peak_reserved && a.in_use_by_kind == b.in_use_by_kind && a.peak_by_kind == b.peak_by_kind)
    return testing::AssertionSuccess();
  return testing::AssertionFailure() << "in use " << a.in_use << " vs " << b.in_use << ", reserved " << a.reserved
                                     << " vs " << b.reserved << ", peak " << a.peak_in_use << " vs " << b.peak_in_use
                                     << ", peak reserved " << a.peak_reserved << " vs " << b.peak_reserved
                                     << " (or the per-kind breakdown differs)";
}

TEST(CudaAllocator, RoundsToSizeClasses) {
  using cuda::Allocator;
  // 512-byte multiples up to 1 MiB.
  EXPECT_EQ(Allocator::round(1), 512u);
  EXPECT_EQ(Allocator::round(512), 512u);
  EXPECT_EQ(Allocator::round(513), 1024u);
  EXPECT_EQ(Allocator::round(1000), 1024u);
  EXPECT_EQ(Allocator::round(kMiB - 1), kMiB);
  EXPECT_EQ(Allocator::round(kMiB), kMiB);
  // 2 MiB multiples above.
  EXPECT_EQ(Allocator::round(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(Allocator::round(2 * kMiB), 2 * kMiB);
  EXPECT_EQ(Allocator::round(2 * kMiB + 1), 4 * kMiB);
  EXPECT_EQ(Allocator::round(5 * kMiB), 6 * kMiB);
}

TEST(CudaAllocator, ReusesAFreedBlockOfTheSameClass) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  void* first = a.allocate(1000, MemoryKind::Activations);  // class 1024
  a.release(first);
  EXPECT_EQ(a.stats().in_use, 0u);
  EXPECT_EQ(a.stats().reserved, 1024u) << "a freed block stays cached";

  void* again = a.allocate(700, MemoryKind::Weights);  // class 1024 again
  EXPECT_EQ(again, first) << "the cached block of the same class is handed out again";
  EXPECT_EQ(log.obtains, 1) << "and nothing more is obtained from the device";

  void* other = a.allocate(3000, MemoryKind::Weights);  // class 3072: a new block
  EXPECT_NE(other, first);
  EXPECT_EQ(log.obtains, 2);
  EXPECT_EQ(a.stats().reserved, 1024u + 3072u);
  a.release(again);
  a.release(other);
}

TEST(CudaAllocator, AccountsByKindWithTheBreakdownAtPeak) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  void* weights = a.allocate(3000, MemoryKind::Weights);           // 3072
  void* grads = a.allocate(1000, MemoryKind::Gradients);           // 1024
  void* activations = a.allocate(10000, MemoryKind::Activations);  // 10240
  cuda::MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 3072u + 1024u + 10240u);
  EXPECT_EQ(s.reserved, s.in_use);
  EXPECT_EQ(by_kind(s.in_use_by_kind, MemoryKind::Weights), 3072u);
  EXPECT_EQ(by_kind(s.in_use_by_kind, MemoryKind::Gradients), 1024u);
  EXPECT_EQ(by_kind(s.in_use_by_kind, MemoryKind::Activations), 10240u);
  EXPECT_EQ(by_kind(s.in_use_by_kind, MemoryKind::Workspace), 0u);
  EXPECT_EQ(s.peak_in_use, s.in_use);
  EXPECT_EQ(s.peak_by_kind, s.in_use_by_kind);

  // Below the peak: the peak and its breakdown stay as they were.
  a.release(activations);
  void* workspace = a.allocate(512, MemoryKind::Workspace);
  s = a.stats();
  EXPECT_EQ(s.in_use, 3072u + 1024u + 512u);
  EXPECT_EQ(s.reserved, 3072u + 1024u + 10240u + 512u) << "the released block is still cached";
  EXPECT_EQ(by_kind(s.in_use_by_kind, MemoryKind::Activations), 0u);
  EXPECT_EQ(s.peak_in_use, 3072u + 1024u + 10240u);
  EXPECT_EQ(by_kind(s.peak_by_kind, MemoryKind::Activations), 10240u);
  EXPECT_EQ(by_kind(s.peak_by_kind, MemoryKind::Workspace), 0u) << "the workspace came after the peak";

  // A new peak with another mix: the breakdown is the one at the new peak.
  void* data = a.allocate(20000, MemoryKind::Data);  // 20480
  s = a.stats();
  EXPECT_EQ(s.peak_in_use, 3072u + 1024u + 512u + 20480u);
  EXPECT_EQ(by_kind(s.peak_by_kind, MemoryKind::Activations), 0u);
  EXPECT_EQ(by_kind(s.peak_by_kind, MemoryKind::Data), 20480u);
  EXPECT_EQ(by_kind(s.peak_by_kind, MemoryKind::Workspace), 512u);
  EXPECT_EQ(s.peak_reserved, s.reserved);
  for (void* p : {weights, grads, workspace, data}) a.release(p);
}

TEST(CudaAllocator, ResetPeakStartsFromWhatIsInUse) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  void* big = a.allocate(100000, MemoryKind::Activations);
  void* small = a.allocate(1000, MemoryKind::Weights);
  a.release(big);
  a.reset_peak();
  const cuda::MemoryStats s = a.stats();
  EXPECT_EQ(s.peak_in_use, 1024u);
  EXPECT_EQ(s.peak_by_kind, s.in_use_by_kind);
  EXPECT_EQ(by_kind(s.peak_by_kind, MemoryKind::Activations), 0u);
  EXPECT_EQ(s.peak_reserved, s.reserved) << "the cached block still counts as reserved";
  a.release(small);
}

TEST(CudaAllocator, CapRefusesARequestAndChangesNothing) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  a.set_limit(4096);
  EXPECT_EQ(a.limit(), 4096u);
  void* kept = a.allocate(3000, MemoryKind::Weights);  // 3072 of 4096
  const cuda::MemoryStats before = a.stats();
  EXPECT_TRUE(throws_mentioning<OutOfMemory>([&] { a.allocate(2000, MemoryKind::Activations); }, "--gpu_memory_limit"));
  EXPECT_TRUE(throws_mentioning<OutOfMemory>([&] { a.allocate(2000, MemoryKind::Activations); }, "activations"))
      << "the message names what the memory was for";
  EXPECT_TRUE(same_stats(a.stats(), before));
  EXPECT_EQ(log.obtains, 1) << "a refused request never reaches the device";

  a.set_limit(0);  // no cap
  void* now = a.allocate(2000, MemoryKind::Activations);
  EXPECT_EQ(a.stats().in_use, 3072u + 2048u);
  a.release(now);
  a.release(kept);
}

TEST(CudaAllocator, CapDropsCachedBlocksBeforeRefusing) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  a.set_limit(4096);
  a.release(a.allocate(2000, MemoryKind::Activations));  // 2048 cached
  // 2048 cached + 3072 would pass the cap: the cache goes back to the device first.
  void* p = a.allocate(3000, MemoryKind::Weights);
  EXPECT_EQ(log.give_backs, 1);
  EXPECT_EQ(a.stats().reserved, 3072u);
  EXPECT_EQ(a.stats().in_use, 3072u);
  a.release(p);
}

TEST(CudaAllocator, LoweringTheCapReturnsCachedBlocks) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  void* kept = a.allocate(1000, MemoryKind::Weights);
  a.release(a.allocate(8000, MemoryKind::Activations));  // 8192 cached
  a.set_limit(4096);
  EXPECT_EQ(log.give_backs, 1);
  EXPECT_EQ(a.stats().reserved, 1024u);
  EXPECT_EQ(log.held, 1024u);
  a.release(kept);
}

TEST(CudaAllocator, FullDeviceEmptiesTheCacheAndRetries) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(4096, log));  // no cap: the device itself is full
  a.release(a.allocate(2000, MemoryKind::Activations));           // 2048 cached
  void* p = a.allocate(3000, MemoryKind::Weights);                // 2048 + 3072 > 4096
  EXPECT_EQ(log.refusals, 1) << "the first attempt is refused";
  EXPECT_EQ(log.give_backs, 1) << "then the cache goes back";
  EXPECT_EQ(log.obtains, 2) << "and the retry succeeds";
  EXPECT_EQ(a.stats().reserved, 3072u);
  a.release(p);
}

TEST(CudaAllocator, FullDeviceThrowsWhenTheCacheCannotHelp) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(4096, log));
  void* p = a.allocate(3000, MemoryKind::Weights);  // 3072 of 4096 in use, nothing cached
  const cuda::MemoryStats before = a.stats();
  EXPECT_TRUE(throws_mentioning<OutOfMemory>([&] { a.allocate(3000, MemoryKind::Gradients); }, "gradients"));
  EXPECT_EQ(log.refusals, 2) << "refused, the (empty) cache dropped, refused again";
  EXPECT_TRUE(same_stats(a.stats(), before));
  a.release(p);
}

TEST(CudaAllocator, ReleaseOfAForeignPointerThrows) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  int local = 0;
  EXPECT_THROW(a.release(&local), Error);
  void* p = a.allocate(100, MemoryKind::Other);
  a.release(p);
  EXPECT_THROW(a.release(p), Error) << "a second release of the same block";
  EXPECT_NO_THROW(a.release(nullptr));
  EXPECT_EQ(a.stats().in_use, 0u);
}

TEST(CudaAllocator, DeviceBufferReturnsItsMemory) {
  SourceLog log;
  cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
  {
    cuda::DeviceBuffer b(a, 1000, MemoryKind::Data);
    EXPECT_TRUE(b);
    EXPECT_EQ(b.bytes(), 1000u);
    EXPECT_EQ(a.stats().in_use, 1024u);
  }
  EXPECT_EQ(a.stats().in_use, 0u) << "returned on destruction";

  cuda::DeviceBuffer b(a, 1000, MemoryKind::Data), c(a, 5000, MemoryKind::Activations);
  void* c_ptr = c.get();
  b = std::move(c);
  EXPECT_EQ(a.stats().in_use, 5120u) << "move-assignment returns the block it replaces";
  EXPECT_EQ(b.get(), c_ptr);
  EXPECT_EQ(b.bytes(), 5000u);
  EXPECT_FALSE(c) << "a moved-from buffer is empty";  // NOLINT(bugprone-use-after-move)

  cuda::DeviceBuffer d(std::move(b));
  EXPECT_EQ(d.get(), c_ptr);
  EXPECT_EQ(a.stats().in_use, 5120u) << "a move hands the block over, nothing more";
  d.reset();
  EXPECT_EQ(a.stats().in_use, 0u);

  const cuda::DeviceBuffer empty(a, 0, MemoryKind::Other);
  EXPECT_FALSE(empty);
  EXPECT_EQ(a.stats().in_use, 0u);
}

TEST(CudaAllocator, CacheGoesBackOnEmptyCacheAndOnDestruction) {
  SourceLog log;
  {
    cuda::Allocator a(0, std::make_unique<HostMemory>(kMiB, log));
    a.release(a.allocate(1000, MemoryKind::Weights));
    a.empty_cache();
    EXPECT_EQ(log.give_backs, 1);
    EXPECT_EQ(a.stats().reserved, 0u);
    a.release(a.allocate(5000, MemoryKind::Weights));
    a.release(a.allocate(9000, MemoryKind::Weights));
  }
  EXPECT_EQ(log.give_backs, 3);
  EXPECT_EQ(log.held, 0u);
}

// ---- Device inventory, precision support and peak rates (no GPU needed) ----

cuda::DeviceInfo device(std::string name, int cc_major, int cc_minor, int sms = 0, int clock_mhz = 0) {
  cuda::DeviceInfo d;
  d.name = std::move(name);
  d.cc_major = cc_major;
  d.cc_minor = cc_minor;
  d.sms = sms;
  d.clock_mhz = clock_mhz;
  return d;
}

TEST(CudaDevice, InventoryExplainsAMissingGpu) {
  const cuda::GpuInventory& inventory = cuda::gpu_inventory();
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (status != cudaSuccess || count == 0) {
    EXPECT_TRUE(inventory.devices.empty());
    if (status == cudaErrorInsufficientDriver) {
      EXPECT_NE(inventory.unavailable.find("driver"), std::string::npos) << inventory.unavailable;
    }
  } else {
    EXPECT_EQ(inventory.devices.size(), std::size_t(count));
    EXPECT_TRUE(inventory.unavailable.empty()) << inventory.unavailable;
    for (const cuda::DeviceInfo& d : inventory.devices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_GT(d.cc_major, 0);
      EXPECT_GT(d.sms, 0);
      EXPECT_GT(d.memory_bytes, 0u);
    }
  }
  // Whatever the machine: no device always comes with the reason.
  if (inventory.devices.empty()) {
    EXPECT_FALSE(inventory.unavailable.empty());
  }
}

TEST(CudaDevice, PrecisionSupportByComputeCapability) {
  const cuda::DeviceInfo turing = device("Tesla T4", 7, 5);
  EXPECT_EQ(cuda::precision_unsupported(turing, Precision::FP32), "");
  EXPECT_EQ(cuda::precision_unsupported(turing, Precision::FP16), "");
  for (const Precision p : {Precision::TF32, Precision::BF16}) {
    const std::string why = cuda::precision_unsupported(turing, p);
    EXPECT_NE(why.find("compute capability 8.0"), std::string::npos) << cuda::precision_name(p) << ": " << why;
    EXPECT_NE(why.find("Tesla T4"), std::string::npos) << why;
  }
  EXPECT_NE(cuda::precision_unsupported(device("Tesla P100", 6, 0), Precision::FP16).find("7.0"), std::string::npos);
  for (const auto& d : {device("NVIDIA A100-SXM4-80GB", 8, 0), device("NVIDIA H100 80GB HBM3", 9, 0)})
    for (const Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16})
      EXPECT_EQ(cuda::precision_unsupported(d, p), "") << d.name << " " << cuda::precision_name(p);
}

TEST(CudaDevice, PeakRateOfH100SxmFromTheDatasheet) {
  const cuda::DeviceInfo h100 = device("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980);
  EXPECT_DOUBLE_EQ(cuda::peak_rate(h100, Precision::FP32).tflops, 67);
  EXPECT_DOUBLE_EQ(cuda::peak_rate(h100, Precision::TF32).tflops, 494.7);
  EXPECT_DOUBLE_EQ(cuda::peak_rate(h100, Precision::FP16).tflops, 989.4);
  EXPECT_DOUBLE_EQ(cuda::peak_rate(h100, Precision::BF16).tflops, 989.4);
  const std::string source = cuda::peak_rate(h100, Precision::FP16).source;
  EXPECT_NE(source.find("datasheet"), std::string::npos) << source;
}

TEST(CudaDevice, PeakRateOfH100PcieIsNotTheSxmFigure) {
  const cuda::DeviceInfo pcie = device("NVIDIA H100 PCIe", 9, 0, 114, 1755);
  const cuda::PeakRate fp32 = cuda::peak_rate(pcie, Precision::FP32);
  EXPECT_DOUBLE_EQ(fp32.tflops, 51.2);
  EXPECT_NE(fp32.source.find("PCIe"), std::string::npos) << fp32.source;
  EXPECT_DOUBLE_EQ(cuda::peak_rate(pcie, Precision::FP16).tflops, 756);
}

TEST(CudaDevice, PeakRateDerivedForAGpuNotInTheTable) {
  const cuda::DeviceInfo unknown = device("Imaginary GPU", 8, 6, /*sms=*/10, /*clock_mhz=*/1000);
  const cuda::PeakRate fp32 = cuda::peak_rate(unknown, Precision::FP32);
  // 2 FLOPs per FMA x 10 SMs x 128 fp32 lanes (compute capability 8.6) x 1000 MHz.
  EXPECT_NEAR(fp32.tflops, 2.0 * 10 * 128 * 1000e-6, 1e-12);
  EXPECT_EQ(fp32.source.rfind("derived", 0), 0u) << fp32.source;
  const cuda::PeakRate fp16 = cuda::peak_rate(unknown, Precision::FP16);
  EXPECT_NEAR(fp16.tflops, fp32.tflops, 1e-12) << "measured against the fp32 rate, as the source says";
  EXPECT_EQ(fp16.source.rfind("derived", 0), 0u) << fp16.source;
}

// Runs everywhere: the permutation between canonical NCHW (KCRS filters) and channels-last.
TEST(CudaLayout, ChannelsLastPutsChannelsInnermost) {
  const cuda::Nchw s{2, 3, 2, 2};  // N, C, H, W
  Vec nchw(24);
  for (std::size_t i = 0; i < nchw.size(); ++i) nchw[i] = float(i);
  const Vec nhwc = cuda::to_channels_last(nchw, s);
  // Element (n=1, c=2, h=1, w=0): NCHW index ((1*3+2)*2+1)*2+0 = 22, NHWC ((1*2+1)*2+0)*3+2 = 20.
  EXPECT_EQ(nhwc[20], 22.0f);
  EXPECT_EQ(nhwc[0], 0.0f);
  EXPECT_EQ(nhwc[1], 4.0f) << "the next element is channel 1 of the same pixel";
  EXPECT_EQ(cuda::from_channels_last(nhwc, s), nchw);
  EXPECT_THROW(cuda::to_channels_last(Vec(5), s), Error);
}

TEST(CudaDevice, ParsesPrecisionNames) {
  for (const Precision p : {Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16})
    EXPECT_EQ(cuda::parse_precision(cuda::precision_name(p)), p) << cuda::precision_name(p);
  EXPECT_TRUE(throws_mentioning<InputError>([] { cuda::parse_precision("fp8"); }, "--precisions"));
}

// ---- GPU against CPU (skipped without a usable GPU) ----

// Why this machine cannot run a GPU test in `precision` on device 0; empty where it can.
std::string why_not_runnable(Precision precision) {
  const cuda::GpuInventory& inventory = cuda::gpu_inventory();
  if (inventory.devices.empty()) return "no usable GPU: " + inventory.unavailable;
  return cuda::precision_unsupported(inventory.devices[0], precision);
}

// Relative L2 tolerance ||gpu - cpu|| / max(||cpu||, 1e-6) per precision. The CPU result is
// fp32 (oneDNN, verified against the double reference ops in test_cpu_layers).
// fp32: both sides are strict fp32 and differ only in summation order, ~1e-6 relative.
// tf32: products of operands rounded to a 10-bit mantissa (2^-11 ~ 5e-4 per operand), summed in
//       fp32; the errors of a few hundred terms mostly cancel, 5e-3 leaves margin.
// fp16: every stored tensor (activations, gradients, compute weights) rounded to 11 bits
//       (2^-11 ~ 5e-4) at each layer boundary, fp32 accumulation: ~1e-3, 1e-2 leaves margin.
// bf16: the same with 8 bits (2^-8 ~ 4e-3 per rounding): 5e-2.
// The inputs, parameters and output gradients of the layer tests lie on the bf16 grid, so that
// every precision stores them exactly and only the backend's own arithmetic is compared.
double tolerance(Precision p) {
  switch (p) {
    case Precision::FP32:
      return 1e-4;
    case Precision::TF32:
      return 5e-3;
    case Precision::FP16:
      return 1e-2;
    case Precision::BF16:
      return 5e-2;
  }
  return 0;
}
// A single element may be off by this many times the tolerance (relative to its own magnitude
// plus the tensor's RMS): the norm alone would average one wrong element of a large tensor away.
constexpr double kElementSlack = 10;
// Zero trust (benchdnn): a comparison whose reference is mostly exact zeros proves little, so it
// fails unless the caller says that many zeros are expected.
constexpr double kMaxZeroFraction = 0.5;

testing::AssertionResult agree(const Vec& gpu, const Vec& cpu, double tol,
                               double max_zero_fraction = kMaxZeroFraction) {
  if (gpu.size() != cpu.size())
    return testing::AssertionFailure() << "GPU gives " << gpu.size() << " values, CPU " << cpu.size();
  if (cpu.empty()) return testing::AssertionFailure() << "empty tensor";
  std::size_t zeros = 0;
  double cpu2 = 0, diff2 = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (!std::isfinite(gpu[i]) || !std::isfinite(cpu[i]))
      return testing::AssertionFailure() << "non-finite value at " << i << ": GPU " << gpu[i] << ", CPU " << cpu[i];
    zeros += cpu[i] == 0.0f;
    const double d = double(gpu[i]) - double(cpu[i]);
    diff2 += d * d;
    cpu2 += double(cpu[i]) * double(cpu[i]);
  }
  if (double(zeros) > max_zero_fraction * double(cpu.size()))
    return testing::AssertionFailure() << zeros << " of " << cpu.size()
                                       << " CPU values are exactly zero: the comparison would prove little";
  const double rms = std::sqrt(cpu2 / double(cpu.size()));
  std::ostringstream bad;
  std::size_t outliers = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    const double d = std::abs(double(gpu[i]) - double(cpu[i]));
    if (d > kElementSlack * tol * (std::abs(double(cpu[i])) + rms) && outliers++ < 8)
      bad << "\n  [" << i << "] GPU " << gpu[i] << ", CPU " << cpu[i];
  }
  const double rel = std::sqrt(diff2) / std::max(std::sqrt(cpu2), 1e-6);
  if (rel > tol || outliers > 0)
    return testing::AssertionFailure() << "relative L2 error " << rel << " (tolerance " << tol << "), " << outliers
                                       << " of " << cpu.size() << " elements far out" << bad.str();
  return testing::AssertionSuccess();
}

// Rounded to the nearest bf16 value (ties to even): exact in fp32, tf32, fp16 (for the
// magnitudes used here) and bf16 alike.
float on_bf16_grid(float x) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xFFFF0000u);
}

// Every random input on the bf16 grid.
Vec uniform(std::mt19937& rng, i64 n, float lo = -1.f, float hi = 1.f) {
  return testing_support::uniform(rng, n, lo, hi, on_bf16_grid);
}
Vec signed_away_from_zero(std::mt19937& rng, i64 n, double positive) {
  return testing_support::signed_away_from_zero(rng, n, positive, on_bf16_grid);
}

// Multiples of 1/32, at most 512 of them: integers up to 256 times a power of two are exact in
// bf16, so no max-pool window has a tie in any precision.
Vec distinct(std::mt19937& rng, i64 n) {
  EXPECT_LE(n, 512) << "more distinct values than bf16 holds exactly at this spacing";
  return testing_support::distinct(rng, n, 1.0 / 32);
}

using testing_support::eye;

std::vector<ParamSpec> params_of(const ModelSpec& model, const std::vector<Dims>& shapes, int node) {
  const Node& n = model.nodes.at(std::size_t(node));
  return n.inputs.empty() ? std::vector<ParamSpec>{} : node_params(n.spec, shapes.at(std::size_t(n.inputs[0])));
}

// f(node, index, name) for every parameter of the model.
void for_each_param(const ModelSpec& model, i64 batch, const std::function<void(int, int, const std::string&)>& f) {
  const std::vector<Dims> shapes = infer_shapes(model, batch);
  for (int node = 1; node < int(model.nodes.size()); ++node) {
    const std::vector<ParamSpec> params = params_of(model, shapes, node);
    for (int k = 0; k < int(params.size()); ++k) f(node, k, model.nodes[std::size_t(node)].name + "." + params[k].name);
  }
}

// Every parameter of `from` into `to`; the GPU keeps fp32 masters, so the round trip is exact.
void copy_params(const ModelSpec& model, i64 batch, const Network& from, Network& to) {
  for_each_param(model, batch, [&](int node, int k, const std::string& name) {
    const Vec value = from.read_param(node, k);
    to.write_param(node, k, value);
    EXPECT_EQ(to.read_param(node, k), value) << name << ": write_param/read_param round trip";
  });
}

std::unique_ptr<cpu::CpuNetwork> cpu_network(const ModelSpec& model, i64 batch, const OptimizerConfig& optimizer = {}) {
  // Values kept whole on both sides: the comparisons read them in the middle of the network.
  return std::make_unique<cpu::CpuNetwork>(
      model, NetworkOptions{.batch = batch, .optimizer = optimizer, .seed = 5, .keep_values = true});
}

NetworkOptions gpu_config(i64 batch, Precision precision, const OptimizerConfig& optimizer = {}) {
  NetworkOptions config;
  config.batch = batch;
  config.precision = precision;
  config.optimizer = optimizer;
  config.seed = 5;
  config.keep_values = true;
  return config;
}

// A batch for a classification model: inputs in [0, 1) like pixels, labels of every class.
Batch random_batch(const ModelSpec& model, i64 batch, std::mt19937& rng) {
  Batch b;
  b.batch = batch;
  b.input = uniform(rng, product(infer_shapes(model, batch)[0]), 0.f, 1.f);
  std::uniform_int_distribution<std::int32_t> label(0, std::int32_t(model.classes - 1));
  for (i64 i = 0; i < batch; ++i) b.labels.push_back(label(rng));
  return b;
}

// Skips the test where no GPU can run fp32.
class CudaGpu : public testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = why_not_runnable(Precision::FP32); !why.empty()) GTEST_SKIP() << why;
  }
};

// ---- Every layer on its own: Input -> feeder -> op ----
//
// The model input's gradient is never computed, so the op reads a feeder's output (a 1x1 Conv2d
// without bias for images, a Linear without bias for vectors and sequences, set to the identity)
// and read_grad(feeder) is the op's input gradient: read_grad(node) is the gradient with respect
// to that node's output.
struct LayerCase {
  ModelSpec model;  // node 1: the feeder; the last node: the op (a loss, or an output given its gradient)
  i64 batch = 1;
  Batch data;
  double grad_zero_fraction = kMaxZeroFraction;  // allowed in the gradients of the nodes before the op
  bool check_eval = false;                       // also compare inference mode after a few steps
  std::optional<cuda::Layout> layout;            // the GPU network's layout (default: its own choice)
  std::vector<int> compared;                     // nodes whose values and gradients are compared (all)
};

LayerCase layer_case(const std::string& name, const InputSpec& in, i64 batch, LayerSpec op) {
  LayerCase c;
  c.model.name = name;
  c.batch = batch;
  const int x = c.model.add("input", in, {});
  const i64 F = in.sample_dims.front();
  const int feeder = in.sample_dims.size() == 3 ? c.model.add("feeder", Conv2dSpec{F, F, 1, 1, 0, false}, {x})
                                                : c.model.add("feeder", LinearSpec{F, F, false}, {x});
  c.model.add("op", std::move(op), {feeder});
  c.data.batch = batch;
  return c;
}

LayerCase image_case(const std::string& name, i64 N, i64 C, i64 H, i64 W, LayerSpec op) {
  return layer_case(name, InputSpec{{C, H, W}}, N, std::move(op));
}

i64 input_count(const LayerCase& c) { return product(infer_shapes(c.model, c.batch)[0]); }

// Runs the case on the CPU and the GPU with the same parameters, batch and output gradient and
// compares every node's output, every gradient and every parameter gradient.
void check_against_cpu(const LayerCase& c, Precision precision) {
  const double tol = tolerance(precision);
  const std::vector<Dims> shapes = infer_shapes(c.model, c.batch);
  const int op = int(c.model.nodes.size()) - 1;
  const bool has_loss = is_loss(c.model.nodes.back().spec);
  std::mt19937 rng(97);

  auto cpu = cpu_network(c.model, c.batch);
  cpu->write_param(1, 0, eye(shapes[0][c.model.input().seq_len > 0 ? 2 : 1]));
  const std::vector<ParamSpec> op_params = params_of(c.model, shapes, op);
  for (std::size_t k = 0; k < op_params.size(); ++k)
    cpu->write_param(op, int(k),
                     op_params[k].name == "gamma" ? uniform(rng, op_params[k].count(), 0.5f, 1.5f)
                                                  : uniform(rng, op_params[k].count(), -0.5f, 0.5f));

  NetworkOptions config = gpu_config(c.batch, precision);
  config.layout = c.layout;
  // The layer tests are not about loss scaling: a scale of 1024 (a power of two, so that the
  // unscaled gradients are exact) keeps every scaled gradient here far from fp16's 65504.
  config.initial_loss_scale = 1024;
  cuda::CudaNetwork gpu(c.model, config);
  copy_params(c.model, c.batch, *cpu, gpu);

  cpu->set_batch(c.data.view());
  gpu.set_batch(c.data.view());
  const float cpu_loss = cpu->forward(), gpu_loss = gpu.forward();
  if (has_loss) {
    EXPECT_TRUE(agree({gpu_loss}, {cpu_loss}, tol)) << "loss";
    EXPECT_EQ(gpu.correct(), cpu->correct()) << "correct predictions";
  }
  const auto compared = [&](int node) {
    return c.compared.empty() || std::find(c.compared.begin(), c.compared.end(), node) != c.compared.end();
  };
  for (int node = 1; node <= op; ++node) {
    if (!compared(node)) continue;
    EXPECT_TRUE(agree(gpu.read_output(node), cpu->read_output(node), tol)) << "output of " << c.model.nodes[node].name;
  }

  if (!has_loss) {
    const Vec dy = uniform(rng, product(shapes[std::size_t(op)]));
    cpu->set_output_grad(dy);
    gpu.set_output_grad(dy);
  }
  cpu->backward();
  gpu.backward();
  for (int node = 1; node < op; ++node) {
    if (!compared(node)) continue;
    EXPECT_TRUE(agree(gpu.read_grad(node), cpu->read_grad(node), tol, c.grad_zero_fraction))
        << "gradient of the output of " << c.model.nodes[node].name;
  }
  for_each_param(c.model, c.batch, [&](int node, int k, const std::string& name) {
    EXPECT_TRUE(agree(gpu.read_param_grad(node, k), cpu->read_param_grad(node, k), tol)) << "gradient of " << name;
  });

  if (c.check_eval) {
    // Two more training passes move the running statistics further from their start (mean 0,
    // variance 1), then inference mode must normalise with the same running statistics.
    for (int step = 0; step < 2; ++step) {
      cpu->forward();
      gpu.forward();
    }
    cpu->evaluate();
    gpu.evaluate();
    EXPECT_TRUE(agree(gpu.read_output(op), cpu->read_output(op), tol)) << "inference-mode output";
  }
}

class CudaLayers : public testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (const std::string why = why_not_runnable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
  void check(const LayerCase& c) { check_against_cpu(c, GetParam()); }
  std::mt19937 rng_{41};
};

TEST_P(CudaLayers, LinearWithBias) {
  LayerCase c = layer_case("linear", InputSpec{{20}}, 4, LinearSpec{20, 12, true});
  c.data.input = uniform(rng_, input_count(c));
  check(c);
}

TEST_P(CudaLayers, LinearOnAFlattenedImage) {
  LayerCase c = image_case("linear_flatten", 3, 6, 3, 3, LinearSpec{6 * 3 * 3, 5, true});
  c.data.input = uniform(rng_, input_count(c));
  check(c);
}

TEST_P(CudaLayers, Conv3x3Pad1WithBias) {
  LayerCase c = image_case("conv3x3", 2, 6, 8, 8, Conv2dSpec{6, 8, 3, 1, 1, true});
  c.data.input = uniform(rng_, input_count(c));
  check(c);
}

TEST_P(CudaLayers, Conv3x3Stride2WithoutBias) {
  LayerCase c = image_case("conv3x3_s2", 2, 8, 9, 9, Conv2dSpec{8, 16, 3, 2, 1, false});
  c.data.input = uniform(rng_, input_count(c));
  check(c);
}

TEST_P(CudaLayers, Conv5x5UnpaddedLikeLeNet) {
  LayerCase c = image_case("conv5x5", 2, 3, 12, 12, Conv2dSpec{3, 6, 5, 1, 0, true});
  c.data.input = uniform(rng_, input_count(c));
  check(c);
}

// Only the argmax of each window gets a gradient: most of the input gradient is zero by
// construction, but at least one element in kernel^2 (less the overlap) must be set.
double maxpool_zero_fraction(i64 kernel) { return 1.0 - 1.0 / double(kernel * kernel + 1); }

TEST_P(CudaLayers, MaxPool2x2Stride2) {
  LayerCase c = image_case("maxpool2", 2, 4, 8, 8, MaxPool2dSpec{2, 2, 0});
  c.data.input = distinct(rng_, input_count(c));
  c.grad_zero_fraction = maxpool_zero_fraction(2);
  check(c);
}

TEST_P(CudaLayers, MaxPool3x3Stride2Pad1) {
  LayerCase c = image_case("maxpool3", 2, 3, 9, 9, MaxPool2dSpec{3, 2, 1});
  c.data.input = distinct(rng_, input_count(c));
  c.grad_zero_fraction = maxpool_zero_fraction(3);
  check(c);
}

TEST_P(CudaLayers, GlobalAvgPool) {
  LayerCase c = image_case("avgpool", 2, 6, 5, 5, GlobalAvgPoolSpec{});
  c.data.input = uniform(rng_, input_count(c), -0.5f, 1.f);  // a non-zero mean per channel
  check(c);
}

// Each channel with its own mean and spread, so that normalising does something.
Vec per_channel_input(std::mt19937& rng, i64 N, i64 C, i64 HW) {
  Vec x = uniform(rng, N * C * HW);
  const Vec shift = uniform(rng, C, -2.f, 2.f), scale = uniform(rng, C, 0.5f, 3.f);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t ch = (i / std::size_t(HW)) % std::size_t(C);
    x[i] = on_bf16_grid(x[i] * scale[ch] + shift[ch]);
  }
  return x;
}

TEST_P(CudaLayers, BatchNormOnImages) {
  LayerCase c = image_case("batchnorm", 4, 6, 5, 5, BatchNormSpec{.channels = 6});
  c.data.input = per_channel_input(rng_, 4, 6, 25);
  c.check_eval = true;
  check(c);
}

// A batch of vectors (N, C). The model spec only admits 4-D batch norm inputs (infer_shapes),
// so the vectors are (N, C, 1, 1): the CUDA layer gives (N, C) the very same descriptor, and the
// statistics are over the batch alone.
TEST_P(CudaLayers, BatchNormOnVectors) {
  LayerCase c = image_case("batchnorm_vectors", 8, 10, 1, 1, BatchNormSpec{.channels = 10});
  c.data.input = per_channel_input(rng_, 8, 10, 1);
  c.check_eval = true;
  check(c);
}

// Batch norm then ReLU, and batch norm then the residual add then ReLU, run as one layer (cuDNN's
// fused calls in NHWC; cuDNN's batch norm with trainbench's add-ReLU and mask kernels in NCHW),
// in both layouts whatever the precision would choose. The values inside the fused layer are
// not kept; the feeder's output and gradient, the ReLU's output and every parameter gradient are
// compared (the shortcut's gradient reaches the feeder's through the add).
LayerCase fused_case(std::mt19937& rng, bool add, cuda::Layout layout) {
  constexpr i64 N = 4, C = 8, H = 5, W = 5;
  LayerCase c = image_case(add ? "bn_add_relu" : "bn_relu", N, C, H, W, BatchNormSpec{.channels = C});
  const int feeder = 1, bn = 2;
  const int relu = add ? c.model.add("relu", ReLUSpec{}, {c.model.add("add", AddSpec{}, {bn, feeder})})
                       : c.model.add("relu", ReLUSpec{}, {bn});
  c.data.input = per_channel_input(rng, N, C, H * W);
  // With the add, relu(bn(x) + x) over inputs around 3 keeps most of the sums (zero trust).
  if (add)
    for (float& v : c.data.input) v = on_bf16_grid(v + 3.0f);
  c.layout = layout;
  c.compared = {feeder, relu};
  return c;
}

TEST_P(CudaLayers, BatchNormReluFusedInBothLayouts) {
  for (const cuda::Layout layout : {cuda::Layout::NCHW, cuda::Layout::NHWC}) {
    SCOPED_TRACE(cuda::layout_name(layout));
    check(fused_case(rng_, false, layout));
  }
}

TEST_P(CudaLayers, BatchNormAddReluFusedInBothLayouts) {
  for (const cuda::Layout layout : {cuda::Layout::NCHW, cuda::Layout::NHWC}) {
    SCOPED_TRACE(cuda::layout_name(layout));
    check(fused_case(rng_, true, layout));
  }
}

TEST_P(CudaLayers, ReLU) {
  LayerCase c = image_case("relu", 2, 6, 5, 5, ReLUSpec{});
  c.data.input = signed_away_from_zero(rng_, input_count(c), 0.7);  // 30% of the gradient is zero
  check(c);
}

TEST_P(CudaLayers, Sigmoid) {
  LayerCase c = layer_case("sigmoid", InputSpec{{37}}, 4, SigmoidSpec{});
  c.data.input = uniform(rng_, input_count(c), -4.f, 4.f);  // across its curved range
  check(c);
}

TEST_P(CudaLayers, LSTM) {
  const i64 T = 5, N = 3, I = 4, H = 6;
  LayerCase c = layer_case("lstm", InputSpec{{I}, T}, N, LSTMSpec{I, H});  // time-major (T, N, I)
  c.data.input = uniform(rng_, input_count(c));
  check(c);
}

// y = add(relu(a), a): a feeds two layers, so its gradient is the sum of the one through the
// ReLU and the one straight from the add.
TEST_P(CudaLayers, ResidualAdd) {
  LayerCase c = image_case("residual", 2, 6, 5, 5, ReLUSpec{});
  const int a = 1, relu = 2;
  c.model.add("add", AddSpec{}, {relu, a});
  c.data.input = signed_away_from_zero(rng_, input_count(c), 0.7);
  check(c);
}

TEST_P(CudaLayers, SoftmaxCrossEntropy) {
  const i64 N = 8, K = 10;
  LayerCase c = layer_case("xent", InputSpec{{K}}, N, SoftmaxCrossEntropySpec{K});
  c.model.classes = K;
  // Each row a permutation of distinct multiples of 1/4 (exact everywhere, so that no precision
  // can change which logit is largest); even rows are labelled with their argmax, odd rows with
  // another class, so that exactly N/2 predictions are correct.
  Vec row(K);
  for (i64 k = 0; k < K; ++k) row[std::size_t(k)] = float(k - K / 2) / 4.f;
  std::uniform_int_distribution<i64> other(0, K - 2);
  for (i64 n = 0; n < N; ++n) {
    std::shuffle(row.begin(), row.end(), rng_);
    c.data.input.insert(c.data.input.end(), row.begin(), row.end());
    const i64 argmax = std::max_element(row.begin(), row.end()) - row.begin();
    const i64 wrong = other(rng_);
    c.data.labels.push_back(std::int32_t(n % 2 == 0 ? argmax : wrong + (wrong >= argmax)));
  }
  check(c);
  auto cpu = cpu_network(c.model, N);
  cpu->write_param(1, 0, eye(K));
  cpu->set_batch(c.data.view());
  cpu->forward();
  EXPECT_EQ(cpu->correct(), N / 2) << "the case itself: half the rows are labelled with their argmax";
}

TEST_P(CudaLayers, MeanSquaredError) {
  const i64 N = 4, F = 6;
  LayerCase c = layer_case("mse", InputSpec{{F}}, N, MSESpec{});
  c.model.task = Task::Regression;
  c.data.input = uniform(rng_, N * F);
  c.data.targets = uniform(rng_, N * F);
  check(c);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaLayers,
                         testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const testing::TestParamInfo<Precision>& info) {
                           return std::string(cuda::precision_name(info.param));
                         });

// ---- Whole models ----

// One fp32 SGD step of a whole model, CPU against GPU from the same parameters and batch: the
// loss before, the loss after, and every parameter's step. Both are fp32 and differ by summation
// order (~1e-6); 1e-3 relative holds a step's worth of rounding with margin.
// `shared`: the GPU network shares its arena as planned (no keep_values) and fills each block with
// NaN when its planned life ends, so that a layer reading memory after its planned last use, or a
// recomputed value not made again, turns the losses and updates into NaN.
void check_one_step(const ModelSpec& model, i64 batch, bool shared = false,
                    std::optional<cuda::Layout> layout = std::nullopt) {
  constexpr double kTol = 1e-3;
  // A large rate, so that each step is many ulps of its parameter.
  const OptimizerConfig sgd{.kind = OptimizerConfig::Kind::SGD, .lr = 0.1, .momentum = 0.9};
  auto cpu = cpu_network(model, batch, sgd);
  NetworkOptions config = gpu_config(batch, Precision::FP32, sgd);
  config.keep_values = !shared;
  config.poison_dead = shared;
  config.layout = layout;
  cuda::CudaNetwork gpu(model, config);
  copy_params(model, batch, *cpu, gpu);
  std::mt19937 rng(13);
  const Batch data = random_batch(model, batch, rng);
  cpu->set_batch(data.view());
  gpu.set_batch(data.view());
  EXPECT_TRUE(agree({gpu.forward()}, {cpu->forward()}, kTol)) << "loss before the step";
  EXPECT_EQ(gpu.correct(), cpu->correct());

  std::vector<Vec> before;
  for_each_param(model, batch,
                 [&](int node, int k, const std::string&) { before.push_back(cpu->read_param(node, k)); });
  cpu->backward();
  gpu.backward();
  cpu->update();
  gpu.update();
  EXPECT_TRUE(agree({gpu.forward()}, {cpu->forward()}, kTol)) << "loss after the step";
  std::size_t i = 0;
  for_each_param(model, batch, [&](int node, int k, const std::string& name) {
    EXPECT_TRUE(testing_support::same_update(gpu.read_param(node, k), cpu->read_param(node, k), before[i++], kTol))
        << name;
  });
}

TEST_F(CudaGpu, MlpTrainingStepMatchesCpu) { check_one_step(models::workload("mlp", "mnist").spec, 8); }

TEST_F(CudaGpu, LeNet5TrainingStepMatchesCpu) { check_one_step(models::workload("lenet5", "cifar10").spec, 8); }

// ResNet-152's blocks at a small size (the stem, a bottleneck with a strided projection shortcut
// and one with an identity shortcut, global pooling, the classifier), in the network's planned
// memory with dead blocks poisoned, fused batch norms and recomputed values, in both layouts.
ModelSpec resnet_blocks() {
  ModelSpec m;
  m.name = "resnet_blocks";
  m.classes = 10;
  auto conv_bn = [&](const std::string& name, int x, i64 in, i64 out, i64 k, i64 stride, bool relu) {
    x = m.add(name + ".conv", Conv2dSpec{in, out, k, stride, k / 2, false}, {x});
    x = m.add(name + ".bn", BatchNormSpec{.channels = out}, {x});
    return relu ? m.add(name + ".relu", ReLUSpec{}, {x}) : x;
  };
  auto bottleneck = [&](const std::string& name, int x, i64 in, i64 width, i64 stride) {
    int y = conv_bn(name + ".a", x, in, width, 1, 1, true);
    y = conv_bn(name + ".b", y, width, width, 3, stride, true);
    y = conv_bn(name + ".c", y, width, 4 * width, 1, 1, false);
    const int shortcut =
        stride != 1 || in != 4 * width ? conv_bn(name + ".proj", x, in, 4 * width, 1, stride, false) : x;
    return m.add(name + ".relu", ReLUSpec{}, {m.add(name + ".add", AddSpec{}, {y, shortcut})});
  };
  int x = m.add("input", InputSpec{{3, 16, 16}}, {});
  x = conv_bn("stem", x, 3, 16, 7, 2, true);
  x = m.add("stem.pool", MaxPool2dSpec{3, 2, 1}, {x});
  x = bottleneck("block1", x, 16, 8, 2);
  x = bottleneck("block2", x, 32, 8, 1);
  x = m.add("avgpool", GlobalAvgPoolSpec{}, {x});
  x = m.add("fc", LinearSpec{32, 10}, {x});
  m.add("loss", SoftmaxCrossEntropySpec{10}, {x});
  return m;
}

TEST_F(CudaGpu, ResnetBlocksStepInSharedPoisonedMemoryMatchesCpu) {
  for (const cuda::Layout layout : {cuda::Layout::NCHW, cuda::Layout::NHWC}) {
    SCOPED_TRACE(cuda::layout_name(layout));
    check_one_step(resnet_blocks(), 8, /*shared=*/true, layout);
  }
}

// fp16 with dynamic loss scaling: the scale starts at 65536 and may halve a few times at first
// (each halving skips one step), then the loss of a fixed batch must fall as fp32's does.
TEST_F(CudaGpu, MixedPrecisionMlpLearnsAFixedBatch) {
  if (const std::string why = why_not_runnable(Precision::FP16); !why.empty()) GTEST_SKIP() << why;
  const i64 batch = 16;
  const int steps = 50;
  const ModelSpec model = models::workload("mlp", "mnist").spec;
  const OptimizerConfig adam{.kind = OptimizerConfig::Kind::Adam, .lr = 1e-3};
  auto cpu = cpu_network(model, batch, adam);
  cuda::CudaNetwork gpu(model, gpu_config(batch, Precision::FP16, adam));
  copy_params(model, batch, *cpu, gpu);
  std::mt19937 rng(17);
  const Batch data = random_batch(model, batch, rng);
  cpu->set_batch(data.view());
  const float cpu_first = cpu->forward();

  std::vector<float> losses;
  StepTimes times;
  for (int step = 0; step < steps; ++step) {
    gpu.set_batch(data.view());
    losses.push_back(gpu.train_step(times));
    ASSERT_TRUE(std::isfinite(losses.back())) << "step " << step;
  }
  EXPECT_TRUE(agree({losses.front()}, {cpu_first}, tolerance(Precision::FP16))) << "first loss against fp32 on the CPU";
  EXPECT_LT(losses.back(), 0.5f * losses.front()) << "the loss of a fixed batch must fall";
  EXPECT_LE(gpu.skipped_steps(), 8) << "overflowing steps beyond the first few halvings of the scale";
  EXPECT_GE(gpu.loss_scale(), 1.0f);
  EXPECT_LE(gpu.loss_scale(), 65536.0f);
}

// The same five steps replayed as one captured CUDA graph give the same losses; the first step
// runs eagerly (then the step is captured), later ones replay the graph, whose phases are not
// separable: only the whole step is timed.
TEST_F(CudaGpu, CudaGraphGivesTheSameLosses) {
  const i64 batch = 16;
  const ModelSpec model = models::workload("mlp", "mnist").spec;
  NetworkOptions config = gpu_config(batch, Precision::FP32);
  cuda::CudaNetwork eager(model, config);
  config.cuda_graph = true;
  cuda::CudaNetwork graph(model, config);
  copy_params(model, batch, eager, graph);
  std::mt19937 rng(19);
  const Batch data = random_batch(model, batch, rng);

  std::vector<float> eager_losses, graph_losses;
  for (int step = 0; step < 5; ++step) {
    StepTimes eager_times, graph_times;
    eager.set_batch(data.view());
    eager_losses.push_back(eager.train_step(eager_times));
    graph.set_batch(data.view());
    graph_losses.push_back(graph.train_step(graph_times));
    EXPECT_TRUE(agree({graph_losses.back()}, {eager_losses.back()}, 1e-6)) << "step " << step;
    EXPECT_GT(eager_times.forward, 0) << "step " << step;
    EXPECT_GT(eager_times.device, 0) << "step " << step;
    if (step == 0)
      EXPECT_GT(graph_times.forward, 0) << "the first step runs eagerly, before the capture";
    else
      EXPECT_LT(graph_times.forward, 0) << "step " << step << ": a replayed graph has no separate forward time";
    EXPECT_GT(graph_times.device, 0) << "step " << step;
  }
  EXPECT_LT(graph_losses.back(), graph_losses.front()) << "the steps must train";
}

// TB_CUDA_LAYER_TIMES times an eager network's layers and writes their table when it goes; a
// network with a CUDA graph times none and steps as without it. (Its eager first step read the
// layers' events, which only an eager network records: cudaErrorInvalidResourceHandle failed the
// row.)
TEST_F(CudaGpu, LayerTimesTimeEagerStepsAndLeaveACudaGraphsAlone) {
  const i64 batch = 16;
  const ModelSpec model = models::workload("mlp", "mnist").spec;
  const std::string path = ::testing::TempDir() + "tb_layer_times.tsv";
  std::remove(path.c_str());
  std::mt19937 rng(31);
  const Batch data = random_batch(model, batch, rng);
  {
    // Read as each network is made; unset however the block ends, so that no later test's
    // networks write tables.
    ::setenv("TB_CUDA_LAYER_TIMES", path.c_str(), 1);
    struct Unset {
      ~Unset() { ::unsetenv("TB_CUDA_LAYER_TIMES"); }
    } unset;
    NetworkOptions config = gpu_config(batch, Precision::FP32);
    cuda::CudaNetwork eager(model, config);
    config.cuda_graph = true;
    cuda::CudaNetwork graph(model, config);
    for (int step = 0; step < 3; ++step) {
      StepTimes times;
      eager.set_batch(data.view());
      EXPECT_TRUE(std::isfinite(eager.train_step(times))) << "step " << step;
      graph.set_batch(data.view());
      EXPECT_TRUE(std::isfinite(graph.train_step(times))) << "step " << step << " with a CUDA graph";
    }
  }
  std::ifstream in(path);
  std::stringstream table;
  table << in.rdbuf();
  const std::string text = table.str();
  EXPECT_NE(text.find("mean of 3 eager steps"), std::string::npos) << text;
  EXPECT_EQ(text.find("# "), text.rfind("# ")) << "one table, the eager network's:\n" << text;
}

// ---- The capabilities a harness reaches the network through (engine/core/network.hpp) ----

// A fixed list of batches, in turn.
class ListedBatches final : public Dataset {
 public:
  explicit ListedBatches(std::vector<Batch> batches) : batches_(std::move(batches)) {}
  const Batch& next() override { return batches_[next_++ % batches_.size()]; }
  std::string name() const override { return "listed"; }
  std::string source() const override { return "test"; }

 private:
  std::vector<Batch> batches_;
  std::size_t next_ = 0;
};

// Batches kept on the device (ResidentData: --data_on_device) train exactly as the same batches
// uploaded from the host: batch k of the pool is the dataset's k-th, taken modulo the pool.
TEST_F(CudaGpu, ResidentBatchesTrainAsUploadedOnes) {
  const i64 batch = 16;
  const ModelSpec model = models::workload("mlp", "mnist").spec;
  cuda::CudaNetwork uploaded(model, gpu_config(batch, Precision::FP32));
  cuda::CudaNetwork resident(model, gpu_config(batch, Precision::FP32));
  copy_params(model, batch, uploaded, resident);
  std::mt19937 rng(23);
  std::vector<Batch> batches;
  for (int k = 0; k < 3; ++k) batches.push_back(random_batch(model, batch, rng));
  Network& as_network = resident;
  ResidentData* capability = as_network.resident_data();
  ASSERT_NE(capability, nullptr) << "a GPU network keeps data on its device";
  EXPECT_EQ(capability->batch_bytes(), std::size_t(batch * 784 + batch) * 4) << "fp32 input and int32 labels";
  ListedBatches data(batches);
  capability->make_resident(data, 3);
  for (int step = 0; step < 5; ++step) {  // 3 and 4 wrap around the pool
    StepTimes t1, t2;
    uploaded.set_batch(batches[std::size_t(step % 3)].view());
    const float want = uploaded.train_step(t1);
    capability->use_resident(step);
    const float got = resident.train_step(t2);
    EXPECT_TRUE(agree({got}, {want}, 1e-6)) << "step " << step << ": the same bytes, the same kernels";
  }
}

// A training step on a GPU makes the host wait exactly once (trainbench's own waits,
// cuda::host_waits: a wait that finds the device done is none), whether plain, watched by the
// timeline, or through the data-parallel path with one NCCL rank as the prediction's probe steps
// it, and the trainer gives the next batch during each (the step is asynchronous). ResNet-152 at
// 32x32 keeps the device busier than the host's launches, so that every step's one wait finds it
// still computing. Before issue 52 the data-parallel step waited five times; the loss's copy sent
// after the step's end (fixed since) made it two.
TEST_F(CudaGpu, AStepWaitsOnTheHostOnce) {
  const i64 batch = 64;
  const ModelSpec model = models::workload("resnet152", "cifar10").spec;
  std::mt19937 rng(29);
  std::vector<Batch> batches;
  for (int k = 0; k < 3; ++k) batches.push_back(random_batch(model, batch, rng));
  Trainer trainer(std::make_unique<cuda::CudaNetwork>(model, gpu_config(batch, Precision::FP32)),
                  std::make_unique<ListedBatches>(batches));
  constexpr int kSteps = 6;
  auto waits_per_step = [&](const std::function<void()>& step) {
    step();  // the first through a new path pays its set-up
    const long before = cuda::host_waits();
    for (int s = 0; s < kSteps; ++s) step();
    return double(cuda::host_waits() - before) / kSteps;
  };
  ASSERT_TRUE(trainer.network().asynchronous()) << "the trainer gives the next batch only during an asynchronous step";
  // A wait that finds the device done counts none, so a step may count less than one: at most
  // one each, and some (ResNet-152's kernels outlast their launches), so that counting works.
  const double plain_waits = waits_per_step([&] { trainer.step(); });
  EXPECT_LE(plain_waits, 1.0) << "the plain step";
  EXPECT_GT(plain_waits, 0.0) << "no wait counted: the count is broken, or the host outran nothing";
  {
    parallel::TimelineRecorder timeline(trainer.network(), parallel::kDefaultBucketBytes, nullptr, /*every_s=*/0);
    EXPECT_LE(waits_per_step([&] {
                timeline.before_step();
                trainer.step();
                timeline.after_step();
              }),
              1.0)
        << "the step watched by the timeline";
    EXPECT_EQ(timeline.timeline().steps, kSteps + 1);
  }
  std::unique_ptr<Network> plain = trainer.swap_network(nullptr);
  std::unique_ptr<parallel::Communicator> comm = parallel::one_replica_comm(*plain);
  ASSERT_EQ(comm->kind(), "nccl");
  trainer.swap_network(std::make_unique<parallel::ReplicaNetwork>(std::move(plain), std::move(comm)));
  const auto& replica = static_cast<const parallel::ReplicaNetwork&>(trainer.network());
  ASSERT_TRUE(replica.asynchronous());
  EXPECT_LE(waits_per_step([&] { trainer.step(); }), 1.0) << "the data-parallel step";
  EXPECT_EQ(replica.stats().steps, kSteps + 1);
  EXPECT_GT(replica.stats().buckets_early, 0) << "buckets start during backward";
}

// This backend places a fused batch norm + add + ReLU group's parameters where the group runs,
// after the projection shortcut's, out of node order: the data-parallel buckets still hold each
// gradient once (Buckets.GradientsPlacedOutOfNodeOrderAreEachInOneBucket, test_parallel.cpp),
// in the compute type's buffer and, under mixed precision, in batch norm's fp32 one.
TEST_F(CudaGpu, BucketsHoldEachGradientOnce) {
  const ModelSpec model = models::workload("resnet152", "cifar10").spec;
  for (Precision precision : {Precision::FP32, Precision::BF16}) {
    if (const std::string why = why_not_runnable(precision); !why.empty()) {
      ADD_FAILURE() << cuda::precision_name(precision) << " was not checked: " << why;
      continue;
    }
    cuda::CudaNetwork net(model, gpu_config(2, precision));
    const auto segments = net.gradient_segments();
    for (std::size_t bytes : {std::size_t(1), parallel::kDefaultBucketBytes})
      testing_support::expect_buckets_cover_each_gradient_once(
          segments, parallel::plan_buckets(segments, bytes),
          fmt::format("{}, buckets of {} bytes", cuda::precision_name(precision), bytes));
  }
}

// Two replicas sharing the GPU, as gpu:2 --gpus=0,0 runs them (ReplicaRun, the shared-device
// wiring): the one whose loss is not finite (the trainer's check, after its step) tells the
// other, which stops at its next all-reduce instead of waiting out the group's 120 s, and the run
// reports the replica's own failure, not the other's wait (DataParallel's test of the same on
// the CPU, test_parallel.cpp).
TEST_F(CudaGpu, ASharedDeviceReplicaWhoseLossIsNotFiniteStopsTheOther) {
  const i64 batch = 8;
  const ModelSpec model = models::workload("lstm", "sine").spec;
  auto make = [&](int k) {
    // Replica 1's targets are NaN from its third batch: its loss is NaN whatever the activations
    // do with a NaN.
    std::unique_ptr<Network> net = std::make_unique<cuda::CudaNetwork>(model, gpu_config(batch, Precision::FP32));
    std::unique_ptr<Dataset> data =
        std::make_unique<testing_support::RandomBatches>(model, batch, 41 + unsigned(k), k == 1 ? 3 : 0);
    return std::make_pair(std::move(net), std::move(data));
  };
  parallel::ReplicaRun run(
      parallel::shared_device_wiring, /*across_ranks=*/false, 2, [](int) { TB_CU(cudaSetDevice(0)); }, make);
  run.connect();
  testing_support::expect_stops_with(run, 10, "loss is NaN at training step 3", std::chrono::seconds(60));
}

// The memory report has every mem_* column, and its parts add up within what the allocator saw;
// the communicator endpoint names the network's device.
TEST_F(CudaGpu, MemoryReportAndCommEndpoint) {
  const ModelSpec model = models::workload("mlp", "mnist").spec;
  cuda::CudaNetwork net(model, gpu_config(32, Precision::FP16));
  const Network& as_network = net;
  const MemoryReport* report = as_network.memory_report();
  ASSERT_NE(report, nullptr);
  const std::map<std::string, double> c = report->memory_counters();
  for (const char* name : {"mem_peak_bytes", "mem_reserved_bytes", "mem_limit_bytes", "mem_weights_bytes",
                           "mem_grads_bytes", "mem_optimizer_bytes", "mem_activations_bytes", "mem_workspace_bytes",
                           "mem_data_bytes", "mem_context_bytes", "loss_scale", "skipped_steps"})
    EXPECT_EQ(c.count(name), 1u) << name;
  EXPECT_GT(c.at("mem_weights_bytes"), 0);
  EXPECT_GE(c.at("mem_peak_bytes"), c.at("mem_weights_bytes") + c.at("mem_grads_bytes"));
  EXPECT_GE(c.at("mem_reserved_bytes"), c.at("mem_peak_bytes"));
  EXPECT_GT(c.at("loss_scale"), 1) << "fp16 starts with a loss scale";
  const std::optional<CommEndpoint> e = as_network.comm_endpoint();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->device, 0);
  EXPECT_NE(e->stream, nullptr) << "the network's own stream, not the legacy one";
}

// ---- The memory cap on a real device ----

// Sets a cap on an allocator and lifts it again however the test ends.
class CapGuard {
 public:
  CapGuard(cuda::Allocator& allocator, std::size_t bytes) : allocator_(allocator) { allocator_.set_limit(bytes); }
  ~CapGuard() { allocator_.set_limit(0); }
  CapGuard(const CapGuard&) = delete;
  CapGuard& operator=(const CapGuard&) = delete;

 private:
  cuda::Allocator& allocator_;
};

TEST_F(CudaGpu, MemoryCapRefusesAModelThatDoesNotFit) {
  cuda::Allocator& allocator = cuda::device_allocator(0);
  const std::size_t in_use = allocator.stats().in_use;
  {
    const CapGuard cap(allocator, 64 * kMiB);
    EXPECT_TRUE(throws_mentioning<OutOfMemory>(
        [] { cuda::CudaNetwork net(models::workload("resnet152", "imagenet").spec, gpu_config(64, Precision::FP32)); },
        "--gpu_memory_limit"));
    EXPECT_LE(allocator.stats().reserved, 64 * kMiB);
    EXPECT_EQ(allocator.stats().in_use, in_use) << "the failed network returned everything it had taken";
  }
  EXPECT_EQ(allocator.limit(), 0u);

  // Without the cap a small network builds, and its memory is where it says.
  const ModelSpec model = models::workload("mlp", "mnist").spec;
  cuda::CudaNetwork net(model, gpu_config(16, Precision::FP32));
  const cuda::MemoryBreakdown m = net.memory();
  const std::size_t params = std::size_t(model_cost(model).parameters);
  // fp32: the master weights only, 4 bytes each, each tensor aligned to 64 elements in the flat buffer.
  EXPECT_EQ(m.weights, std::size_t(net.param_bytes()));
  EXPECT_GE(m.weights, 4 * params);
  EXPECT_LT(m.weights, 4 * (params + 64 * model.nodes.size() * 2));
  EXPECT_EQ(m.gradients, m.weights);
  EXPECT_GE(m.optimizer_state, m.weights) << "SGD's velocity";
  EXPECT_GT(m.activations, 0u);
  EXPECT_GT(m.workspace, 0u);
  EXPECT_GT(m.data, 0u);
  EXPECT_GE(by_kind(allocator.stats().in_use_by_kind, MemoryKind::Weights), m.weights)
      << "the allocator sees at least the network's weights";
}

// ---- NCCL: the data-parallel path on GPUs ----

// One rank per visible GPU (at least one): the mean over ranks of rank-dependent values, a
// broadcast and a max, on device buffers ordered on each GPU's stream.
TEST_F(CudaGpu, NcclCollectivesOverEveryVisibleGpu) {
  const int gpus = int(cuda::gpu_inventory().devices.size());
  // On one GPU a mean over one rank is the data itself: nothing to check here (NCCL's calls on one GPU
  // are checked by NcclOneRank.TrainsLikeAPlainNetwork).
  if (gpus < 2) GTEST_SKIP() << "needs two GPUs: a mean over one rank is trivially right";
  std::vector<int> devices;
  std::vector<cudaStream_t> streams(static_cast<std::size_t>(gpus));
  for (int d = 0; d < gpus; ++d) {
    devices.push_back(d);
    ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[std::size_t(d)], cudaStreamNonBlocking), cudaSuccess);
  }
  auto comms = parallel::make_nccl_group(devices, streams);
  constexpr i64 kCount = 1000;
  std::vector<float> results(static_cast<std::size_t>(gpus * kCount));
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r)
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      cuda::DeviceBuffer buf(cuda::device_allocator(r), kCount * sizeof(float), cuda::MemoryKind::Other);
      std::vector<float> host(kCount);
      for (i64 k = 0; k < kCount; ++k) host[std::size_t(k)] = float(r * 10 + k);
      ASSERT_EQ(cudaMemcpy(buf.get(), host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      comms[std::size_t(r)]->start_all_reduce_mean(buf.get(), kCount, ElemType::F32);
      comms[std::size_t(r)]->wait();
      EXPECT_DOUBLE_EQ(comms[std::size_t(r)]->max(double(r)), double(gpus - 1));
      ASSERT_EQ(cudaStreamSynchronize(streams[std::size_t(r)]), cudaSuccess);
      ASSERT_EQ(
          cudaMemcpy(&results[std::size_t(r * kCount)], buf.get(), kCount * sizeof(float), cudaMemcpyDeviceToHost),
          cudaSuccess);
    });
  for (auto& t : threads) t.join();
  const float mean_rank = float(gpus - 1) / 2;
  for (int r = 0; r < gpus; ++r)
    for (i64 k = 0; k < kCount; k += 97)
      EXPECT_FLOAT_EQ(results[std::size_t(r * kCount + k)], mean_rank * 10 + float(k));
  comms.clear();
  for (cudaStream_t s : streams) cudaStreamDestroy(s);
}

// Two GPU replicas on half batches against the CPU on the whole batch (needs two GPUs: NCCL
// refuses two ranks on one device). fp32; 1e-3 relative after 3 steps covers the GPU's other
// summation orders, while an unaveraged or missing bucket is off by O(1).
TEST_F(CudaGpu, TwoGpuReplicasOnHalfBatchesMatchTheCpuOnTheWholeBatch) {
  if (cuda::gpu_inventory().devices.size() < 2) GTEST_SKIP() << "needs two GPUs (NCCL puts one rank on each)";
  const ModelSpec model = models::workload("mlp", "mnist").spec;
  const i64 batch = 16, half = batch / 2;
  OptimizerConfig sgd;
  sgd.lr = 0.05;
  auto cpu = cpu_network(model, batch, sgd);
  std::vector<std::unique_ptr<Network>> nets;
  std::vector<Network*> raw;
  std::vector<int> devices{0, 1};
  std::vector<cudaStream_t> streams;
  for (int d : devices) {
    NetworkOptions config = gpu_config(half, Precision::FP32, sgd);
    config.device = d;
    auto net = std::make_unique<cuda::CudaNetwork>(model, config);
    copy_params(model, batch, *cpu, *net);
    streams.push_back(net->context().stream);
    nets.push_back(std::move(net));
  }
  auto comms = parallel::make_nccl_group(devices, streams);
  std::vector<std::unique_ptr<parallel::ReplicaNetwork>> replicas(2);
  auto on_both = [&](const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        fn(r);
      });
    for (auto& t : threads) t.join();
  };
  on_both([&](int r) {
    replicas[std::size_t(r)] =
        std::make_unique<parallel::ReplicaNetwork>(std::move(nets[std::size_t(r)]), std::move(comms[std::size_t(r)]));
  });
  std::mt19937 rng(23);
  for (int step = 0; step < 3; ++step) {
    const Batch data = random_batch(model, batch, rng);
    StepTimes t;
    cpu->set_batch(data.view());
    cpu->train_step(t);
    const i64 sample = i64(data.input.size()) / batch;
    on_both([&](int r) {
      replicas[std::size_t(r)]->set_batch(
          BatchView{data.input.data() + r * half * sample, data.labels.data() + r * half, nullptr});
      StepTimes rt;
      replicas[std::size_t(r)]->train_step(rt);
    });
  }
  on_both([&](int r) { replicas[std::size_t(r)]->check_weights_agree(); });
  for_each_param(model, batch, [&](int node, int k, const std::string& name) {
    EXPECT_TRUE(agree(replicas[1]->read_param(node, k), cpu->read_param(node, k), 1e-3)) << name;
  });
}

// ---- gpu:N on one GPU ----

// Runs fn(r) on n threads, each with device 0 current, and rethrows the first failure.
void on_device_threads(int n, const std::function<void(int)>& fn) {
  testing_support::on_threads(n, [&](int r) {
    TB_CU(cudaSetDevice(0));
    fn(r);
  });
}

class SharedDevice : public testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (const std::string why = why_not_runnable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

// gpu:N's replicas sharing one GPU (--gpus=0,0), each on its shard, against one network of the
// N*b samples on the same GPU in the same precision: DataParallel.EqualsLargeBatch on the device.
TEST_P(SharedDevice, EqualsLargeBatch) {
  const Precision precision = GetParam();
  for (const auto& [name, dataset, replicas, shard] :
       {std::tuple{"mlp", "mnist", 2, i64(8)}, std::tuple{"lenet5", "cifar10", 3, i64(4)},
        std::tuple{"lstm", "sine", 2, i64(5)}}) {
    SCOPED_TRACE(name);
    const ModelSpec model = models::workload(name, dataset).spec;
    const OptimizerConfig sgd{.kind = OptimizerConfig::Kind::SGD, .lr = 0.05, .momentum = 0.9};
    testing_support::LargeBatch data(model, shard, replicas);
    TB_CU(cudaSetDevice(0));
    cuda::CudaNetwork whole(model, gpu_config(data.batch(), precision, sgd));
    std::vector<std::unique_ptr<Network>> nets;
    std::vector<cudaStream_t> streams;
    for (int r = 0; r < replicas; ++r) {
      auto net = std::make_unique<cuda::CudaNetwork>(model, gpu_config(shard, precision, sgd));
      streams.push_back(net->context().stream);
      nets.push_back(std::move(net));
    }
    auto comms = parallel::make_shared_device_group(0, streams);
    std::vector<std::unique_ptr<parallel::ReplicaNetwork>> rep(static_cast<std::size_t>(replicas));
    on_device_threads(replicas, [&](int r) {
      rep[std::size_t(r)] =
          std::make_unique<parallel::ReplicaNetwork>(std::move(nets[std::size_t(r)]), std::move(comms[std::size_t(r)]));
    });
    copy_params(model, data.batch(), *rep[0], whole);  // replica 0's weights, broadcast to all
    std::vector<Vec> before;
    for_each_param(model, data.batch(),
                   [&](int node, int k, const std::string&) { before.push_back(whole.read_param(node, k)); });
    std::mt19937 rng(29);
    for (int step = 0; step < 4; ++step) {
      data.draw(rng);
      StepTimes t;
      whole.set_batch(data.whole());
      whole.train_step(t);
      on_device_threads(replicas, [&](int r) {
        rep[std::size_t(r)]->set_batch(data.shard(r));
        StepTimes rt;
        rep[std::size_t(r)]->train_step(rt);
      });
    }
    on_device_threads(replicas, [&](int r) { rep[std::size_t(r)]->check_weights_agree(); });
    std::size_t i = 0;
    for_each_param(model, data.batch(), [&](int node, int k, const std::string& param) {
      EXPECT_TRUE(testing_support::same_update(rep[std::size_t(replicas - 1)]->read_param(node, k),
                                               whole.read_param(node, k), before[i++],
                                               testing_support::large_batch_tolerance(precision)))
          << param;
    });
    EXPECT_EQ(rep[0]->stats().steps, 4);
  }
}

INSTANTIATE_TEST_SUITE_P(AllPrecisions, SharedDevice,
                         testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const testing::TestParamInfo<Precision>& info) {
                           return std::string(cuda::precision_name(info.param));
                         });

class NcclOneRank : public testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (const std::string why = why_not_runnable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

// The data-parallel path over NCCL with one rank: every NCCL call of the real path (the
// broadcast, each bucket's all-reduce on the communication stream, the waits, the weight check)
// is issued on a one-GPU machine, where a mean over one rank is the data itself, so the replica must take
// exactly the steps of the same network without a communicator.
TEST_P(NcclOneRank, TrainsLikeAPlainNetwork) {
  const Precision precision = GetParam();
  for (const auto& [name, dataset, batch] :
       {std::tuple{"mlp", "mnist", i64(8)}, std::tuple{"lenet5", "cifar10", i64(4)}, std::tuple{"lstm", "sine", i64(4)},
        std::tuple{"resnet152", "cifar10", i64(2)}}) {
    SCOPED_TRACE(name);
    const ModelSpec model = models::workload(name, dataset).spec;
    const OptimizerConfig sgd{.kind = OptimizerConfig::Kind::SGD, .lr = 0.05, .momentum = 0.9};
    TB_CU(cudaSetDevice(0));
    NetworkOptions config = gpu_config(batch, precision, sgd);
    config.keep_values = false;
    cuda::CudaNetwork plain(model, config);
    auto net = std::make_unique<cuda::CudaNetwork>(model, config);
    cudaStream_t stream = net->context().stream;
    parallel::ReplicaNetwork replica(std::move(net), std::move(parallel::make_nccl_group({0}, {stream}).at(0)),
                                     std::size_t(1) << 20);
    copy_params(model, batch, replica, plain);
    std::vector<Vec> before;
    for_each_param(model, batch,
                   [&](int node, int k, const std::string&) { before.push_back(plain.read_param(node, k)); });
    testing_support::LargeBatch data(model, batch, 1);
    std::mt19937 rng(31);
    data.draw(rng);
    StepTimes t;
    plain.set_batch(data.whole());
    replica.set_batch(data.whole());
    const float plain_loss = plain.train_step(t), replica_loss = replica.train_step(t);
    EXPECT_TRUE(std::isfinite(replica_loss));
    EXPECT_EQ(replica_loss, plain_loss) << "the same forward pass before any all-reduce";
    replica.check_weights_agree();
    // A one-rank mean leaves the gradients as they are: the replica takes the plain network's
    // step, up to the rounding of convolution algorithms each network picked by timing them.
    // ResNet-152's first layers barely move in one step at batch 2: its weights are compared
    // as they are (1e-5 relative), the others' steps against the step's size.
    std::size_t i = 0;
    for_each_param(model, batch, [&](int node, int k, const std::string& param) {
      const Vec mine = replica.read_param(node, k), theirs = plain.read_param(node, k);
      if (std::string(name) == "resnet152")
        EXPECT_LT(testing_support::relative_difference(mine, theirs), 1e-5) << param;
      else
        EXPECT_TRUE(
            testing_support::same_update(mine, theirs, before[i], testing_support::large_batch_tolerance(precision)))
            << param;
      ++i;
    });
    EXPECT_EQ(replica.stats().buckets, i64(replica.buckets().size()));
  }
}

INSTANTIATE_TEST_SUITE_P(AllPrecisions, NcclOneRank,
                         testing::Values(Precision::FP32, Precision::TF32, Precision::FP16, Precision::BF16),
                         [](const testing::TestParamInfo<Precision>& info) {
                           return std::string(cuda::precision_name(info.param));
                         });

}  // namespace
}  // namespace tb
