#pragma once
// Causal multi-head attention with grouped KV heads, computed in blocks of query rows so
// that memory stays O(block * seq) per thread, never n x n x heads. Softmax in fp32.
// Query head h reads KV head h / (n_head / n_kv_head); scores are scaled by 1/sqrt(d_head).
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace ckv {

class ThreadPool;

// An additive term on the attention logits of KV head `kv_head`: for every query row in
// [q_begin, q_end) and every key in `keys`, logit += value, for each query head of that KV
// head. The default value -inf evicts those keys for those queries (MATH.md §2). Keys after
// the query row stay causally masked whatever the value.
struct AttentionMaskSpan {
  int64_t kv_head = 0;
  int64_t q_begin = 0;
  int64_t q_end = 0;
  std::vector<int64_t> keys;  // key positions in [0, seq)
  float value = -std::numeric_limits<float>::infinity();
};

struct AttentionParams {
  int64_t query_block = 64;                 // query rows per task
  std::span<const AttentionMaskSpan> mask;  // additive logit mask, may be empty
  std::span<const int64_t> prob_rows;       // [r] query rows whose probabilities are kept
  Tensor* probs = nullptr;                  // [n_head, r, seq], set when prob_rows is non-empty
};

// q: [n_head, seq, d_head], k, v: [n_kv_head, seq, d_head] (post-RoPE);
// out: [seq, n_head*d_head] (resized), head h in columns [h*d_head, (h+1)*d_head), the
// layout o_proj expects. Requested probability rows are written to *params.probs with
// zeros after the query position. A row whose every key is masked attends to nothing:
// probabilities and output 0. Throws InputError for bad shapes, rows or mask spans.
void causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionParams& params, ThreadPool& pool);

namespace detail {
struct AttentionShape {
  int64_t n_head, n_kv_head, seq, d_head;
};
// prob_slot: [seq], index into prob rows or -1. Arguments already checked.
void causal_attention_cpu(const float* q, const float* k, const float* v, float* out,
                          const AttentionShape& shape, const AttentionParams& params,
                          std::span<const int64_t> prob_slot, ThreadPool& pool);
}  // namespace detail

}  // namespace ckv
