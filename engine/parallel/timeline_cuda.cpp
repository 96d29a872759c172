// The device clock of a timeline (timeline.hpp): CUDA events recorded on the compute stream.
#include <cuda_runtime.h>

#include "engine/core/error.hpp"
#include "engine/cuda/context.hpp"
#include "engine/parallel/timeline.hpp"

namespace tb::parallel {
namespace {

class DeviceClock final : public MarkClock {
 public:
  DeviceClock(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  ~DeviceClock() override {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;

  void mark(std::size_t slot) override {
    TB_CU(cudaSetDevice(device_));
    while (events_.size() <= slot) {
      cudaEvent_t e = nullptr;
      TB_CU(cudaEventCreate(&e));
      events_.push_back(e);
    }
    TB_CU(cudaEventRecord(events_[slot], stream_));
  }
  std::vector<double> read(std::size_t count) override {
    TB_CU(cudaEventSynchronize(events_.at(count - 1)));
    std::vector<double> out;
    for (std::size_t k = 1; k < count; ++k) {
      float ms = 0;
      TB_CU(cudaEventElapsedTime(&ms, events_[0], events_[k]));
      out.push_back(double(ms) * 1e-3);
    }
    return out;
  }

 private:
  int device_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<MarkClock> make_device_clock(int device, void* stream) {
  return std::make_unique<DeviceClock>(device, static_cast<cudaStream_t>(stream));
}

}  // namespace tb::parallel
