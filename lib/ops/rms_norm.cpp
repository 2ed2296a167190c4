#include "ops/rms_norm.h"

#include "core/error.h"
#include "ops/device_path.h"

namespace ckv {

void rms_norm(ExecContext& ctx, const Tensor& x, const Tensor& weight, float eps, Tensor& y) {
  if (x.rank() < 1 || weight.rank() != 1 || x.shape().back() != weight.dim(0))
    fail<InputError>("rms_norm: input {} does not match weight {}", x.shape_string(),
                     weight.shape_string());
  if (&y != &x && y.shape() != x.shape()) y = Tensor(x.shape());
  const int64_t cols = weight.dim(0);
  if (ctx.device() == Device::CUDA) {
    detail::rms_norm_cuda(ctx, x.data(), weight.data(), y.data(), x.numel() / cols, cols, eps);
    return;
  }
  detail::rms_norm_cpu(x.data(), weight.data(), y.data(), x.numel() / cols, cols, eps, ctx.pool());
}

}  // namespace ckv
