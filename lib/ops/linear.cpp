#include "ops/linear.h"

#include "core/error.h"
#include "ops/device_path.h"

namespace ckv {

namespace {

// The checks of linear_rows; y resized to [count, out].
void check_linear_rows(const Tensor& x, int64_t begin, int64_t count, const WeightMatrix& weight,
                       const Tensor& bias, Tensor& y) {
  if (x.rank() != 2 || weight.empty() || x.dim(1) != weight.cols())
    fail<InputError>("linear: input {} does not match weight {}", x.shape_string(),
                     weight.shape_string());
  if (begin < 0 || count < 0 || begin + count > x.dim(0))
    fail<InputError>("linear: rows [{}, {}) outside input {}", begin, begin + count, x.shape_string());
  if (!bias.empty() && bias.numel() != weight.rows())
    fail<InputError>("linear: bias {} does not match weight {}", bias.shape_string(),
                     weight.shape_string());
  if (&y == &x) fail<InputError>("linear: output must not alias the input");
  const int64_t out = weight.rows();
  if (y.rank() != 2 || y.dim(0) != count || y.dim(1) != out) y = Tensor({count, out});
}

}  // namespace

void linear_rows(ExecContext& ctx, const Tensor& x, int64_t begin, int64_t count, const WeightMatrix& weight,
                 const Tensor& bias, Tensor& y) {
  check_linear_rows(x, begin, count, weight, bias, y);
  const int64_t in = x.dim(1), out = weight.rows();
  detail::linear_on_device(ctx, x.data() + begin * in, in, weight, bias.empty() ? nullptr : bias.data(),
                           y.data(), out, count);
}

void linear_rows_batch(ExecContext& ctx, const Tensor& x, int64_t begin, int64_t count,
                       std::span<const LinearTarget> targets) {
  for (size_t i = 0; i < targets.size(); ++i) {
    check_linear_rows(x, begin, count, *targets[i].weight, *targets[i].bias, *targets[i].y);
    for (size_t j = 0; j < i; ++j)
      if (targets[j].y == targets[i].y) fail<InputError>("linear: outputs {} and {} of a batch are one tensor", j, i);
  }
  if (ctx.device() != Device::CPU) {
    for (const LinearTarget& t : targets) linear_rows(ctx, x, begin, count, *t.weight, *t.bias, *t.y);
    return;
  }
  std::vector<detail::LinearJob> jobs;
  for (const LinearTarget& t : targets)
    jobs.push_back({t.weight, t.bias->empty() ? nullptr : t.bias->data(), t.y->data(), t.weight->rows()});
  detail::linear_batch_cpu(x.data() + begin * x.dim(1), x.dim(1), jobs, count, ctx.pool(), ctx.compute());
}

void linear(ExecContext& ctx, const Tensor& x, const WeightMatrix& weight, const Tensor& bias, Tensor& y) {
  if (x.rank() != 2)
    fail<InputError>("linear: input {} does not match weight {}", x.shape_string(),
                     weight.shape_string());
  linear_rows(ctx, x, 0, x.dim(0), weight, bias, y);
}

void linear(ExecContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  if (weight.rank() != 2)
    fail<InputError>("linear: input {} does not match weight {}", x.shape_string(),
                     weight.shape_string());
  linear(ctx, x, WeightMatrix::borrow(weight), bias, y);
}

}  // namespace ckv
