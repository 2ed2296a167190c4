#include "ops/mlp.h"

#include "core/error.h"
#include "ops/linear.h"

namespace ckv {

void gated_mlp(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down,
               Tensor& y, ThreadPool& pool, Tensor& gate_scratch, Tensor& up_scratch) {
  if (w_gate.shape() != w_up.shape() || w_down.rank() != 2 || w_gate.rank() != 2 ||
      w_down.dim(0) != w_gate.dim(1) || w_down.dim(1) != w_gate.dim(0))
    fail<InputError>("gated_mlp: gate {}, up {}, down {} do not fit together",
                     w_gate.shape_string(), w_up.shape_string(), w_down.shape_string());
  const Tensor no_bias;
  linear(x, w_gate, no_bias, gate_scratch, pool);  // [rows, d_ff]
  linear(x, w_up, no_bias, up_scratch, pool);      // [rows, d_ff]
  detail::silu_mul_cpu(gate_scratch.data(), up_scratch.data(), gate_scratch.numel(), pool);
  linear(gate_scratch, w_down, no_bias, y, pool);  // [rows, d_model]
}

}  // namespace ckv
