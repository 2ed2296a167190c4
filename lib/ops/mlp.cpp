#include "ops/mlp.h"

#include "core/error.h"
#include "ops/linear.h"

namespace ckv {

void gated_mlp(const Tensor& x, const WeightMatrix& w_gate, const WeightMatrix& w_up,
               const WeightMatrix& w_down, Tensor& y, ThreadPool& pool, Tensor& gate_scratch,
               Tensor& up_scratch) {
  if (w_gate.shape() != w_up.shape() || w_down.rows() != w_gate.cols() ||
      w_down.cols() != w_gate.rows())
    fail<InputError>("gated_mlp: gate {}, up {}, down {} do not fit together",
                     w_gate.shape_string(), w_up.shape_string(), w_down.shape_string());
  const Tensor no_bias;
  linear(x, w_gate, no_bias, gate_scratch, pool);  // [rows, d_ff]
  linear(x, w_up, no_bias, up_scratch, pool);      // [rows, d_ff]
  detail::silu_mul_cpu(gate_scratch.data(), up_scratch.data(), gate_scratch.numel(), pool);
  linear(gate_scratch, w_down, no_bias, y, pool);  // [rows, d_model]
}

void gated_mlp(const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down,
               Tensor& y, ThreadPool& pool, Tensor& gate_scratch, Tensor& up_scratch) {
  if (w_gate.rank() != 2 || w_up.rank() != 2 || w_down.rank() != 2)
    fail<InputError>("gated_mlp: gate {}, up {}, down {} do not fit together",
                     w_gate.shape_string(), w_up.shape_string(), w_down.shape_string());
  gated_mlp(x, WeightMatrix::borrow(w_gate), WeightMatrix::borrow(w_up), WeightMatrix::borrow(w_down),
            y, pool, gate_scratch, up_scratch);
}

}  // namespace ckv
