#include "ops/device_path.h"

#include "core/error.h"
#include "ops/linear.h"

namespace ckv::detail {

namespace {
[[noreturn]] void not_yet(const char* op) {
  fail<UnsupportedError>("{}: no CUDA path yet", op);
}
}  // namespace

void linear_on_device(ExecContext& ctx, const float* x, int64_t x_stride, const WeightMatrix& w,
                      const float* bias, float* y, int64_t y_stride, int64_t rows) {
  if (ctx.device() == Device::CUDA) {
    linear_cuda(ctx, x, x_stride, w, bias, y, y_stride, rows);
    return;
  }
  linear_cpu(x, x_stride, w, bias, y, y_stride, rows, ctx.pool(), ctx.compute());
}

void linear_cuda(ExecContext&, const float*, int64_t, const WeightMatrix&, const float*, float*, int64_t, int64_t) {
  not_yet("linear");
}
void rms_norm_cuda(ExecContext&, const float*, const float*, float*, int64_t, int64_t, float) {
  not_yet("rms_norm");
}
void silu_mul_cuda(ExecContext&, float*, const float*, int64_t) {
  not_yet("silu_mul");
}
void apply_rope_cuda(ExecContext&, float*, int64_t, int64_t, const RopeTable&, int64_t) {
  not_yet("rope");
}
void causal_attention_cuda(ExecContext&, const float*, const float*, const float*, float*, const AttentionShape&,
                           const AttentionParams&) {
  not_yet("attention");
}

}  // namespace ckv::detail
