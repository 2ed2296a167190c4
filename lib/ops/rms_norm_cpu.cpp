#include "core/thread_pool.h"
#include "ops/reduce.h"
#include "ops/rms_norm.h"

namespace ckv::detail {

void rms_norm_cpu(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps,
                  ThreadPool& pool) {
  constexpr int64_t kRows = 64;  // rows per task
  const ConstVectorMap weight(w, cols);
  pool.parallel_for((rows + kRows - 1) / kRows, [&](int64_t b) {
    for (int64_t r = b * kRows; r < std::min(rows, (b + 1) * kRows); ++r) {
      const ConstVectorMap in(x + r * cols, cols);  // [cols]
      VectorMap out(y + r * cols, cols);            // [cols]
      // The mean of squares is accumulated in fp32 like the reference (torch .pow(2).mean()).
      const float mean_square =
          sum_squares_fixed_order(x + r * cols, cols) / static_cast<float>(cols);
      const float inv_rms = 1.0f / std::sqrt(mean_square + eps);
      out = (in * inv_rms).cwiseProduct(weight);
    }
  });
}

}  // namespace ckv::detail
