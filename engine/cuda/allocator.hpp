// One caching allocator per device through which all of trainbench's device memory goes. It
// rounds requests into size classes, keeps freed blocks for reuse, enforces an optional cap
// (--gpu_memory_limit), and knows its high-water mark with a breakdown by what the memory holds.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tb::cuda {

enum class MemoryKind { Weights, Gradients, OptimizerState, Activations, Workspace, Data, Other };
inline constexpr int kMemoryKinds = 7;
const char* memory_kind_name(MemoryKind kind);  // "weights", "gradients", ...

struct MemoryStats {
  std::size_t in_use = 0;    // bytes handed out (rounded sizes)
  std::size_t reserved = 0;  // bytes obtained from cudaMalloc (in use + cached)
  std::size_t peak_in_use = 0;
  std::size_t peak_reserved = 0;
  std::array<std::size_t, kMemoryKinds> in_use_by_kind{};  // now
  std::array<std::size_t, kMemoryKinds> peak_by_kind{};    // at the moment of peak_in_use
};

// Where blocks come from: cudaMalloc/cudaFree on a device, or a fake in tests.
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // Null when the device has no memory left.
  virtual void* obtain(std::size_t bytes) = 0;
  virtual void give_back(void* ptr) = 0;
};
std::unique_ptr<MemorySource> cuda_memory(int device);

class Allocator {
 public:
  Allocator(int device, std::unique_ptr<MemorySource> source);
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // 0: no cap. Freed blocks above a new cap are returned to the driver.
  void set_limit(std::size_t bytes);
  std::size_t limit() const { return limit_; }
  // Throws tb::OutOfMemory naming the request, the kind, what is in use and the cap (and the
  // flag that sets it) when the cap or the device is exhausted; never returns null for bytes > 0.
  void* allocate(std::size_t bytes, MemoryKind kind);
  void release(void* ptr);
  // Returns every cached (free) block to the driver.
  void empty_cache();
  MemoryStats stats() const;
  void reset_peak();
  int device() const { return device_; }

  // Size class of a request: multiples of 512 bytes up to 1 MiB, of 2 MiB above.
  static std::size_t round(std::size_t bytes);

 private:
  void* obtain(std::size_t rounded, MemoryKind kind);  // the cap checked; may empty the cache
  void drop_cache();                                   // with the mutex held
  int device_;
  std::unique_ptr<MemorySource> source_;
  std::size_t limit_ = 0;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // cached blocks by size
  struct Block {
    std::size_t size;
    MemoryKind kind;
  };
  std::unordered_map<void*, Block> used_;
  MemoryStats stats_;
};

// The allocator of a device, created on first use and kept for the process.
Allocator& device_allocator(int device);

// Device memory from an allocator, returned to it when destroyed. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Allocator& allocator, std::size_t bytes, MemoryKind kind);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }
  explicit operator bool() const { return ptr_ != nullptr; }
  void reset();

 private:
  Allocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace tb::cuda
