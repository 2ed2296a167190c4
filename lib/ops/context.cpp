#include "ops/context.h"

#include "core/error.h"
#include "core/thread_pool.h"
#include "cuda_ops.h"

namespace ckv {

std::string_view device_name(Device device) {
  return device == Device::CUDA ? "cuda" : "cpu";
}

int64_t ScratchArena::bytes() const {
  int64_t total = 0;
  for (const Tensor& t : slots_) total += t.numel() * static_cast<int64_t>(sizeof(float));
  return total;
}

ExecContext::ExecContext(ExecOptions options) : options_(options) {
  if (!compute_dtype_available(options.compute))
    fail<UsageError>(
        "--compute-dtype {}: this build has no {} GEMM (built without oneDNN; install "
        "libdnnl-dev and rebuild)",
        compute_dtype_name(options.compute), compute_dtype_name(options.compute));
  if (options.device == Device::CUDA) {
    if (options.device_index < 0)
      fail<UsageError>("--device cuda:{}: no such device", options.device_index);
    cuda_.reset(cuda::create_context(options.device_index));  // throws DeviceError
  }
  pool_ = std::make_unique<ThreadPool>(options.threads);
}

ExecContext::~ExecContext() = default;

void ExecContext::CudaDeleter::operator()(cuda::DeviceContext* context) const {
  cuda::destroy_context(context);
}

std::string ExecContext::device_string() const {
  if (options_.device == Device::CPU) return "cpu";
  return "cuda:" + std::to_string(options_.device_index);
}

int ExecContext::threads() const {
  return pool_->size();
}

void* ExecContext::stream() const {
  return cuda_ ? cuda::stream(*cuda_) : nullptr;
}

}  // namespace ckv
