// Blocked causal attention against a direct softmax in double, with GQA, recorded rows,
// masks, block sizes and thread counts.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ckv
