#pragma once
// Rotary position embedding in HF's rotate_half convention (docs/MODELS.md "RoPE (HF)"):
// for i < d_head/2, out[i] = x[i]*cos - x[i+d/2]*sin, out[i+d/2] = x[i+d/2]*cos + x[i]*sin,
// with angle pos * inv_freq[i]. The frequencies are the model's (model/rope_freq.h). With
// partial rotary embedding (phi3) only the first 2*half dims of each head turn, d = 2*half in
// the pairing above, and the rest pass through.
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ops/context.h"

namespace ckv {

// Rotation angles' cosines and sines for positions [0, seq).
struct RopeTable {
  int64_t seq = 0;
  int64_t half = 0;        // d_head / 2
  std::vector<float> cos;  // [seq, d_head/2]
  std::vector<float> sin;  // [seq, d_head/2]
};

// Angles are formed in fp32 as the reference does (float(pos) * inv_freq), then cos/sin,
// each times `scale` in fp32 when it is not 1 (LongRoPE's attention factor, as HF applies it).
RopeTable make_rope_table(std::span<const float> inv_freq, int64_t seq, float scale = 1.0f);

// x: [heads, seq, d_head] with d_head >= 2 * table.half, its first 2 * table.half dims of each
// row rotated in place; row p gets position first_position + p, and
// first_position + seq must not exceed table.seq (a decoding step rotates one new row at its
// position in the sequence: first_position = the tokens already cached).
void apply_rope(ExecContext& ctx, Tensor& x, const RopeTable& table, int64_t first_position = 0);

namespace detail {
// x: [heads, seq, row] row-major (row >= 2*half); the first 2*half dims of row p rotated by
// the table's row first_position + p. One task per block of 64 of the heads * seq rows.
void apply_rope_cpu(float* x, int64_t heads, int64_t seq, int64_t half, const RopeTable& table,
                    int64_t first_position, ThreadPool& pool, int64_t row = 0 /* 0: 2*half */);
}  // namespace detail

}  // namespace ckv
