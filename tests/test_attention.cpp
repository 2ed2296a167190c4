// Blocked causal attention against a direct softmax in double, with GQA, recorded rows,
// masks, block sizes and thread counts; the kernel's tile paths (head widths that are and are
// not whole vectors, rows and keys that do not fill a tile) and attention over a KV cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/attention.h"
#include "random_blocks.h"

namespace ckv {
namespace {

constexpr int64_t kHeads = 6, kKvHeads = 2, kSeq = 45, kDHead = 8;

struct Qkv {
  Tensor q = random_tensor({kHeads, kSeq, kDHead}, 1);
  Tensor k = random_tensor({kKvHeads, kSeq, kDHead}, 2);
  Tensor v = random_tensor({kKvHeads, kSeq, kDHead}, 3);
};

// Direct attention of one query row over the keys kept(j) in double: probabilities [seq]
// and output [d_head]. Keys the predicate drops are physically absent.
template <typename Kept>
void reference_row(const Qkv& t, int64_t h, int64_t row, Kept kept, std::vector<double>& probs,
                   std::vector<double>& out) {
  const int64_t g = h / (kHeads / kKvHeads);
  probs.assign(kSeq, 0.0);
  out.assign(kDHead, 0.0);
  double max = -INFINITY, sum = 0;
  for (int64_t j = 0; j <= row; ++j) {
    if (!kept(j)) continue;
    double s = 0;
    for (int64_t d = 0; d < kDHead; ++d)
      s += double{t.q.data()[(h * kSeq + row) * kDHead + d]} *
           t.k.data()[(g * kSeq + j) * kDHead + d];
    probs[static_cast<size_t>(j)] = s / std::sqrt(double{kDHead});
    max = std::max(max, probs[static_cast<size_t>(j)]);
  }
  for (int64_t j = 0; j <= row; ++j)
    if (kept(j))
      sum += probs[static_cast<size_t>(j)] = std::exp(probs[static_cast<size_t>(j)] - max);
  for (int64_t j = 0; j < kSeq; ++j) {
    double& p = probs[static_cast<size_t>(j)];
    p = (j <= row && kept(j)) ? p / sum : 0.0;
    for (int64_t d = 0; d < kDHead; ++d)
      out[static_cast<size_t>(d)] += p * t.v.data()[(g * kSeq + j) * kDHead + d];
  }
}

TEST(Attention, MatchesDirectSoftmaxWithGqa) {
  const Qkv t;
  ExecContext pool({.threads = 2});
  Tensor out, probs;
  const std::vector<int64_t> rows{44, 0, 17, 16};
  AttentionParams params;
  params.query_block = 16;
  params.prob_rows = rows;
  params.probs = &probs;
  causal_attention(pool, t.q, t.k, t.v, out, params);
  ASSERT_EQ(probs.shape(), (std::vector<int64_t>{kHeads, 4, kSeq}));
  std::vector<double> ref_p, ref_o;
  double worst_out = 0, worst_p = 0;
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t row = 0; row < kSeq; ++row) {
      reference_row(
          t, h, row, [](int64_t) { return true; }, ref_p, ref_o);
      for (int64_t d = 0; d < kDHead; ++d)
        worst_out =
            std::max(worst_out, std::abs(out.data()[row * kHeads * kDHead + h * kDHead + d] -
                                         ref_o[static_cast<size_t>(d)]));
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i] == row)
          for (int64_t j = 0; j < kSeq; ++j)
            worst_p = std::max(worst_p,
                               std::abs(probs.data()[(h * 4 + static_cast<int64_t>(i)) * kSeq + j] -
                                        ref_p[static_cast<size_t>(j)]));
    }
  EXPECT_LT(worst_out, 1e-5);
  EXPECT_LT(worst_p, 1e-6);
}

TEST(Attention, IndependentOfBlockSizeAndThreads) {
  const Qkv t;
  ExecContext one({.threads = 1}), three({.threads = 3});
  Tensor base, other;
  AttentionParams params;
  params.query_block = 64;
  causal_attention(one, t.q, t.k, t.v, base, params);
  for (int64_t block : {1, 7, 16, 45}) {
    params.query_block = block;
    causal_attention(three, t.q, t.k, t.v, other, params);
    double worst = 0;
    for (int64_t i = 0; i < base.numel(); ++i)
      worst = std::max(worst, double{std::abs(base.data()[i] - other.data()[i])});
    EXPECT_LT(worst, 1e-6) << "block " << block;
  }
  // Same block size, different pools: the same tasks, so bit-identical.
  params.query_block = 16;
  causal_attention(one, t.q, t.k, t.v, base, params);
  causal_attention(three, t.q, t.k, t.v, other, params);
  EXPECT_EQ(base.storage(), other.storage());
}

TEST(Attention, MaskEqualsPhysicallyRemovedKeys) {
  const Qkv t;
  ExecContext pool({.threads = 2});
  // KV head 1, rows [20, 40): evict keys {0, 3, 21, 30, 39}; KV head 0 untouched.
  const std::set<int64_t> evicted{0, 3, 21, 30, 39};
  std::vector<AttentionMaskSpan> mask{{1, 20, 40, {evicted.begin(), evicted.end()}}};
  Tensor out, probs;
  std::vector<int64_t> rows(kSeq);
  for (int64_t i = 0; i < kSeq; ++i) rows[static_cast<size_t>(i)] = i;
  AttentionParams params;
  params.query_block = 8;
  params.mask = mask;
  params.prob_rows = rows;
  params.probs = &probs;
  causal_attention(pool, t.q, t.k, t.v, out, params);
  std::vector<double> ref_p, ref_o;
  double worst_out = 0, worst_p = 0;
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t row = 0; row < kSeq; ++row) {
      const bool masked = h / 3 == 1 && row >= 20 && row < 40;
      reference_row(
          t, h, row, [&](int64_t j) { return !masked || !evicted.contains(j); }, ref_p, ref_o);
      for (int64_t d = 0; d < kDHead; ++d)
        worst_out =
            std::max(worst_out, std::abs(out.data()[row * kHeads * kDHead + h * kDHead + d] -
                                         ref_o[static_cast<size_t>(d)]));
      for (int64_t j = 0; j < kSeq; ++j)
        worst_p = std::max(worst_p, std::abs(probs.data()[(h * kSeq + row) * kSeq + j] -
                                             ref_p[static_cast<size_t>(j)]));
    }
  EXPECT_LT(worst_out, 1e-5);
  EXPECT_LT(worst_p, 1e-6);
}

TEST(Attention, FullyMaskedRowAttendsToNothingAndBadInputThrows) {
  const Qkv t;
  ExecContext pool({.threads = 1});
  std::vector<AttentionMaskSpan> mask{{0, 2, 3, {0, 1, 2}}};  // row 2 loses all its keys
  Tensor out, probs;
  const std::vector<int64_t> rows{2};
  AttentionParams params;
  params.mask = mask;
  params.prob_rows = rows;
  params.probs = &probs;
  causal_attention(pool, t.q, t.k, t.v, out, params);
  for (int64_t d = 0; d < kDHead; ++d) EXPECT_EQ(out.data()[2 * kHeads * kDHead + d], 0.0f);
  for (int64_t j = 0; j < kSeq; ++j) EXPECT_EQ(probs.data()[j], 0.0f);
  EXPECT_TRUE(std::isfinite(out.data()[3 * kHeads * kDHead]));

  std::vector<AttentionMaskSpan> bad_key{{0, 0, 5, {kSeq}}}, bad_head{{2, 0, 5, {1}}};
  params.mask = bad_key;
  EXPECT_THROW(causal_attention(pool, t.q, t.k, t.v, out, params), InputError);
  params.mask = bad_head;
  EXPECT_THROW(causal_attention(pool, t.q, t.k, t.v, out, params), InputError);
  const std::vector<int64_t> bad_rows{kSeq};
  params.mask = {};
  params.prob_rows = bad_rows;
  EXPECT_THROW(causal_attention(pool, t.q, t.k, t.v, out, params), InputError);
}

// The kernel at head widths that exercise each of its column paths (vectors of 16 floats
// with AVX-512: 8 is the scalar tail alone, 24 one vector and a tail, 64 the 4-vector tile,
// 80 both tiles) and a length (75) that fills neither a logits tile (8 rows x 32 keys) nor a
// value tile, against attention in double.
TEST(AttentionKernel, EveryTilePathMatchesDirectSoftmax) {
  constexpr int64_t heads = 4, kv_heads = 2, seq = 75;
  for (int64_t d : {8, 24, 64, 80}) {
    const Tensor q = random_tensor({heads, seq, d}, 11), k = random_tensor({kv_heads, seq, d}, 12),
                 v = random_tensor({kv_heads, seq, d}, 13);
    ExecContext two({.threads = 2});
    Tensor out;
    AttentionParams params;
    params.query_block = 64;
    causal_attention(two, q, k, v, out, params);
    double worst = 0;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t row = 0; row < seq; ++row) {
        const int64_t g = h / (heads / kv_heads);
        std::vector<double> logit(static_cast<size_t>(row + 1));
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= row; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double{q.data()[(h * seq + row) * d + c]} * k.data()[(g * seq + j) * d + c];
          logit[static_cast<size_t>(j)] = dot / std::sqrt(double(d));
          max = std::max(max, logit[static_cast<size_t>(j)]);
        }
        for (double& x : logit) sum += x = std::exp(x - max);
        for (int64_t c = 0; c < d; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= row; ++j)
            o += logit[static_cast<size_t>(j)] / sum * v.data()[(g * seq + j) * d + c];
          worst = std::max(worst, std::abs(out.data()[row * heads * d + h * d + c] - o));
        }
      }
    EXPECT_LT(worst, 2e-6) << "d_head " << d;
    // A row's arithmetic depends on its position only: any block size, any pool, same bits.
    ExecContext one({.threads = 1});
    for (int64_t block : {1, 5, 16, 75}) {
      Tensor other;
      params.query_block = block;
      causal_attention(one, q, k, v, other, params);
      EXPECT_EQ(out.storage(), other.storage()) << "d_head " << d << ", block " << block;
    }
  }
}

// Prefill into a cache that holds every position is causal attention, bit for bit; a cache
// that evicted entries equals causal attention with those keys masked, for the rows after
// them.
TEST(AttentionKernel, CachedEqualsCausal) {
  const Qkv t;
  ExecContext pool({.threads = 2});
  Tensor want, got;
  AttentionParams params;
  causal_attention(pool, t.q, t.k, t.v, want, params);
  std::vector<int64_t> positions(kSeq);
  for (int64_t i = 0; i < kSeq; ++i) positions[static_cast<size_t>(i)] = i;
  std::vector<KvHeadView> heads;
  for (int64_t g = 0; g < kKvHeads; ++g)
    heads.push_back({t.k.data() + g * kSeq * kDHead, t.v.data() + g * kSeq * kDHead, positions.data(), kSeq});
  cached_attention(pool, t.q, positions, heads, got, 16);
  EXPECT_EQ(want.storage(), got.storage());

  // KV head 1 keeps positions other than {0, 3, 21, 30}; queries are rows 31..44.
  const std::set<int64_t> evicted{0, 3, 21, 30};
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < kSeq; ++i)
    if (!evicted.contains(i)) kept.push_back(i);
  Tensor k1({static_cast<int64_t>(kept.size()), kDHead}), v1(k1.shape());
  for (size_t i = 0; i < kept.size(); ++i)
    for (int64_t c = 0; c < kDHead; ++c) {
      k1.data()[static_cast<int64_t>(i) * kDHead + c] = t.k.data()[(kSeq + kept[i]) * kDHead + c];
      v1.data()[static_cast<int64_t>(i) * kDHead + c] = t.v.data()[(kSeq + kept[i]) * kDHead + c];
    }
  heads[1] = {k1.data(), v1.data(), kept.data(), static_cast<int64_t>(kept.size())};
  constexpr int64_t first = 31, rows = kSeq - first;
  Tensor q_tail({kHeads, rows, kDHead});
  for (int64_t h = 0; h < kHeads; ++h)
    std::copy_n(t.q.data() + (h * kSeq + first) * kDHead, rows * kDHead, q_tail.data() + h * rows * kDHead);
  cached_attention(pool, q_tail, std::span(positions).subspan(first), heads, got, 4);
  std::vector<AttentionMaskSpan> mask{{1, first, kSeq, {evicted.begin(), evicted.end()}}};
  params.mask = mask;
  causal_attention(pool, t.q, t.k, t.v, want, params);
  double worst = 0;
  for (int64_t i = 0; i < rows * kHeads * kDHead; ++i)
    worst = std::max(worst, double{std::abs(got.data()[i] - want.data()[(first * kHeads * kDHead) + i])});
  EXPECT_LT(worst, 1e-6);
}

// Decoding (fewer rows than a logits tile, d_head a whole number of vectors) reads the keys
// in place with another order of summation: within float32 rounding of causal attention.
TEST(AttentionKernel, DecodingRowsMatchCausal) {
  constexpr int64_t heads = 4, kv_heads = 2, seq = 70, d = 64;
  const Tensor q = random_tensor({heads, seq, d}, 21), k = random_tensor({kv_heads, seq, d}, 22),
               v = random_tensor({kv_heads, seq, d}, 23);
  ExecContext pool({.threads = 2});
  Tensor want, got;
  causal_attention(pool, q, k, v, want, AttentionParams{});
  std::vector<int64_t> positions(seq);
  for (int64_t i = 0; i < seq; ++i) positions[static_cast<size_t>(i)] = i;
  std::vector<KvHeadView> views;
  for (int64_t g = 0; g < kv_heads; ++g)
    views.push_back({k.data() + g * seq * d, v.data() + g * seq * d, positions.data(), seq});
  for (const int64_t first : {int64_t{0}, int64_t{33}, int64_t{67}}) {  // 1 row at 0, 3 rows at 67
    const int64_t rows = first == 67 ? 3 : 1;
    Tensor q_rows({heads, rows, d});
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(q.data() + (h * seq + first) * d, rows * d, q_rows.data() + h * rows * d);
    cached_attention(pool, q_rows, std::span(positions).subspan(static_cast<size_t>(first), static_cast<size_t>(rows)),
                     views, got);
    double worst = 0;
    for (int64_t i = 0; i < rows * heads * d; ++i)
      worst = std::max(worst, double{std::abs(got.data()[i] - want.data()[first * heads * d + i])});
    EXPECT_LT(worst, 1e-6) << "rows from " << first;
    // Its order of summation differs: some bits change once a row has many keys.
    if (first > 0) {
      EXPECT_GT(worst, 0.0) << "the direct path was not taken";
    }
  }
}

}  // namespace
}  // namespace ckv

namespace ckv {
namespace {

// A sliding window of W keys: row i attends to keys (i - W, i] (HF's sliding_window), against
// the direct softmax in double over those keys, with a logit scale, recorded rows (zeros
// outside the window) and a mask span on top; the result does not depend on the query block
// or the thread count, and equals the full kernel with the keys outside the window masked,
// bit for bit (the windowed kernel starts at a whole logits tile, so every key keeps its lane).
TEST(AttentionWindow, MatchesDirectSoftmaxOverTheWindow) {
  const Qkv t;
  for (const int64_t window : {int64_t{1}, int64_t{5}, int64_t{17}, int64_t{44}}) {
    SCOPED_TRACE("window " + std::to_string(window));
    ExecContext pool({.threads = 2});
    Tensor out, probs;
    const std::vector<int64_t> rows{44, 0, 17, 16, 33};
    AttentionParams params;
    params.query_block = 16;
    params.window = window;
    params.prob_rows = rows;
    params.probs = &probs;
    causal_attention(pool, t.q, t.k, t.v, out, params);
    std::vector<double> ref_p, ref_o;
    double worst_out = 0, worst_p = 0;
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t row = 0; row < kSeq; ++row) {
        reference_row(t, h, row, [&](int64_t j) { return j > row - window; }, ref_p, ref_o);
        for (int64_t d = 0; d < kDHead; ++d)
          worst_out = std::max(worst_out, std::abs(out.data()[row * kHeads * kDHead + h * kDHead + d] -
                                                   ref_o[static_cast<size_t>(d)]));
        const auto slot = std::find(rows.begin(), rows.end(), row);
        if (slot == rows.end()) continue;
        for (int64_t j = 0; j < kSeq; ++j)
          worst_p = std::max(worst_p, std::abs(probs.data()[(h * 5 + (slot - rows.begin())) * kSeq + j] -
                                               ref_p[static_cast<size_t>(j)]));
      }
    EXPECT_LT(worst_out, 1e-5);
    EXPECT_LT(worst_p, 1e-6);

    // Other blocks and threads: the same bits.
    ExecContext three({.threads = 3});
    for (const int64_t block : {int64_t{1}, int64_t{7}, int64_t{64}}) {
      Tensor other, other_probs;
      AttentionParams p2 = params;
      p2.query_block = block;
      p2.probs = &other_probs;
      causal_attention(three, t.q, t.k, t.v, other, p2);
      EXPECT_EQ(out.storage(), other.storage()) << "block " << block;
      EXPECT_EQ(probs.storage(), other_probs.storage()) << "block " << block;
    }
    // The full kernel with the keys before each row's window masked.
    std::vector<AttentionMaskSpan> mask;
    for (int64_t g = 0; g < kKvHeads; ++g)
      for (int64_t row = window; row < kSeq; ++row) {
        AttentionMaskSpan span{.kv_head = g, .q_begin = row, .q_end = row + 1, .keys = {}};
        for (int64_t j = 0; j <= row - window; ++j) span.keys.push_back(j);
        mask.push_back(span);
      }
    AttentionParams masked;
    masked.query_block = 16;
    masked.mask = mask;
    Tensor want;
    causal_attention(pool, t.q, t.k, t.v, want, masked);
    EXPECT_EQ(out.storage(), want.storage());
  }
}

TEST(AttentionWindow, ScaleMaskAndCachedAttention) {
  const Qkv t;
  ExecContext pool({.threads = 2});
  constexpr int64_t window = 9;
  constexpr float scale = 0.2f;  // not 1/sqrt(8)
  // A scale of s on q.k is the default scale on q * s * sqrt(d_head).
  Tensor q_scaled = t.q;
  for (float& x : q_scaled.storage()) x *= scale * std::sqrt(static_cast<float>(kDHead));
  AttentionParams a;
  a.window = window;
  a.scale = scale;
  AttentionParams b;
  b.window = window;
  Tensor got, want;
  causal_attention(pool, t.q, t.k, t.v, got, a);
  causal_attention(pool, q_scaled, t.k, t.v, want, b);
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, double{std::abs(got.data()[i] - want.data()[i])});
  EXPECT_LT(worst, 1e-5);

  // A mask span inside and outside the window: keys outside stay excluded.
  std::vector<AttentionMaskSpan> mask{{.kv_head = 1, .q_begin = 20, .q_end = kSeq, .keys = {2, 15, 30, 40}}};
  a.mask = mask;
  causal_attention(pool, t.q, t.k, t.v, got, a);
  std::vector<double> ref_p, ref_o;
  Qkv scaled_t;
  scaled_t.q = q_scaled;
  double worst_mask = 0;
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t row = 0; row < kSeq; ++row) {
      const bool masked_head = h / (kHeads / kKvHeads) == 1 && row >= 20;
      reference_row(scaled_t, h, row, [&](int64_t j) {
        return j > row - window && !(masked_head && (j == 2 || j == 15 || j == 30 || j == 40));
      }, ref_p, ref_o);
      for (int64_t d = 0; d < kDHead; ++d)
        worst_mask = std::max(worst_mask, std::abs(got.data()[row * kHeads * kDHead + h * kDHead + d] -
                                                   ref_o[static_cast<size_t>(d)]));
    }
  EXPECT_LT(worst_mask, 1e-5);

  // Over a cache that holds every position: the windowed causal kernel bit for bit; over one
  // that holds only the last `window` positions of each row's reach (rows 30..44 from 22 on):
  // the same within rounding.
  a.mask = {};
  causal_attention(pool, t.q, t.k, t.v, want, a);
  std::vector<int64_t> positions(kSeq);
  for (int64_t i = 0; i < kSeq; ++i) positions[static_cast<size_t>(i)] = i;
  std::vector<KvHeadView> heads;
  for (int64_t g = 0; g < kKvHeads; ++g)
    heads.push_back({t.k.data() + g * kSeq * kDHead, t.v.data() + g * kSeq * kDHead, positions.data(), kSeq});
  cached_attention(pool, t.q, positions, heads, got, 16, window, scale);
  EXPECT_EQ(want.storage(), got.storage());
  constexpr int64_t first = 30, rows = kSeq - first, from = first - window + 1;
  for (int64_t g = 0; g < kKvHeads; ++g)
    heads[static_cast<size_t>(g)] = {t.k.data() + (g * kSeq + from) * kDHead, t.v.data() + (g * kSeq + from) * kDHead,
                                     positions.data() + from, kSeq - from};
  Tensor q_tail({kHeads, rows, kDHead});
  for (int64_t h = 0; h < kHeads; ++h)
    std::copy_n(t.q.data() + (h * kSeq + first) * kDHead, rows * kDHead, q_tail.data() + h * rows * kDHead);
  for (const int64_t block : {int64_t{1}, int64_t{4}}) {
    cached_attention(pool, q_tail, std::span(positions).subspan(first), heads, got, block, window, scale);
    double w = 0;
    for (int64_t i = 0; i < rows * kHeads * kDHead; ++i)
      w = std::max(w, double{std::abs(got.data()[i] - want.data()[first * kHeads * kDHead + i])});
    EXPECT_LT(w, 1e-6) << "block " << block;
  }
  AttentionParams bad;
  bad.window = -1;
  EXPECT_THROW(causal_attention(pool, t.q, t.k, t.v, got, bad), InputError);
}

}  // namespace
}  // namespace ckv
