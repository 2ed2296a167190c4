#pragma once
// RMSNorm, as in llama and qwen2: y = x * rsqrt(mean(x^2) + eps) * w, computed in fp32.
#include "core/tensor.h"
#include "ops/context.h"

namespace ckv {

class ThreadPool;

// x: [..., d] (any rank >= 1: each row of the last axis is normed, e.g. every head of
// q [n_head, seq, d_head]), weight: [d], y: same shape as x (resized if needed; may alias x). Throws InputError on mismatched shapes.
void rms_norm(ExecContext& ctx, const Tensor& x, const Tensor& weight, float eps, Tensor& y);

namespace detail {
// x, y: [rows, cols] row-major; w: [cols]. y may equal x.
// In blocks of rows over the pool; x may be y.
void rms_norm_cpu(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps,
                  ThreadPool& pool);
}  // namespace detail

}  // namespace ckv
