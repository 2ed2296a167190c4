#include "ops/rope.h"

namespace ckv::detail {

void apply_rope_cpu(float* x, int64_t heads, int64_t seq, int64_t half, const RopeTable& table,
                    int64_t first_position) {
  using Array = Eigen::Map<Eigen::ArrayXf>;
  using ConstArray = Eigen::Map<const Eigen::ArrayXf>;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p = 0; p < seq; ++p) {
      float* row = x + (h * seq + p) * 2 * half;  // [d_head]
      Array lo(row, half), hi(row + half, half);
      const int64_t angle_row = (first_position + p) * half;
      const ConstArray c(table.cos.data() + angle_row, half), s(table.sin.data() + angle_row, half);
      const Eigen::ArrayXf lo_old = lo;
      lo = lo * c - hi * s;
      hi = hi * c + lo_old * s;
    }
}

}  // namespace ckv::detail
