#pragma once
// The device half of each op's dispatch, as seen from the host (no CUDA types): where the
// context's device is CUDA, `<op>.cpp` calls these after checking its arguments. Each one
// copies the host operands into the CUDA context's workspace on its stream, calls the
// kernels/ launcher (kernels/cuda_ops.h: device pointers and a stream), and copies the result
// back. Weights are not copied per call: they are uploaded to the device once, the first time
// a context uses them, and stay there (cuda::DeviceContext owns them).
// Arguments are checked by the caller; CUDA failures throw DeviceError.
#include <cstdint>
#include <span>
#include <vector>

#include "io/weight_matrix.h"
#include "ops/attention.h"
#include "ops/context.h"
#include "ops/rope.h"

namespace ckv::cuda {
struct DeviceWeight;
}

namespace ckv::detail {

// The device copy of w in the context's CUDA context, uploaded (rows in HF order) the first
// time this context sees w's storage.
const cuda::DeviceWeight& resident_weight(ExecContext& ctx, const WeightMatrix& w);

// The additive attention mask grouped by (KV head, key), as the CUDA kernel reads it
// (kernels/cuda_ops.h DeviceMask): entries of (g, j) are [offsets[g*seq + j],
// offsets[g*seq + j + 1]), in the order of the spans. Spans already checked.
struct AttentionMaskByKey {
  std::vector<int64_t> offsets;  // [n_kv_head*seq + 1]
  std::vector<int64_t> q_begin;  // [entries]
  std::vector<int64_t> q_end;    // [entries]
  std::vector<float> value;      // [entries]
};
AttentionMaskByKey attention_mask_by_key(std::span<const AttentionMaskSpan> spans,
                                         int64_t n_kv_head, int64_t seq);

// x: [rows, in] (row stride x_stride); w: [out, in]; bias: [out] or null; y: [rows, out] (row
// stride y_stride). Dispatches on the context's device: linear_cpu or linear_cuda.
void linear_on_device(ExecContext& ctx, const float* x, int64_t x_stride, const WeightMatrix& w,
                      const float* bias, float* y, int64_t y_stride, int64_t rows);

// The CUDA halves (lib/ops/device_path.cpp); same shapes as their `_cpu` counterparts.
void linear_cuda(ExecContext& ctx, const float* x, int64_t x_stride, const WeightMatrix& w,
                 const float* bias, float* y, int64_t y_stride, int64_t rows);
void rms_norm_cuda(ExecContext& ctx, const float* x, const float* w, float* y, int64_t rows,
                   int64_t cols, float eps);
void silu_mul_cuda(ExecContext& ctx, float* gate, const float* up, int64_t n);
void apply_rope_cuda(ExecContext& ctx, float* x, int64_t heads, int64_t seq, const RopeTable& table,
                     int64_t first_position);
void causal_attention_cuda(ExecContext& ctx, const float* q, const float* k, const float* v,
                           float* out, const AttentionShape& shape, const AttentionParams& params);

}  // namespace ckv::detail
