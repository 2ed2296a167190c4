#include "core/thread_pool.h"
#include "ops/linear.h"

namespace ckv::detail {

// Output columns per task: about out/16, a multiple of 16, at least 32. It depends on the
// shape only, never on the thread count, so every column is computed by the same Eigen GEMM
// call whatever the pool size: results are bit-identical across --threads. Wide chunks
// keep the repeated packing of x (once per chunk) small next to the multiply; the cap keeps
// a converted tile (thread-local, [chunk, in] float32) within 16 MiB, which only narrows
// the lm_head of large vocabularies.
int64_t linear_column_chunk(int64_t out, int64_t in) {
  constexpr int64_t kTileBytes = int64_t{16} << 20;
  const int64_t per_task = (out + 15) / 16;
  const int64_t chunk = std::max<int64_t>(32, (per_task + 15) / 16 * 16);
  const int64_t cap = std::max<int64_t>(32, kTileBytes / (4 * std::max<int64_t>(1, in)) / 16 * 16);
  return std::min(chunk, cap);
}

void linear_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias, float* y,
                int64_t y_stride, int64_t rows, ThreadPool& pool) {
  // A float32 weight read in place gains nothing from the fused kernel: Eigen's product
  // streams it faster (bench/bench_linear.cpp, docs/PERF.md "Decode").
  if (rows <= kLinearFewRows && w.f32_rows(0) == nullptr)
    linear_few_rows_cpu(x, x_stride, w, bias, y, y_stride, rows, pool);
  else
    linear_tiled_cpu(x, x_stride, w, bias, y, y_stride, rows, pool);
}

void linear_tiled_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias,
                      float* y, int64_t y_stride, int64_t rows, ThreadPool& pool) {
  using Stride = Eigen::OuterStride<>;
  const int64_t in = w.cols(), out = w.rows();
  const Eigen::Map<const RowMatrix, 0, Stride> input(x, rows, in, Stride(x_stride));  // [rows, in]
  const int64_t chunk = linear_column_chunk(out, in);
  const int64_t chunks = (out + chunk - 1) / chunk;
  pool.parallel_for(chunks, [&](int64_t c) {
    const int64_t begin = c * chunk, width = std::min(chunk, out - begin);
    const float* tile = w.f32_rows(begin);  // [width, in], in place when the weight is float32
    if (tile == nullptr) {
      thread_local std::vector<float> scratch;  // grows to the widest tile, then is reused
      scratch.resize(static_cast<size_t>(width * in));
      w.rows_f32(begin, width, scratch.data());
      tile = scratch.data();
    }
    const ConstMatrixMap w_chunk(tile, width, in);  // [width, in]
    Eigen::Map<RowMatrix, 0, Stride> y_chunk(y + begin, rows, width, Stride(y_stride));
    y_chunk.noalias() = input * w_chunk.transpose();
    if (bias != nullptr)
      y_chunk.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias + begin, width);
  });
}

}  // namespace ckv::detail
