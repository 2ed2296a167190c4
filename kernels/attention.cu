// Causal attention with grouped KV heads (ops/attention.h), one pass over the keys with an
// online softmax: no [seq, seq] buffer, no [seq] row of logits kept.
// Mapping: grid (ceil(seq / kRows), n_head); a block is a row block of kRows consecutive
// query rows of one query head, one warp per row. A lane holds d_head / 32 (at most
// kMaxPerLane) dimensions of the row's q and of its output accumulator. For each key j <= i
// the warp forms q.k_j (lane partial sums, shuffle reduction), scales it by 1/sqrt(d_head),
// adds the additive mask entries of (KV head, j) whose row range holds i, and updates the
// softmax state and accumulator (op_math::softmax_update: rescale, then add weight * v_j);
// the output is acc / sum (op_math::softmax_finish: 0 when every key is masked).
// Layout: q [n_head, seq, d_head]; k, v [n_kv_head, seq, d_head]; out [seq, n_head*d_head],
// head h in columns [h*d_head, (h+1)*d_head). Query head h reads KV head h / (n_head /
// n_kv_head). Mask: DeviceMask, entries by (KV head, key) (cuda_ops.h).
// Precision: fp32 logits, softmax and sums; the CPU op sums in another order (a GEMM, then a
// fixed-order softmax), so outputs agree to float rounding. Keys are read from global
// memory by every warp (no shared-memory K/V tiles): correct first, not yet fast.
#include <algorithm>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRows = 4;        // query rows (warps) per block
constexpr int kMaxPerLane = 8;  // d_head <= 32 * 8
constexpr int64_t kMaxDHead = kWarp * kMaxPerLane;

// The sum over the warp in every lane. Paired lanes add the same two values (a + b == b + a
// in IEEE arithmetic), so all lanes hold the same bits and the softmax state stays uniform.
__device__ float warp_all_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void causal_attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, float* __restrict__ out,
                                        int64_t n_head, int64_t n_kv_head, int64_t seq,
                                        int64_t d_head, float scale, DeviceMask mask) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = blockIdx.x * int64_t{kRows} + threadIdx.x / kWarp;
  const int64_t h = blockIdx.y, g = h / (n_head / n_kv_head);
  if (row >= seq) return;                             // a whole warp leaves together
  const float* q_row = q + (h * seq + row) * d_head;  // [d_head]
  const float* k_head = k + g * seq * d_head;         // [seq, d_head]
  const float* v_head = v + g * seq * d_head;         // [seq, d_head]
  float q_part[kMaxPerLane], acc[kMaxPerLane];
  for (int s = 0; s < kMaxPerLane; ++s) {
    const int64_t d = lane + int64_t{s} * kWarp;
    q_part[s] = d < d_head ? q_row[d] : 0.0f;
    acc[s] = 0.0f;
  }
  op_math::SoftmaxState state = op_math::softmax_start();
  for (int64_t j = 0; j <= row; ++j) {
    const float* k_row = k_head + j * d_head;
    float partial = 0.0f;
    for (int s = 0; s < kMaxPerLane; ++s) {
      const int64_t d = lane + int64_t{s} * kWarp;
      if (d < d_head) partial += q_part[s] * k_row[d];
    }
    float logit = warp_all_sum(partial) * scale;
    if (mask.offsets != nullptr)
      for (int64_t e = mask.offsets[g * seq + j]; e < mask.offsets[g * seq + j + 1]; ++e)
        if (mask.q_begin[e] <= row && row < mask.q_end[e]) logit += mask.value[e];
    const op_math::SoftmaxStep step = op_math::softmax_update(state, logit);
    if (step.weight == 0.0f && step.rescale == 1.0f) continue;  // a masked key
    const float* v_row = v_head + j * d_head;
    for (int s = 0; s < kMaxPerLane; ++s) {
      const int64_t d = lane + int64_t{s} * kWarp;
      if (d < d_head) acc[s] = acc[s] * step.rescale + step.weight * v_row[d];
    }
  }
  float* out_row = out + row * n_head * d_head + h * d_head;  // [d_head]
  for (int s = 0; s < kMaxPerLane; ++s) {
    const int64_t d = lane + int64_t{s} * kWarp;
    if (d < d_head) out_row[d] = op_math::softmax_finish(state, acc[s]);
  }
}

}  // namespace

void causal_attention(const float* q, const float* k, const float* v, float* out, int64_t n_head,
                      int64_t n_kv_head, int64_t seq, int64_t d_head, const DeviceMask& mask,
                      void* stream) {
  if (n_head <= 0 || n_kv_head <= 0 || n_head % n_kv_head != 0 || d_head <= 0 ||
      d_head > kMaxDHead || seq < 0 || n_head > 65535)
    detail::raise_device_error("cuda::causal_attention: unsupported shape: n_head " +
                               std::to_string(n_head) + ", n_kv_head " + std::to_string(n_kv_head) +
                               ", d_head " + std::to_string(d_head) + " (at most " +
                               std::to_string(kMaxDHead) + ")");
  if (seq == 0) return;
  const dim3 grid(detail::grid_size((seq + kRows - 1) / kRows, "causal_attention"),
                  static_cast<unsigned>(n_head));
  const float scale = 1.0f / sqrtf(static_cast<float>(d_head));
  causal_attention_kernel<<<grid, kRows * kWarp, 0, as_stream(stream)>>>(
      q, k, v, out, n_head, n_kv_head, seq, d_head, scale, mask);
  CKV_CUDA_CHECK_LAUNCH();
}

}  // namespace ckv::cuda
