// Status checks, precisions and the per-network context of the CUDA backend.
#include "engine/cuda/context.hpp"

#include <algorithm>
#include <atomic>

namespace tb {

void check_status(cudaError_t status, const char* expr, const char* file, int line) {
  if (status == cudaSuccess) return;
  fail_call(status == cudaErrorMemoryAllocation ? CallFailure::OutOfMemory : CallFailure::Backend, "CUDA",
            fmt::format("{} ({})", cudaGetErrorName(status), cudaGetErrorString(status)), expr, file, line);
}

void check_status(cudnnStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof detail);
  fail_call(status == CUDNN_STATUS_ALLOC_FAILED ? CallFailure::OutOfMemory : CallFailure::Backend, "cuDNN",
            fmt::format("{}{}{}", cudnnGetErrorString(status), detail[0] ? ": " : "", detail), expr, file, line);
}

void check_status(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail_call(status == CUBLAS_STATUS_ALLOC_FAILED ? CallFailure::OutOfMemory : CallFailure::Backend, "cuBLAS",
            fmt::format("{} ({})", cublasGetStatusName(status), cublasGetStatusString(status)), expr, file, line);
}

}  // namespace tb

namespace tb::cuda {

cudnnDataType_t cudnn_type(DType t) {
  return t == DType::F16 ? CUDNN_DATA_HALF : t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

cudaDataType_t blas_type(DType t) { return t == DType::F16 ? CUDA_R_16F : t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F; }

Context::Context(int device_index, Precision p, std::size_t cap)
    : device(device_index),
      precision(p),
      dtype(storage_type(p)),
      cudnn_dtype(cudnn_type(dtype)),
      compute_type(CUDNN_DATA_FLOAT),
      // fp32 stays strict: FMA math keeps cuDNN off TF32 tensor cores, which DEFAULT_MATH
      // allows for float data (tf32). 16-bit data: tensor cores, without down-conversion.
      math(p == Precision::FP32   ? CUDNN_FMA_MATH
           : p == Precision::TF32 ? CUDNN_DEFAULT_MATH
                                  : CUDNN_TENSOR_OP_MATH),
      blas_dtype(blas_type(dtype)),
      blas_compute(p == Precision::FP32   ? CUBLAS_COMPUTE_32F_PEDANTIC
                   : p == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                          : CUBLAS_COMPUTE_32F),
      allocator(device_allocator(device_index)),
      workspace_cap(cap) {
  TB_CU(cudaSetDevice(device));
  TB_CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  TB_CU(cudnnCreate(&cudnn));
  TB_CU(cudnnSetStream(cudnn, stream));
  TB_CU(cublasCreate(&cublas));
  TB_CU(cublasSetStream(cublas, stream));
  TB_CU(cublasSetMathMode(cublas, p == Precision::FP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
}

Context::~Context() {
  // Destruction must not throw; statuses are ignored on the way out.
  if (cublas) cublasDestroy(cublas);
  if (cudnn) cudnnDestroy(cudnn);
  if (stream) cudaStreamDestroy(stream);
}

void Context::need_workspace(std::size_t bytes) {
  TB_CHECK(bytes <= workspace_cap, "a cuDNN call needs {} bytes of workspace, above the cap of {}", bytes,
           workspace_cap);
  workspace_bytes = std::max(workspace_bytes, bytes);
}

void TensorDesc::set4d(cudnnDataType_t type, i64 n, i64 c, i64 h, i64 w, Layout layout) {
  const cudnnTensorFormat_t format = layout == Layout::NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  TB_CU(cudnnSetTensor4dDescriptor(*this, format, type, int(n), int(c), int(h), int(w)));
}

void FilterDesc::set4d(cudnnDataType_t type, i64 k, i64 c, i64 h, i64 w) {
  TB_CU(cudnnSetFilter4dDescriptor(*this, type, CUDNN_TENSOR_NCHW, int(k), int(c), int(h), int(w)));
}

namespace {
std::atomic<long> g_host_waits{0};
}  // namespace

long host_waits() { return g_host_waits.load(std::memory_order_relaxed); }

void count_host_wait() { g_host_waits.fetch_add(1, std::memory_order_relaxed); }

void forget_not_ready() {
  if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
}

void wait_for(cudaStream_t stream) {
  const cudaError_t status = cudaStreamQuery(stream);
  if (status == cudaSuccess) return;
  if (status != cudaErrorNotReady) TB_CU(status);
  forget_not_ready();
  count_host_wait();
  TB_CU(cudaStreamSynchronize(stream));
}

void wait_for(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaSuccess) return;
  if (status != cudaErrorNotReady) TB_CU(status);
  forget_not_ready();
  count_host_wait();
  TB_CU(cudaEventSynchronize(event));
}

}  // namespace tb::cuda
