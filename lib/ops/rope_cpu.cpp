#include "core/thread_pool.h"
#include "ops/rope.h"

namespace ckv::detail {

void apply_rope_cpu(float* x, int64_t heads, int64_t seq, int64_t half, const RopeTable& table,
                    int64_t first_position, ThreadPool& pool, int64_t row_width) {
  if (row_width == 0) row_width = 2 * half;
  using Array = Eigen::Map<Eigen::ArrayXf>;
  using ConstArray = Eigen::Map<const Eigen::ArrayXf>;
  constexpr int64_t kRows = 64;  // rows per task, counted over all heads' heads * seq rows
  const int64_t total = heads * seq;
  pool.parallel_for((total + kRows - 1) / kRows, [&](int64_t task) {
    thread_local Eigen::ArrayXf lo_old;
    for (int64_t i = task * kRows; i < std::min(total, (task + 1) * kRows); ++i) {
      const int64_t p = i % seq;
      float* row = x + i * row_width;  // [d_head] of head i / seq, position p
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
