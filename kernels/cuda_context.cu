// Device discovery, error reporting, device buffers and the cuBLAS handle.
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

bool available() {
  int count = 0;
  // No driver or no device is not an error here: it means "run on the CPU".
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

DeviceContext::DeviceContext(int device_index) : device(device_index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    detail::raise_device_error("CUDA: no CUDA device found (the driver reports none)");
  if (device_index < 0 || device_index >= count)
    detail::raise_device_error("CUDA: no device cuda:" + std::to_string(device_index) + " (" +
                               std::to_string(count) + " present)");
  CKV_CUDA_CHECK(cudaSetDevice(device_index));
  CKV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const cublasStatus_t status = cublasCreate(&blas);
  if (status != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(stream);
    detail::throw_cublas_error(status, "cublasCreate(&blas)", __FILE__, __LINE__);
  }
  CKV_CUBLAS_CHECK(cublasSetStream(blas, stream));
}

DeviceContext::~DeviceContext() {
  // Destructors report nothing: the stream's pending work is abandoned with the context.
  cudaSetDevice(device);
  cudaStreamSynchronize(stream);
  cublasDestroy(blas);
  cudaStreamDestroy(stream);
}

DeviceContext* create_context(int device_index) {
  return new DeviceContext(device_index);
}

void destroy_context(DeviceContext* context) noexcept {
  delete context;
}

void* stream(DeviceContext& context) {
  return context.stream;
}

namespace detail {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  raise_device_error(std::string("CUDA: ") + call + " failed: " + cudaGetErrorString(status) + " (" + file + ":" +
                     std::to_string(line) + ")");
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  raise_device_error(std::string("cuBLAS: ") + call + " failed: " + cublasGetStatusString(status) + " (" + file +
                     ":" + std::to_string(line) + ")");
}

cublasHandle_t cublas_handle() {
  // Destroyed at thread exit; a handle must not be shared between host threads.
  struct Holder {
    cublasHandle_t handle = nullptr;
    ~Holder() {
      if (handle != nullptr) cublasDestroy(handle);
    }
  };
  thread_local Holder holder;
  if (holder.handle == nullptr) CKV_CUBLAS_CHECK(cublasCreate(&holder.handle));
  return holder.handle;
}

DeviceBuffer::DeviceBuffer(size_t n) {
  if (n == 0) return;
  const cudaError_t status = cudaMalloc(&ptr_, n * sizeof(float));
  if (status == cudaErrorMemoryAllocation) {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    raise_device_error("CUDA: out of device memory: " + std::to_string(n * sizeof(float)) + " bytes asked, " +
                       std::to_string(free) + " of " + std::to_string(total) + " free (" + cudaGetErrorString(status) +
                       ")");
  }
  if (status != cudaSuccess) throw_cuda_error(status, "cudaMalloc", __FILE__, __LINE__);
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

void DeviceBuffer::upload(const float* host, size_t n) {
  if (n > 0) CKV_CUDA_CHECK(cudaMemcpy(ptr_, host, n * sizeof(float), cudaMemcpyHostToDevice));
}

void DeviceBuffer::download(float* host, size_t n) const {
  if (n > 0) CKV_CUDA_CHECK(cudaMemcpy(host, ptr_, n * sizeof(float), cudaMemcpyDeviceToHost));
}

}  // namespace detail
}  // namespace ckv::cuda
