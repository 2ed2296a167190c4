// Built instead of the .cu files when nvcc is absent: the launch API reports no device.
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

void rms_norm(const float*, const float*, float*, int64_t, int64_t, float) {
  no_cuda("rms_norm");
}
void rms_norm_device(const float*, const float*, float*, int64_t, int64_t, float) {
  no_cuda("rms_norm_device");
}
void linear(const float*, const float*, float*, int64_t, int64_t, int64_t) {
  no_cuda("linear");
}

}  // namespace ckv::cuda
