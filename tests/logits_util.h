#pragma once
// Helpers of the tests that compare forward passes (test_kv_cache.cpp, test_cache_eval.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace ckv::test {

// n token ids fixed by seed, skipping the lowest 17 (the real model's special tokens).
inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& id : t) id = static_cast<int32_t>(17 + rng() % static_cast<uint64_t>(vocab - 17));
  return t;
}

// Largest |a - b| relative to b's range (max - min).
inline double relative_error(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  float lo = b[0], hi = b[0];
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, double{std::abs(a[i] - b[i])});
    lo = std::min(lo, b[i]);
    hi = std::max(hi, b[i]);
  }
  return worst / std::max(1e-6, double{hi - lo});
}

}  // namespace ckv::test
