#include "ops/attention.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/device_path.h"

namespace ckv {

void causal_attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionParams& params) {
  if (q.rank() != 3 || k.rank() != 3 || k.shape() != v.shape() || q.dim(1) != k.dim(1) ||
      q.dim(2) != k.dim(2) || k.dim(0) == 0 || q.dim(0) % k.dim(0) != 0)
    fail<InputError>("attention: q {}, k {}, v {} do not fit together", q.shape_string(),
                     k.shape_string(), v.shape_string());
  const detail::AttentionShape shape{q.dim(0), k.dim(0), q.dim(1), q.dim(2)};
  if (params.query_block <= 0)
    fail<InputError>("attention: query block {} must be positive", params.query_block);
  for (const AttentionMaskSpan& span : params.mask) {
    if (span.kv_head < 0 || span.kv_head >= shape.n_kv_head || span.q_begin < 0 ||
        span.q_end > shape.seq || span.q_begin > span.q_end)
      fail<InputError>("attention mask: KV head {} rows [{}, {}) outside {} KV heads, {} rows",
                       span.kv_head, span.q_begin, span.q_end, shape.n_kv_head, shape.seq);
    for (int64_t key : span.keys)
      if (key < 0 || key >= shape.seq)
        fail<InputError>("attention mask: key {} outside [0, {})", key, shape.seq);
  }
  if (params.window < 0 || params.scale < 0 || !std::isfinite(params.scale))
    fail<InputError>("attention: window {} and scale {} must not be negative", params.window, params.scale);
  if (ctx.device() == Device::CUDA && !params.prob_rows.empty())
    fail<UnsupportedError>("attention: recording probability rows is not implemented on {}", ctx.device_string());
  if (ctx.device() == Device::CUDA && (params.window > 0 || params.scale > 0))
    fail<UnsupportedError>("attention: a sliding window or a logit scale is not implemented on {}",
                           ctx.device_string());
  std::vector<int64_t> prob_slot;
  if (!params.prob_rows.empty()) {
    const auto r = static_cast<int64_t>(params.prob_rows.size());
    if (params.probs == nullptr) fail<InputError>("attention: probability rows without output");
    prob_slot.assign(static_cast<size_t>(shape.seq), -1);
    for (int64_t i = 0; i < r; ++i) {
      const int64_t row = params.prob_rows[static_cast<size_t>(i)];
      if (row < 0 || row >= shape.seq)
        fail<InputError>("attention: query row {} outside [0, {})", row, shape.seq);
      if (prob_slot[static_cast<size_t>(row)] >= 0)
        fail<InputError>("attention: query row {} requested twice", row);
      prob_slot[static_cast<size_t>(row)] = i;
    }
    if (params.probs->shape() != std::vector<int64_t>{shape.n_head, r, shape.seq})
      *params.probs = Tensor({shape.n_head, r, shape.seq});
  }
  if (out.rank() != 2 || out.dim(0) != shape.seq || out.dim(1) != shape.n_head * shape.d_head)
    out = Tensor({shape.seq, shape.n_head * shape.d_head});
  if (ctx.device() == Device::CUDA) {
    detail::causal_attention_cuda(ctx, q.data(), k.data(), v.data(), out.data(), shape, params);
    return;
  }
  detail::causal_attention_cpu(q.data(), k.data(), v.data(), out.data(), shape, params, prob_slot,
                               ctx.pool());
}

void cached_attention(ExecContext& ctx, const Tensor& q, std::span<const int64_t> q_positions,
                      std::span<const KvHeadView> heads, Tensor& out, int64_t query_block, int64_t window,
                      float scale) {
  if (ctx.device() != Device::CPU)
    fail<UnsupportedError>("cached attention: the KV cache is in host memory; {} is not supported",
                           ctx.device_string());
  const auto n_kv_head = static_cast<int64_t>(heads.size());
  if (q.rank() != 3 || n_kv_head == 0 || q.dim(0) % n_kv_head != 0 ||
      q.dim(1) != static_cast<int64_t>(q_positions.size()))
    fail<InputError>("cached attention: q {} does not fit {} KV heads and {} positions",
                     q.shape_string(), n_kv_head, q_positions.size());
  if (query_block <= 0) fail<InputError>("cached attention: query block {} must be positive", query_block);
  if (window < 0 || scale < 0 || !std::isfinite(scale))
    fail<InputError>("cached attention: window {} and scale {} must not be negative", window, scale);
  const int64_t n_head = q.dim(0), rows = q.dim(1), d_head = q.dim(2);
  for (int64_t i = 1; i < rows; ++i)
    if (q_positions[static_cast<size_t>(i)] <= q_positions[static_cast<size_t>(i - 1)])
      fail<InputError>("cached attention: query positions are not increasing");
  // Each row sees the prefix of its head's entries at positions <= its own.
  std::vector<int64_t> visible(static_cast<size_t>(rows * n_kv_head)), first;
  if (window > 0) first.resize(visible.size());  // and, with a window, from (p - window, p]
  for (int64_t g = 0; g < n_kv_head; ++g) {
    const KvHeadView& h = heads[static_cast<size_t>(g)];
    if (h.count < 0 || (h.count > 0 && (h.k == nullptr || h.v == nullptr || h.positions == nullptr)))
      fail<InputError>("cached attention: KV head {} has no storage", g);
    const std::span<const int64_t> pos(h.positions, static_cast<size_t>(h.count));
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t n = std::upper_bound(pos.begin(), pos.end(), q_positions[static_cast<size_t>(i)]) - pos.begin();
      if (n == 0)
        fail<InputError>("cached attention: KV head {} holds no entry at or before position {}", g,
                         q_positions[static_cast<size_t>(i)]);
      visible[static_cast<size_t>(i * n_kv_head + g)] = n;
      if (window > 0)
        first[static_cast<size_t>(i * n_kv_head + g)] =
            std::lower_bound(pos.begin(), pos.end(), q_positions[static_cast<size_t>(i)] - window + 1) - pos.begin();
    }
  }
  if (out.rank() != 2 || out.dim(0) != rows || out.dim(1) != n_head * d_head)
    out = Tensor({rows, n_head * d_head});
  detail::cached_attention_cpu(q.data(), n_head, rows, d_head, heads, visible, first,
                               scale > 0 ? scale : 1.0f / std::sqrt(static_cast<float>(d_head)), out.data(),
                               query_block, ctx.pool());
}

}  // namespace ckv
