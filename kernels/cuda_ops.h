#pragma once
// Host-side launch API of the CUDA kernels. No CUDA types appear here, so lib/ and apps/
// include it in builds without nvcc; there available() is false and every launcher throws
// ckv::DeviceError("... built without CUDA").
// Errors from CUDA or cuBLAS throw ckv::DeviceError naming the call, file and line (out of
// memory: the size asked for and what is free).
#include <cstdint>

namespace ckv::cuda {

// True when ckv was built with CUDA and a device is present.
bool available();

// Everything one CUDA device needs, created once per execution context (ops/context.h):
// the stream every launcher runs on, and the cuBLAS handle bound to it. Opaque here.
class DeviceContext;
// Selects device `device_index` and creates its stream and handle; throws DeviceError
// (no device, a build without CUDA, a failed call).
DeviceContext* create_context(int device_index);
void destroy_context(DeviceContext* context) noexcept;  // null is allowed
// The context's cudaStream_t, as an opaque handle.
void* stream(DeviceContext& context);

// RMSNorm (ops/rms_norm.h): y = x * rsqrt(mean(x^2) + eps) * w, one CUDA block per row.
// Host pointers, copied through device buffers. x, y: [rows, cols]; w: [cols].
void rms_norm(const float* x_host, const float* w_host, float* y_host, int64_t rows, int64_t cols,
              float eps);
// The same on device pointers; synchronous (waits for the kernel and checks it).
void rms_norm_device(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                     float eps);

// Linear layer y = x W^T with cuBLAS (fp32 SGEMM). Host pointers. x: [rows, in];
// w: [out, in] (HF layout); y: [rows, out].
void linear(const float* x_host, const float* w_host, float* y_host, int64_t rows, int64_t in,
            int64_t out);

}  // namespace ckv::cuda
