// Value-projected norms against a direct double-precision computation of ‖v_i W_h‖ that
// materialises P = V W_h (allowed here, never in the library).
// GCC 12 reports false -Wmaybe-uninitialized inside its AVX-512 intrinsics when inlining
// Eigen products (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "analysis/value_norms.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "random_blocks.h"

namespace ckv {
namespace {

// Reference: P_i = sum_j v[g, i, j] * wo[:, h*d + j], then its L1 and L2 norms, in double.
void reference(const Tensor& v, const Tensor& wo, int64_t n_head, int64_t h, int64_t i,
               double& l1, double& l2) {
  const int64_t n_kv = v.dim(0), seq = v.dim(1), d = v.dim(2), d_model = wo.dim(0);
  const int64_t g = h / (n_head / n_kv);
  l1 = 0, l2 = 0;
  for (int64_t c = 0; c < d_model; ++c) {
    double p = 0;
    for (int64_t j = 0; j < d; ++j)
      p += double{v.data()[(g * seq + i) * d + j]} * double{wo.data()[c * n_head * d + h * d + j]};
    l1 += std::abs(p);
    l2 += p * p;
  }
  l2 = std::sqrt(l2);
}

void expect_matches(const Tensor& v, const Tensor& wo, int64_t n_head,
                    const std::vector<int64_t>& heads, const ValueNorms& nu) {
  const int64_t seq = v.dim(1);
  ASSERT_EQ(nu.l1.shape(), (std::vector<int64_t>{static_cast<int64_t>(heads.size()), seq}));
  ASSERT_EQ(nu.l2.shape(), nu.l1.shape());
  for (size_t k = 0; k < heads.size(); ++k) {
    for (int64_t i = 0; i < seq; ++i) {
      double l1 = 0, l2 = 0;
      reference(v, wo, n_head, heads[k], i, l1, l2);
      // float32 products summed over d_head then d_model: relative error ~1e-6.
      EXPECT_NEAR(nu.l1.data()[k * seq + i], l1, 2e-5 * l1) << "head " << heads[k] << " row " << i;
      EXPECT_NEAR(nu.l2.data()[k * seq + i], l2, 2e-5 * l2) << "head " << heads[k] << " row " << i;
    }
  }
}

TEST(ValueNorms, MatchesDirectProjectionWithGqa) {
  const int64_t n_head = 6, n_kv = 2, seq = 37, d = 16, d_model = 48;
  const Tensor v = random_tensor({n_kv, seq, d}, 1);
  const Tensor wo = random_tensor({d_model, n_head * d}, 2, 0.3f);
  // A block smaller than seq and not dividing it exercises the tiles and the ragged tail.
  ValueNorms nu = value_norms(v, wo, n_head, {}, {.block = 8});
  expect_matches(v, wo, n_head, {0, 1, 2, 3, 4, 5}, nu);
}

TEST(ValueNorms, HeadSubsetAndThreadsGiveTheSameRows) {
  const int64_t n_head = 4, n_kv = 1, seq = 20, d = 8, d_model = 24;
  const Tensor v = random_tensor({n_kv, seq, d}, 3, 2.0f);
  const Tensor wo = random_tensor({d_model, n_head * d}, 4);
  ThreadPool pool(2);
  ValueNorms nu = value_norms(v, wo, n_head, {3, 1}, {.block = 128}, &pool);
  expect_matches(v, wo, n_head, {3, 1}, nu);
}

TEST(ValueNorms, OnlyWhatIsAsked) {
  const Tensor v = random_tensor({1, 5, 4}, 5);
  const Tensor wo = random_tensor({8, 8}, 6);
  ValueNorms nu = value_norms(v, wo, 2, {}, {.l1 = true, .l2 = false});
  EXPECT_EQ(nu.l1.numel(), 10);
  EXPECT_TRUE(nu.l2.empty());
}

TEST(ValueNorms, RejectsBadShapesAndHeads) {
  const Tensor v = random_tensor({2, 5, 4}, 7);
  const Tensor wo = random_tensor({8, 16}, 8);
  EXPECT_THROW(value_norms(v, wo, 3, {}), InputError);       // 3 heads over 2 KV heads
  EXPECT_THROW(value_norms(v, wo, 2, {}), InputError);       // o_proj width 16 != 2*4
  EXPECT_THROW(value_norms(v, wo, 4, {4}), InputError);      // head out of range
  EXPECT_NO_THROW(value_norms(v, wo, 4, {3}));
}

}  // namespace
}  // namespace ckv
