// The CUDA backend's context: the one status-check pattern for CUDA, cuDNN and cuBLAS, the
// precisions and what each means for the libraries, and the per-network stream, handles and
// shared workspace. Tensors are row-major in the precision's storage type: images NCHW, or NHWC
// where the network's layout is channels-last; sequences (T, N, F); everything else (N, F).
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "engine/core/error.hpp"
#include "engine/core/spec.hpp"
#include "engine/cuda/allocator.hpp"
#include "engine/cuda/plan.hpp"

namespace tb {

// TB_CU's checks (engine/core/error.hpp): the library's own name and text for the status.
void check_status(cudaError_t status, const char* expr, const char* file, int line);
void check_status(cudnnStatus_t status, const char* expr, const char* file, int line);
void check_status(cublasStatus_t status, const char* expr, const char* file, int line);

}  // namespace tb

namespace tb::cuda {

cudnnDataType_t cudnn_type(DType t);
cudaDataType_t blas_type(DType t);

// One per network: a non-blocking stream and library handles bound to it, the precision's
// library settings, and one workspace shared by every cuDNN call, sized at planning for the
// largest request (never above workspace_cap) and allocated once by the network.
class Context {
 public:
  Context(int device, Precision precision, std::size_t workspace_cap);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device;
  Precision precision;
  DType dtype;
  cudnnDataType_t cudnn_dtype;   // activations and compute weights
  cudnnDataType_t compute_type;  // accumulation in convolutions (always float)
  cudnnMathType_t math;          // FMA (fp32), DEFAULT (tf32), TENSOR_OP (16-bit)
  cudaDataType_t blas_dtype;
  cublasComputeType_t blas_compute;
  Layout layout = Layout::NCHW;  // set by the network before its layers are made
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  Allocator& allocator;

  std::size_t workspace_cap;
  std::size_t workspace_bytes = 0;  // the largest request seen while planning
  void* workspace = nullptr;        // owned by the network; set before layers run

  void need_workspace(std::size_t bytes);
  std::size_t elem_bytes() const { return dtype_bytes(dtype); }
};

// Owner of one cuDNN descriptor. Not copyable; movable, so that layers can keep them in
// containers. A failed destroy is ignored: destructors do not throw, and nothing is left to do.
template <class Handle, cudnnStatus_t (*create)(Handle*), cudnnStatus_t (*destroy)(Handle)>
class Descriptor {
 public:
  Descriptor() { TB_CU(create(&handle_)); }
  ~Descriptor() {
    if (handle_) (void)destroy(handle_);
  }
  Descriptor(Descriptor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  operator Handle() const { return handle_; }

 private:
  Handle handle_ = nullptr;
};

using ActivationDesc =
    Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor, cudnnDestroyActivationDescriptor>;
using PoolingDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;
using ConvolutionDesc =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using RnnDesc = Descriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using RnnDataDesc = Descriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor, cudnnDestroyRNNDataDescriptor>;
using DropoutDesc = Descriptor<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor, cudnnDestroyDropoutDescriptor>;

// A tensor descriptor of n, c, h, w, stored NCHW or NHWC.
class TensorDesc
    : public Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> {
 public:
  void set4d(cudnnDataType_t type, i64 n, i64 c, i64 h, i64 w, Layout layout = Layout::NCHW);
};

class FilterDesc
    : public Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> {
 public:
  void set4d(cudnnDataType_t type, i64 k, i64 c, i64 h, i64 w);
};

// Scaling factors cuDNN wants: float for every data type this backend uses.
inline const float kOne = 1.0f, kZero = 0.0f;

// A CUDA event (timing, ordering between streams), owned.
class Event {
 public:
  Event() { TB_CU(cudaEventCreate(&event_)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s) { TB_CU(cudaEventRecord(event_, s)); }
  cudaEvent_t get() const { return event_; }
  // Seconds from `earlier` to this event; both must have completed.
  double since(const Event& earlier) const {
    float ms = 0;
    TB_CU(cudaEventElapsedTime(&ms, earlier.event_, event_));
    return double(ms) * 1e-3;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

// trainbench's own host waits for the device, counted over the process: a wait that finds its
// stream or event already done is none. test_cuda counts a training step's (at most one).
long host_waits();
// Returns once everything enqueued on `stream` has run (once `event` has completed).
void wait_for(cudaStream_t stream);
void wait_for(cudaEvent_t event);
// A poll loop of its own (a communicator's deadline) found its event pending: one wait.
void count_host_wait();
// After a query that said cudaErrorNotReady (no error: the work is still running): clears that
// from the thread's last error, so that a later launch check does not take it for one, and leaves
// any other error there for that check.
void forget_not_ready();

// A non-blocking stream, owned (a network's uploads run on one).
class Stream {
 public:
  Stream() { TB_CU(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace tb::cuda
