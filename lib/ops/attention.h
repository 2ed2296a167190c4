#pragma once
// Causal multi-head attention with grouped KV heads, computed in blocks of query rows so
// that memory stays O(block * seq) per thread plus one transposed copy of K per call, never
// n x n x heads. Softmax in fp32. Query head h reads KV head h / (n_head / n_kv_head);
// scores are scaled by 1/sqrt(d_head) unless a scale is given (Gemma 3's
// query_pre_attn_scalar^-0.5). With a sliding window W, a query at position i sees the keys at
// positions (i - W, i] (HF's sliding_window: W keys, itself included) and the work per row is
// O(W), not O(i). The CPU kernel (attention_cpu.cpp) gives each row
// the same bits at any query block size and thread count.
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "ops/context.h"

namespace ckv {

class ThreadPool;

// An additive term on the attention logits of KV head `kv_head`: for every query row in
// [q_begin, q_end) and every key in `keys`, logit += value, for each query head of that KV
// head. The default value -inf evicts those keys for those queries (docs/MATH.md §2). Keys after
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
  int64_t window = 0;                       // > 0: sliding window of keys per query row
  float scale = 0.0f;                       // logit scale; 0: 1/sqrt(d_head)
  std::span<const AttentionMaskSpan> mask;  // additive logit mask, may be empty
  std::span<const int64_t> prob_rows;       // [r] query rows whose probabilities are kept
  Tensor* probs = nullptr;                  // [n_head, r, seq], set when prob_rows is non-empty
};

// q: [n_head, seq, d_head], k, v: [n_kv_head, seq, d_head] (post-RoPE);
// out: [seq, n_head*d_head] (resized), head h in columns [h*d_head, (h+1)*d_head), the
// layout o_proj expects. Requested probability rows are written to *params.probs with
// zeros after the query position. A row whose every key is masked attends to nothing:
// probabilities and output 0. Throws InputError for bad shapes, rows or mask spans.
// On CUDA, probability rows, a window and a scale are not supported (UnsupportedError).
void causal_attention(ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                      const AttentionParams& params);

// The cached keys and values of one KV head: `count` entries in increasing original
// position, post-RoPE key rows and value rows [count, d_head] (row stride d_head). A cache
// that evicted entries holds fewer than the positions seen (model/kv_cache.h).
struct KvHeadView {
  const float* k = nullptr;
  const float* v = nullptr;
  const int64_t* positions = nullptr;
  int64_t count = 0;
};

// Attention of new query rows over a KV cache (decoding, and prefill into a cache).
// q: [n_head, rows, d_head] post-RoPE, row i at position q_positions[i] (increasing);
// heads: [n_kv_head] views that already hold the new rows' own keys and values. Query head h
// reads KV head h / (n_head / n_kv_head) and attends to its entries at positions <= its own
// (causal over what the cache still holds), and with a window (> 0) only to those at positions
// (p - window, p] for a row at p; scale as AttentionParams'. out: [rows, n_head*d_head] (resized), as
// causal_attention's. The arithmetic is causal_attention's, so a cache that holds every
// position gives its results bit for bit, except for decoding (fewer rows than a logits
// tile, 8, with d_head a whole number of vectors), whose logits read the cached keys in place
// and sum their products in another order (within float32 rounding).
// Throws InputError for bad shapes or a row with no cached entry at or before it. CPU only:
// the KV cache lives in host memory (UnsupportedError on a CUDA context).
void cached_attention(ExecContext& ctx, const Tensor& q, std::span<const int64_t> q_positions,
                      std::span<const KvHeadView> heads, Tensor& out, int64_t query_block = 64,
                      int64_t window = 0, float scale = 0.0f);

namespace detail {
struct AttentionShape {
  int64_t n_head, n_kv_head, seq, d_head;
};
// prob_slot: [seq], index into prob rows or -1. Arguments already checked.
void causal_attention_cpu(const float* q, const float* k, const float* v, float* out,
                          const AttentionShape& shape, const AttentionParams& params,
                          std::span<const int64_t> prob_slot, ThreadPool& pool);
// visible: [rows] per query row and KV head, row-major [rows, n_kv_head]: how many of the
// head's entries (a prefix) the row sees; first: the same layout, or empty: the first entry it
// sees (a window). scale: the logit scale. Arguments already checked.
void cached_attention_cpu(const float* q, int64_t n_head, int64_t rows, int64_t d_head,
                          std::span<const KvHeadView> heads, std::span<const int64_t> visible,
                          std::span<const int64_t> first, float scale, float* out, int64_t query_block,
                          ThreadPool& pool);
}  // namespace detail

}  // namespace ckv
