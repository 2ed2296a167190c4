#include "ops/linear.h"

#include "core/error.h"
#include "ops/device_path.h"

namespace ckv {

void linear_rows(ExecContext& ctx, const Tensor& x, int64_t begin, int64_t count, const WeightMatrix& weight,
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
  const int64_t in = x.dim(1), out = weight.rows();
  if (y.rank() != 2 || y.dim(0) != count || y.dim(1) != out) y = Tensor({count, out});
  detail::linear_on_device(ctx, x.data() + begin * in, in, weight, bias.empty() ? nullptr : bias.data(),
                           y.data(), out, count);
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
