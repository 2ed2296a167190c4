#include "core/thread_pool.h"
#include "ops/mlp.h"

namespace ckv::detail {

void silu_mul_cpu(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  constexpr int64_t kChunk = 16384;  // elements per task
  pool.parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
    const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    // Computed in an aligned buffer: on unaligned memory Eigen evaluates the first elements
    // with scalar exp, whose rounding differs from the vector one, so results would depend
    // on the buffer's address.
    thread_local Eigen::ArrayXf g;
    g = Eigen::Map<const Eigen::ArrayXf>(gate + begin, len);
    // silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); exp(-g) = inf for very negative g gives 0.
    g = g / (1.0f + (-g).exp()) * Eigen::Map<const Eigen::ArrayXf>(up + begin, len);
    Eigen::Map<Eigen::ArrayXf>(gate + begin, len) = g;
  });
}

}  // namespace ckv::detail
