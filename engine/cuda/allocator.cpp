// The caching device allocator: size classes, a free list per size, the cap, and the accounting
// that the memory columns of every GPU row come from.
#include "engine/cuda/allocator.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/core/error.hpp"

namespace tb::cuda {

namespace {

std::string mib(std::size_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

class CudaMemory final : public MemorySource {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  void* obtain(std::size_t bytes) override {
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess || current != device_) {
      const cudaError_t set = cudaSetDevice(device_);
      if (set != cudaSuccess)
        throw BackendError(fmt::format("cudaSetDevice({}) failed: {}", device_, cudaGetErrorString(set)));
    }
    void* p = nullptr;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear the sticky-free error so that later calls do not see it
      return nullptr;
    }
    if (status != cudaSuccess)
      throw BackendError(
          fmt::format("cudaMalloc of {} on device {} failed: {}", mib(bytes), device_, cudaGetErrorString(status)));
    return p;
  }
  void give_back(void* ptr) override { cudaFree(ptr); }

 private:
  int device_;
};

}  // namespace

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Weights:
      return "weights";
    case MemoryKind::Gradients:
      return "gradients";
    case MemoryKind::OptimizerState:
      return "optimizer_state";
    case MemoryKind::Activations:
      return "activations";
    case MemoryKind::Workspace:
      return "workspace";
    case MemoryKind::Data:
      return "data";
    case MemoryKind::Other:
      return "other";
  }
  return "?";
}

std::unique_ptr<MemorySource> cuda_memory(int device) { return std::make_unique<CudaMemory>(device); }

Allocator::Allocator(int device, std::unique_ptr<MemorySource> source) : device_(device), source_(std::move(source)) {}

Allocator::~Allocator() {
  // Blocks still handed out belong to objects destroyed after this one (process exit): leave
  // them to the driver's teardown.
  drop_cache();
}

std::size_t Allocator::round(std::size_t bytes) {
  constexpr std::size_t kSmall = 512, kLarge = std::size_t(2) << 20, kSmallLimit = std::size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes <= kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

void Allocator::set_limit(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  limit_ = bytes;
  if (limit_ && stats_.reserved > limit_) drop_cache();
}

void Allocator::drop_cache() {
  for (auto& [size, ptr] : free_) {
    source_->give_back(ptr);
    stats_.reserved -= size;
  }
  free_.clear();
}

void Allocator::empty_cache() {
  std::lock_guard lock(mutex_);
  drop_cache();
}

void* Allocator::obtain(std::size_t rounded, MemoryKind kind) {
  if (limit_ && stats_.reserved + rounded > limit_) drop_cache();
  if (limit_ && stats_.reserved + rounded > limit_)
    throw OutOfMemory(
        fmt::format("GPU {}: {} more for {} would exceed the cap of {} (--gpu_memory_limit; {} in "
                    "use by this run): raise the cap or lower --batch",
                    device_, mib(rounded), memory_kind_name(kind), mib(limit_), mib(stats_.in_use)));
  void* p = source_->obtain(rounded);
  if (!p) {
    drop_cache();
    p = source_->obtain(rounded);
  }
  if (!p)
    throw OutOfMemory(
        fmt::format("GPU {}: the device has no {} left for {} ({} in use by this run): lower --batch "
                    "or free the device",
                    device_, mib(rounded), memory_kind_name(kind), mib(stats_.in_use)));
  stats_.reserved += rounded;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  return p;
}

void* Allocator::allocate(std::size_t bytes, MemoryKind kind) {
  const std::size_t rounded = round(bytes);
  std::lock_guard lock(mutex_);
  void* p = nullptr;
  if (auto it = free_.find(rounded); it != free_.end()) {
    p = it->second;
    free_.erase(it);
  } else {
    p = obtain(rounded, kind);
  }
  used_.emplace(p, Block{rounded, kind});
  stats_.in_use += rounded;
  stats_.in_use_by_kind[std::size_t(kind)] += rounded;
  if (stats_.in_use > stats_.peak_in_use) {
    stats_.peak_in_use = stats_.in_use;
    stats_.peak_by_kind = stats_.in_use_by_kind;
  }
  return p;
}

void Allocator::release(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = used_.find(ptr);
  TB_CHECK(it != used_.end(), "GPU {}: release of a pointer this allocator did not hand out", device_);
  stats_.in_use -= it->second.size;
  stats_.in_use_by_kind[std::size_t(it->second.kind)] -= it->second.size;
  free_.emplace(it->second.size, ptr);
  used_.erase(it);
}

MemoryStats Allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Allocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_by_kind = stats_.in_use_by_kind;
  stats_.peak_reserved = stats_.reserved;
}

Allocator& device_allocator(int device) {
  static std::mutex mutex;
  // Never destroyed: networks held in static storage (the benchmark session) release their
  // blocks during exit, after function-local statics like this one would have been destroyed.
  static auto* allocators = new std::vector<std::unique_ptr<Allocator>>();
  std::lock_guard lock(mutex);
  TB_CHECK(device >= 0 && device < 1024, "device ordinal {} out of range", device);
  if (allocators->size() <= std::size_t(device)) allocators->resize(std::size_t(device) + 1);
  auto& slot = (*allocators)[std::size_t(device)];
  if (!slot) slot = std::make_unique<Allocator>(device, cuda_memory(device));
  return *slot;
}

DeviceBuffer::DeviceBuffer(Allocator& allocator, std::size_t bytes, MemoryKind kind)
    : allocator_(&allocator), ptr_(bytes ? allocator.allocate(bytes, kind) : nullptr), bytes_(bytes) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (ptr_ && allocator_) allocator_->release(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace tb::cuda
