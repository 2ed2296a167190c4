#pragma once
// Error checking and shared handles for the .cu files (CUDA types allowed: never included
// from lib/ or apps/). Every CUDA and cuBLAS call goes through a check that throws
// ckv::DeviceError (core/error.h) with the call, file and line: one `ckv: error:` line.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace ckv::cuda {

// The per-device state behind the opaque handle of cuda_ops.h: one stream, the cuBLAS
// handle bound to it. Created once per execution context; not shared between host threads.
class DeviceContext {
 public:
  explicit DeviceContext(int device_index);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
};

}  // namespace ckv::cuda

namespace ckv::cuda::detail {

// Throws ckv::DeviceError(message): compiled by the host compiler (device_error.cpp), so the
// .cu files need not parse the library's headers.
[[noreturn]] void raise_device_error(const std::string& message);

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

// One cuBLAS handle per host thread, created on first use on the current device.
cublasHandle_t cublas_handle();

// An owning device allocation of n floats.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return ptr_; }
  void upload(const float* host, size_t n);
  void download(float* host, size_t n) const;

 private:
  float* ptr_ = nullptr;
};

}  // namespace ckv::cuda::detail

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
