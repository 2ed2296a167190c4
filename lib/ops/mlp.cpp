#include "ops/mlp.h"

#include <algorithm>

#include "core/error.h"
#include "ops/device_path.h"
#include "ops/linear.h"

namespace ckv {

void gated_mlp(ExecContext& ctx, const Tensor& x, const WeightMatrix& w_gate, const WeightMatrix& w_up,
               const WeightMatrix& w_down, Tensor& y, GateActivation act) {
  if (w_gate.shape() != w_up.shape() || w_down.rows() != w_gate.cols() ||
      w_down.cols() != w_gate.rows())
    fail<InputError>("gated_mlp: gate {}, up {}, down {} do not fit together",
                     w_gate.shape_string(), w_up.shape_string(), w_down.shape_string());
  if (x.rank() != 2 || x.dim(1) != w_gate.cols())
    fail<InputError>("gated_mlp: input {} does not match gate {}", x.shape_string(), w_gate.shape_string());
  if (&y == &x) fail<InputError>("gated_mlp: output must not alias the input");
  if (act == GateActivation::GeluTanh && ctx.device() != Device::CPU)
    fail<UnsupportedError>("gated_mlp: the GELU (tanh) gate is not implemented on {}", ctx.device_string());
  const int64_t rows = x.dim(0), d_model = w_down.rows(), d_ff = w_down.cols();
  if (y.rank() != 2 || y.dim(0) != rows || y.dim(1) != d_model) y = Tensor({rows, d_model});
  Tensor& gate = ctx.scratch()[ScratchSlot::MlpGate];  // [count, d_ff]
  Tensor& up = ctx.scratch()[ScratchSlot::MlpUp];      // [count, d_ff]
  const Tensor no_bias;
  for (int64_t begin = 0; begin < rows; begin += kLinearRowChunk) {
    const int64_t count = std::min(kLinearRowChunk, rows - begin);
    if (ctx.device() == Device::CPU && tiled_f32_for_any_weight(count, ctx.compute())) {
      // The tiled float32 path: gate, up and the gating per column chunk, in one dispatch.
      if (gate.shape() != std::vector<int64_t>{count, d_ff}) gate = Tensor({count, d_ff});
      if (up.shape() != std::vector<int64_t>{count, d_ff}) up = Tensor({count, d_ff});
      detail::gate_up_silu_cpu(x.data() + begin * x.dim(1), x.dim(1), w_gate, w_up, gate.data(), up.data(), count,
                               ctx.pool(), act);
    } else {
      linear_rows(ctx, x, begin, count, w_gate, no_bias, gate);  // [count, d_ff]
      linear_rows(ctx, x, begin, count, w_up, no_bias, up);      // [count, d_ff]
      if (act == GateActivation::GeluTanh)
        gelu_tanh_mul(ctx, gate, up);
      else
        silu_mul(ctx, gate, up);
    }
    detail::linear_on_device(ctx, gate.data(), d_ff, w_down, nullptr, y.data() + begin * d_model, d_model,
                             count);  // y rows [begin, begin+count)
  }
}

void gated_mlp(ExecContext& ctx, const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down,
               Tensor& y) {
  if (w_gate.rank() != 2 || w_up.rank() != 2 || w_down.rank() != 2)
    fail<InputError>("gated_mlp: gate {}, up {}, down {} do not fit together",
                     w_gate.shape_string(), w_up.shape_string(), w_down.shape_string());
  gated_mlp(ctx, x, WeightMatrix::borrow(w_gate), WeightMatrix::borrow(w_up), WeightMatrix::borrow(w_down), y);
}

void silu_mul(ExecContext& ctx, Tensor& gate, const Tensor& up) {
  if (gate.shape() != up.shape())
    fail<InputError>("silu_mul: gate {} does not match up {}", gate.shape_string(), up.shape_string());
  if (ctx.device() == Device::CUDA) {
    detail::silu_mul_cuda(ctx, gate.data(), up.data(), gate.numel());
    return;
  }
  detail::silu_mul_cpu(gate.data(), up.data(), gate.numel(), ctx.pool());
}

}  // namespace ckv

namespace ckv {

void gelu_tanh_mul(ExecContext& ctx, Tensor& gate, const Tensor& up) {
  if (gate.shape() != up.shape())
    fail<InputError>("gelu_tanh_mul: gate {} does not match up {}", gate.shape_string(), up.shape_string());
  if (ctx.device() != Device::CPU)
    fail<UnsupportedError>("gelu_tanh_mul: not implemented on {}", ctx.device_string());
  detail::gelu_tanh_mul_cpu(gate.data(), up.data(), gate.numel(), ctx.pool());
}

}  // namespace ckv
