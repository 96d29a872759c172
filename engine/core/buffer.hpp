// A zero-initialised, 64-byte aligned host buffer of floats: the flat parameter, gradient and
// optimizer-state buffers, and the shared scratchpad. Movable, not copyable.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace tb {

class HostBuffer {
 public:
  HostBuffer() = default;
  explicit HostBuffer(std::int64_t floats) : size_(floats) {
    if (floats == 0) return;
    const std::size_t bytes = (std::size_t(floats) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, bytes);
    data_.reset(static_cast<float*>(p));
  }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  std::int64_t size() const { return size_; }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> data_;
  std::int64_t size_ = 0;
};

}  // namespace tb
