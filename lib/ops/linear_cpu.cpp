#include "core/thread_pool.h"
#include "ops/linear.h"

namespace ckv::detail {

namespace {
// Output columns per task: about out/16, a multiple of 16, at least 32. It depends on the
// shape only, never on the thread count, so every column is computed by the same Eigen GEMM
// call whatever the pool size: results are bit-identical across --threads. Wide chunks
// keep the repeated packing of x (once per chunk) small next to the multiply.
int64_t column_chunk(int64_t out) {
  const int64_t per_task = (out + 15) / 16;
  return std::max<int64_t>(32, (per_task + 15) / 16 * 16);
}
}  // namespace

void linear_cpu(const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
                int64_t y_stride, int64_t rows, int64_t in, int64_t out, ThreadPool& pool) {
  using Stride = Eigen::OuterStride<>;
  const Eigen::Map<const RowMatrix, 0, Stride> input(x, rows, in, Stride(x_stride));  // [rows, in]
  const int64_t chunk = column_chunk(out);
  const int64_t chunks = (out + chunk - 1) / chunk;
  pool.parallel_for(chunks, [&](int64_t c) {
    const int64_t begin = c * chunk, width = std::min(chunk, out - begin);
    const ConstMatrixMap w_chunk(w + begin * in, width, in);  // [width, in]
    Eigen::Map<RowMatrix, 0, Stride> y_chunk(y + begin, rows, width, Stride(y_stride));
    y_chunk.noalias() = input * w_chunk.transpose();
    if (bias != nullptr)
      y_chunk.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias + begin, width);
  });
}

}  // namespace ckv::detail
