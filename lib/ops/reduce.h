#pragma once
// A sum of squares in a fixed order. Eigen's reductions peel scalar elements until the data
// is aligned, so their rounding depends on where malloc put a buffer; this sums 16
// interleaved lanes and then the lanes, so the same inputs give the same bits at any address.
#include <cstdint>

namespace ckv::detail {

inline float sum_squares_fixed_order(const float* x, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j] * x[i + j];
  float total = 0;
  for (; i < n; ++i) total += x[i] * x[i];
  for (float lane : lanes) total += lane;
  return total;
}

}  // namespace ckv::detail
