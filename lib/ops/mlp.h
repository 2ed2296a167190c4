#pragma once
// The gated MLP: y = down(act(gate(x)) * up(x)), act SiLU (llama, qwen2: SwiGLU) or the tanh
// approximation of GELU (Gemma 3's gelu_pytorch_tanh: GeGLU).
#include "core/tensor.h"
#include "io/weight_matrix.h"
#include "ops/linear.h"

namespace ckv {

class ThreadPool;

enum class GateActivation { Silu, GeluTanh };

// x: [rows, d_model]; w_gate, w_up: [d_ff, d_model]; w_down: [d_model, d_ff];
// y: [rows, d_model] (resized). Rows are processed in chunks of kLinearRowChunk, so the
// context's scratch slots MlpGate and MlpUp are [min(rows, kLinearRowChunk), d_ff], not
// [rows, d_ff] (4 GiB at 32K tokens of an 8B model).
// GeluTanh runs on the CPU only (UnsupportedError on CUDA).
void gated_mlp(ExecContext& ctx, const Tensor& x, const WeightMatrix& w_gate, const WeightMatrix& w_up,
               const WeightMatrix& w_down, Tensor& y, GateActivation act = GateActivation::Silu);
// The same with float32 weights (tests).
void gated_mlp(ExecContext& ctx, const Tensor& x, const Tensor& w_gate, const Tensor& w_up, const Tensor& w_down,
               Tensor& y);
// gate, up: [n] elementwise; gate <- silu(gate) * up (SwiGLU's gating).
void silu_mul(ExecContext& ctx, Tensor& gate, const Tensor& up);
// gate <- gelu_tanh(gate) * up, gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_tanh_mul(ExecContext& ctx, Tensor& gate, const Tensor& up);

namespace detail {
// gate, up: [n] elementwise; gate <- silu(gate) * up, split over the pool.
void silu_mul_cpu(float* gate, const float* up, int64_t n, ThreadPool& pool);
void gelu_tanh_mul_cpu(float* gate, const float* up, int64_t n, ThreadPool& pool);
// The float32 tiled path of gate, up and their gating for x: [rows, d_model] (row stride
// x_stride) -> gate: [rows, d_ff] = silu(x W_gate^T) * (x W_up^T), up: [rows, d_ff] scratch.
// One task per column chunk of d_ff does both GEMM calls that linear_rows would make for that
// chunk and gates the chunk while it is in cache: the same bits as linear_rows twice and
// silu_mul (gelu_tanh_mul with GeluTanh), in one dispatch instead of three.
void gate_up_silu_cpu(const float* x, int64_t x_stride, const WeightMatrix& w_gate, const WeightMatrix& w_up,
                      float* gate, float* up, int64_t rows, ThreadPool& pool,
                      GateActivation act = GateActivation::Silu);
}  // namespace detail

}  // namespace ckv
