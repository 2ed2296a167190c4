// Built instead of the .cu files when nvcc is absent: the launch API reports no device, and
// every call throws DeviceError (one line). Keep in step with cuda_ops.h.
#include <string>

#include "core/error.h"
#include "cuda_ops.h"

namespace ckv::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(std::string("cuda::") + what + ": ckv was built without CUDA");
}
}  // namespace

bool available() {
  return false;
}
std::string cublas_check() {
  no_cuda("cublas_check");
}

class DeviceContext {};
DeviceContext* create_context(int) {
  no_cuda("create_context");
}
void destroy_context(DeviceContext* context) noexcept {
  delete context;
}
void* stream(DeviceContext&) {
  return nullptr;
}
void synchronize(DeviceContext&) {
  no_cuda("synchronize");
}
float* workspace(DeviceContext&, int, size_t) {
  no_cuda("workspace");
}
void copy_to_device(DeviceContext&, void*, const void*, size_t) {
  no_cuda("copy_to_device");
}
void copy_to_host(DeviceContext&, void*, const void*, size_t) {
  no_cuda("copy_to_host");
}
const DeviceWeight* find_weight(DeviceContext&, const void*) {
  no_cuda("find_weight");
}
const DeviceWeight& upload_weight(DeviceContext&, const void*, DType, int64_t, int64_t,
                                  int64_t, const uint8_t* const*) {
  no_cuda("upload_weight");
}
const float* device_vector(DeviceContext&, const float*, int64_t) {
  no_cuda("device_vector");
}
void rms_norm(const float*, const float*, float*, int64_t, int64_t, float, void*) {
  no_cuda("rms_norm");
}
void rope(float*, int64_t, int64_t, int64_t, const float*, const float*, void*) {
  no_cuda("rope");
}
void silu_mul(float*, const float*, int64_t, void*) {
  no_cuda("silu_mul");
}
void dequantize_rows(const DeviceWeight&, int64_t, int64_t, float*, void*) {
  no_cuda("dequantize_rows");
}
void linear(DeviceContext&, const float*, int64_t, int64_t, const DeviceWeight&, const float*,
            float*, int64_t) {
  no_cuda("linear");
}
void causal_attention(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t,
                      int64_t, const DeviceMask&, void*) {
  no_cuda("causal_attention");
}

}  // namespace ckv::cuda
