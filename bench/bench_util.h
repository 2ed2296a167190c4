#pragma once
// What the Google Benchmark programs share: the thread count and random inputs.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

namespace ckv::bench {

// CKV_BENCH_THREADS (default 2): every engine's thread count.
inline int threads() {
  const char* t = std::getenv("CKV_BENCH_THREADS");
  return t != nullptr ? std::max(1, std::atoi(t)) : 2;
}

// n normal draws of standard deviation `scale`, from `seed`.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace ckv::bench
