// The SwiGLU gating of the MLP (ops/mlp.h): gate <- silu(gate) * up, elementwise.
// Mapping: a grid-stride loop, one element per thread per step (op_math::silu_mul).
// Layout: gate, up [n] (the [rows, d_ff] projections, flat). Precision: fp32 with the
// device's expf (within 2 ulp of the CPU's vectorised exp).
#include <algorithm>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void silu_mul_kernel(float* gate, const float* __restrict__ up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    gate[i] = op_math::silu_mul(gate[i], up[i]);
}

}  // namespace

void silu_mul(float* gate, const float* up, int64_t n, void* stream) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  silu_mul_kernel<<<detail::grid_size(blocks, "silu_mul"), kThreads, 0, as_stream(stream)>>>(gate,
                                                                                             up, n);
  CKV_CUDA_CHECK_LAUNCH();
}

}  // namespace ckv::cuda
