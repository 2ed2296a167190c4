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
