#include "ops/rope.h"

namespace ckv::detail {

void apply_rope_cpu(float* x, int64_t heads, int64_t seq, int64_t half, const RopeTable& table) {
  using Array = Eigen::Map<Eigen::ArrayXf>;
  using ConstArray = Eigen::Map<const Eigen::ArrayXf>;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < seq; ++p) {
      float* row = x + (h * seq + p) * 2 * half;  // [d_head]
      Array lo(row, half), hi(row + half, half);
      const ConstArray c(table.cos.data() + p * half, half), s(table.sin.data() + p * half, half);
      const Eigen::ArrayXf lo_old = lo;
      lo = lo * c - hi * s;
      hi = hi * c + lo_old * s;
    }
}

}  // namespace ckv::detail
