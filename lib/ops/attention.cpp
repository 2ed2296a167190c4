#include "ops/attention.h"

#include "core/error.h"

namespace ckv {

void causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionParams& params, ThreadPool& pool) {
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
  detail::causal_attention_cpu(q.data(), k.data(), v.data(), out.data(), shape, params, prob_slot,
                               pool);
}

}  // namespace ckv
