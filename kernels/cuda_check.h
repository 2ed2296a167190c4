#pragma once
// Error checking and the per-device state for the .cu files (CUDA types allowed: never
// included from lib/ or apps/). Every CUDA and cuBLAS call goes through a check that throws
// ckv::DeviceError (core/error.h) with the call, file and line: one `ckv: error:` line.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>

#include "cuda_ops.h"

namespace ckv::cuda::detail {

// Throws ckv::DeviceError(message): compiled by the host compiler (device_error.cpp), so the
// .cu files need not parse the library's headers.
[[noreturn]] void raise_device_error(const std::string& message);

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

// An owning device allocation of `bytes` bytes (out of memory names the size and what is free).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A launch's grid size as CUDA takes it; throws DeviceError past its limit.
unsigned grid_size(int64_t blocks, const char* kernel);

}  // namespace ckv::cuda::detail

namespace ckv::cuda {

// The state behind the opaque handle of cuda_ops.h: one stream, the cuBLAS handle bound to
// it, the workspace and the device-resident weights. Not shared between host threads.
class DeviceContext {
 public:
  explicit DeviceContext(int device_index);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::array<std::unique_ptr<detail::DeviceBuffer>, kWorkspaceSlots> workspace;
  struct Resident {
    std::unique_ptr<detail::DeviceBuffer> bytes;
    DeviceWeight weight;
  };
  std::unordered_map<const void*, Resident> weights;  // by host storage
  struct ResidentVector {
    std::unique_ptr<detail::DeviceBuffer> values;
    int64_t n = 0;
  };
  std::unordered_map<const float*, ResidentVector> vectors;  // by host pointer
};

inline cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

}  // namespace ckv::cuda

#define CKV_CUDA_CHECK(call)                                                         \
  do {                                                                               \
    const cudaError_t ckv_status_ = (call);                                          \
    if (ckv_status_ != cudaSuccess)                                                  \
      ::ckv::cuda::detail::throw_cuda_error(ckv_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CKV_CUBLAS_CHECK(call)                                                         \
  do {                                                                                 \
    const cublasStatus_t ckv_status_ = (call);                                         \
    if (ckv_status_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::ckv::cuda::detail::throw_cublas_error(ckv_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a launch: a bad configuration is reported here, a fault at the next synchronize.
#define CKV_CUDA_CHECK_LAUNCH() CKV_CUDA_CHECK(cudaGetLastError())
