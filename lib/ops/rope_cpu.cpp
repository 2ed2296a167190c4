#include "core/thread_pool.h"
#include "ops/rope.h"

namespace ckv::detail {

void apply_rope_cpu(float* x, int64_t heads, int64_t seq, int64_t half, const RopeTable& table,
                    int64_t first_position, ThreadPool& pool) {
  using Array = Eigen::Map<Eigen::ArrayXf>;
  using ConstArray = Eigen::Map<const Eigen::ArrayXf>;
  constexpr int64_t kRows = 64;  // rows per task
  const int64_t blocks = (seq + kRows - 1) / kRows;
  pool.parallel_for(heads * blocks, [&](int64_t task) {
    const int64_t h = task / blocks, p0 = task % blocks * kRows, p1 = std::min(seq, p0 + kRows);
    thread_local Eigen::ArrayXf lo_old;
    for (int64_t p = p0; p < p1; ++p) {
      float* row = x + (h * seq + p) * 2 * half;  // [d_head]
      Array lo(row, half), hi(row + half, half);
      const int64_t angle_row = (first_position + p) * half;
      const ConstArray c(table.cos.data() + angle_row, half), s(table.sin.data() + angle_row, half);
      lo_old = lo;
      lo = lo * c - hi * s;
      hi = hi * c + lo_old * s;
    }
  });
}

}  // namespace ckv::detail
