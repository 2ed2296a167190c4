#include <cmath>

#include "core/thread_pool.h"
#include "ops/attention.h"
#include "ops/reduce.h"

namespace ckv::detail {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Adds the mask spans of KV head `kv_head` to scores [rows, keys] of query rows [r0, r1).
void add_mask(RowMatrix& scores, int64_t kv_head, int64_t r0, int64_t r1,
              std::span<const AttentionMaskSpan> mask) {
  for (const AttentionMaskSpan& span : mask) {
    if (span.kv_head != kv_head) continue;
    const int64_t begin = std::max(span.q_begin, r0), end = std::min(span.q_end, r1);
    for (int64_t row = begin; row < end; ++row)
      for (int64_t key : span.keys)
        if (key <= row) scores(row - r0, key) += span.value;  // later keys are causal -inf
  }
}

// Softmax of scores(i, 0..pos) in place, in fp32; entries after pos (up to `keys`) become 0.
// Rows start 64-byte aligned and only the causal prefix is summed, in a fixed order, so a
// row's probabilities do not depend on the block it is in or on the thread.
void softmax_causal_row(RowMatrix& scores, int64_t i, int64_t pos, int64_t keys) {
  auto valid = scores.row(i).head(pos + 1).array();
  const float max = valid.maxCoeff();
  if (max == kNegInf) {
    valid.setZero();  // every key masked: attend to nothing
  } else {
    valid = (valid - max).exp();
    valid /= sum_fixed_order(&scores(i, 0), pos + 1);
  }
  scores.row(i).segment(pos + 1, keys - pos - 1).setZero();
}

}  // namespace

void causal_attention_cpu(const float* q, const float* k, const float* v, float* out,
                          const AttentionShape& shape, const AttentionParams& params,
                          std::span<const int64_t> prob_slot, ThreadPool& pool) {
  // Plain copies, not structured bindings: lambdas below capture them (clang 14).
  const int64_t n_head = shape.n_head, n_kv_head = shape.n_kv_head;
  const int64_t seq = shape.seq, d_head = shape.d_head;
  const int64_t group = n_head / n_kv_head;
  const int64_t block = params.query_block;
  const int64_t n_blocks = (seq + block - 1) / block;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  const int64_t out_stride = n_head * d_head;
  const int64_t r_probs = static_cast<int64_t>(params.prob_rows.size());
  using Stride = Eigen::OuterStride<>;

  // Later blocks see more keys and cost more, so they are handed out first.
  pool.parallel_for(n_head * n_blocks, [&](int64_t task) {
    const int64_t b = n_blocks - 1 - task / n_head, h = task % n_head, g = h / group;
    const int64_t r0 = b * block, r1 = std::min(seq, r0 + block), rows = r1 - r0;
    const ConstMatrixMap q_block(q + (h * seq + r0) * d_head, rows, d_head);  // [rows, d_head]
    const ConstMatrixMap k_head(k + g * seq * d_head, r1, d_head);            // [r1, d_head]
    const ConstMatrixMap v_head(v + g * seq * d_head, r1, d_head);            // [r1, d_head]

    // [rows, >= r1]: one block of logits, then probabilities. The row length is padded to
    // 16 floats so every row starts aligned (see softmax_causal_row).
    thread_local RowMatrix scores;
    scores.resize(rows, (r1 + 15) / 16 * 16);
    auto logits = scores.leftCols(r1);  // [rows, r1]
    logits.noalias() = q_block * k_head.transpose();
    logits *= scale;
    if (!params.mask.empty()) add_mask(scores, g, r0, r1, params.mask);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t pos = r0 + i;
      softmax_causal_row(scores, i, pos, r1);
      if (r_probs > 0 && prob_slot[static_cast<size_t>(pos)] >= 0) {
        float* dst =
            params.probs->data() + (h * r_probs + prob_slot[static_cast<size_t>(pos)]) * seq;
        Eigen::Map<Eigen::RowVectorXf>(dst, seq).setZero();
        Eigen::Map<Eigen::RowVectorXf>(dst, pos + 1) = scores.row(i).head(pos + 1);
      }
    }
    Eigen::Map<RowMatrix, 0, Stride> out_block(out + r0 * out_stride + h * d_head, rows, d_head,
                                               Stride(out_stride));  // [rows, d_head]
    out_block.noalias() = logits * v_head;
  });
}

// One task per (query head, block of rows): the block's logits over the longest visible
// prefix of its KV head's entries (rows are in increasing position, so the last row sees the
// most), each row's softmax over its own prefix (softmax_causal_row, so the same arithmetic as
// causal_attention), then one GEMM with the values. Decoding (one row) is one task per head.
void cached_attention_cpu(const float* q, int64_t n_head, int64_t rows, int64_t d_head,
                          std::span<const KvHeadView> heads, std::span<const int64_t> visible,
                          float* out, int64_t query_block, ThreadPool& pool) {
  const auto n_kv_head = static_cast<int64_t>(heads.size());
  const int64_t group = n_head / n_kv_head;
  const int64_t n_blocks = (rows + query_block - 1) / query_block;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  const int64_t out_stride = n_head * d_head;
  using Stride = Eigen::OuterStride<>;
  pool.parallel_for(n_head * n_blocks, [&](int64_t task) {
    const int64_t b = n_blocks - 1 - task / n_head, h = task % n_head, g = h / group;
    const int64_t r0 = b * query_block, r1 = std::min(rows, r0 + query_block), n = r1 - r0;
    const KvHeadView& kv = heads[static_cast<size_t>(g)];
    const int64_t keys = visible[static_cast<size_t>((r1 - 1) * n_kv_head + g)];
    const ConstMatrixMap q_block(q + (h * rows + r0) * d_head, n, d_head);  // [n, d_head]
    const ConstMatrixMap k_head(kv.k, keys, d_head);                        // [keys, d_head]
    const ConstMatrixMap v_head(kv.v, keys, d_head);                        // [keys, d_head]
    thread_local RowMatrix scores;
    scores.resize(n, (keys + 15) / 16 * 16);
    auto logits = scores.leftCols(keys);  // [n, keys]
    logits.noalias() = q_block * k_head.transpose();
    logits *= scale;
    for (int64_t i = 0; i < n; ++i)
      softmax_causal_row(scores, i, visible[static_cast<size_t>((r0 + i) * n_kv_head + g)] - 1, keys);
    Eigen::Map<RowMatrix, 0, Stride> out_block(out + r0 * out_stride + h * d_head, n, d_head,
                                               Stride(out_stride));  // [n, d_head]
    out_block.noalias() = logits * v_head;
  });
}

}  // namespace ckv::detail
