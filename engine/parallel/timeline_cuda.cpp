// The device clock of a timeline (timeline.hpp): CUDA events recorded on the compute stream.
#include <cuda_runtime.h>

#include "engine/core/error.hpp"
#include "engine/cuda/context.hpp"
#include "engine/parallel/timeline.hpp"

namespace tb::parallel {
namespace {

class DeviceClock final : public MarkClock {
 public:
  DeviceClock(int device, cudaStream_t stream, std::size_t slots) : device_(device), stream_(stream) { grow(slots); }
  ~DeviceClock() override {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;

  // One record on the stream: the events exist and a record needs no current device.
  void mark(std::size_t slot) override {
    if (slot >= events_.size()) grow(slot + 1);
    TB_CU(cudaEventRecord(events_[slot], stream_));
  }
  // After the step's own wait every mark is done; a query says so without waiting (a
  // synchronisation remains only for a caller that reads early).
  std::vector<double> read(std::size_t count) override {
    cuda::wait_for(events_.at(count - 1));
    std::vector<double> out;
    for (std::size_t k = 1; k < count; ++k) {
      float ms = 0;
      TB_CU(cudaEventElapsedTime(&ms, events_[0], events_[k]));
      out.push_back(double(ms) * 1e-3);
    }
    return out;
  }

 private:
  void grow(std::size_t slots) {
    int previous = 0;
    TB_CU(cudaGetDevice(&previous));
    if (previous != device_) TB_CU(cudaSetDevice(device_));
    while (events_.size() < slots) {
      cudaEvent_t e = nullptr;
      TB_CU(cudaEventCreate(&e));
      events_.push_back(e);
    }
    if (previous != device_) TB_CU(cudaSetDevice(previous));
  }

  int device_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<MarkClock> make_device_clock(int device, void* stream, std::size_t slots) {
  return std::make_unique<DeviceClock>(device, static_cast<cudaStream_t>(stream), slots);
}

}  // namespace tb::parallel
