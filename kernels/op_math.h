#pragma once
// The per-element arithmetic of the CUDA kernels (RMSNorm, RoPE, SwiGLU gating, the online
// softmax), in a form the host compiler compiles too (CKV_HD = __host__ __device__ under
// nvcc). The CPU ops do not call these functions (they are vectorised their own way);
// tests/test_op_math.cpp runs them on the CPU against the CPU ops, so a formula or index
// mistake in a kernel is caught on a machine without a GPU. What stays unchecked there is the
// launch geometry. The stored-type decoders are not here: io/dtype_decode.h, which the CPU
// conversion and the dequantisation kernel both call.
// C++17 and no library headers: nvcc parses this file.
#include <cmath>
#include <cstdint>

#if !defined(CKV_HD)
#if defined(__CUDACC__)
#define CKV_HD __host__ __device__
#else
#define CKV_HD
#endif
#endif

namespace ckv::op_math {

// ---- RMSNorm (ops/rms_norm.h): y = x * inv_rms * w ---------------------------------------

// 1 / sqrt(mean(x^2) + eps) from the row's sum of squares, as rms_norm_cpu forms it.
CKV_HD inline float rms_inv(float sum_squares, int64_t cols, float eps) {
  return 1.0f / sqrtf(sum_squares / static_cast<float>(cols) + eps);
}
CKV_HD inline float rms_scale(float x, float inv_rms, float weight) {
  return x * inv_rms * weight;
}

// ---- RoPE (ops/rope.h, HF rotate_half): the pair (lo, hi) = (x[i], x[i + d_head/2]) ------

CKV_HD inline void rope_rotate(float& lo, float& hi, float cos_angle, float sin_angle) {
  const float lo_old = lo;
  lo = lo * cos_angle - hi * sin_angle;
  hi = hi * cos_angle + lo_old * sin_angle;
}

// ---- SwiGLU gating (ops/mlp.h): silu(gate) * up -------------------------------------------

CKV_HD inline float silu_mul(float gate, float up) {
  // exp(-gate) = inf for very negative gate gives 0, as on the CPU.
  return gate / (1.0f + expf(-gate)) * up;
}

// ---- Online softmax (attention): one pass over the keys, no [seq] row kept --------------
// State of one query row: the running maximum logit, the running sum of exp(logit - max).
// The output accumulator acc[d] (sum of p_j v_j) is rescaled by `rescale` before adding
// `weight` * v_j. A -inf logit (a masked key) changes nothing. After the last key the output
// is acc / sum, or 0 when every key was masked (sum == 0), as the CPU op gives.
struct SoftmaxState {
  float max;
  float sum;
};
CKV_HD inline SoftmaxState softmax_start() {
  return {-INFINITY, 0.0f};
}
struct SoftmaxStep {
  float rescale;  // factor for the accumulator so far
  float weight;   // exp(logit - new max), for this key's value row
};
CKV_HD inline SoftmaxStep softmax_update(SoftmaxState& state, float logit) {
  if (logit == -INFINITY) return {1.0f, 0.0f};
  const float new_max = logit > state.max ? logit : state.max;
  // state.max == -inf (nothing seen yet): exp(-inf) = 0 rescales the empty sum.
  const float rescale = expf(state.max - new_max);
  const float weight = expf(logit - new_max);
  state.sum = state.sum * rescale + weight;
  state.max = new_max;
  return {rescale, weight};
}
CKV_HD inline float softmax_finish(const SoftmaxState& state, float acc) {
  return state.sum > 0.0f ? acc / state.sum : 0.0f;
}

}  // namespace ckv::op_math
