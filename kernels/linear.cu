// Linear layer y = x W^T + b (ops/linear.h) on a device-resident weight, through cuBLAS.
// A float32 weight is multiplied in place. Any other stored format is dequantised
// (dequantize.cu) in tiles of output columns, at most kTileFloats floats, into the context's
// workspace, and each tile multiplied by one SGEMM into its columns of y, all on the
// context's stream (the tile is reused only after the stream has run the GEMM that reads it).
// Layout: cuBLAS is column-major, so a row-major [rows, out] y with row stride y_stride is a
// column-major [out, rows] matrix with leading dimension y_stride, and y^T = W x^T:
// gemm(op(A) = T on the column-major [in, chunk] view of the tile, x as the column-major
// [in, rows] view). Precision: fp32 SGEMM in cuBLAS's default math mode (no TF32: the
// context never enables it); sums in cuBLAS's order, so results agree with the CPU's to float
// rounding. Bias: one elementwise kernel after the GEMMs, one thread per output element.
#include <algorithm>
#include <string>

#include "cublas_api.h"
#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kTileFloats = int64_t{16} << 20;  // 64 MiB of float32 tile
constexpr int kTileSlot = kWorkspaceSlots - 1;

// y: [rows, out] (row stride y_stride) += bias [out] broadcast over rows.
__global__ void add_bias_kernel(float* y, int64_t y_stride, const float* __restrict__ bias,
                                int64_t rows, int64_t out) {
  const int64_t n = rows * out;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x)
    y[(e / out) * y_stride + e % out] += bias[e % out];
}

int as_int(int64_t v, const char* what) {
  if (v < 0 || v > 0x7fffffff)
    detail::raise_device_error(std::string("cuda::linear: ") + what + " " + std::to_string(v) +
                               " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

}  // namespace

void linear(DeviceContext& context, const float* x, int64_t x_stride, int64_t rows,
            const DeviceWeight& w, const float* bias, float* y, int64_t y_stride) {
  if (rows == 0) return;
  const int m_rows = as_int(rows, "rows"), in = as_int(w.cols, "in"), out = as_int(w.rows, "out");
  const int ldx = as_int(x_stride, "x stride"), ldy = as_int(y_stride, "y stride");
  const float one = 1.0f, zero = 0.0f;
  if (w.dtype == DType::F32) {
    // The stored rows are the float32 [out, in] matrix itself.
    CKV_CUBLAS_CHECK(detail::cublas().sgemm(context.blas, CUBLAS_OP_T, CUBLAS_OP_N, out, m_rows, in,
                                            &one, reinterpret_cast<const float*>(w.data), in, x,
                                            ldx, &zero, y, ldy));
  } else {
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(w.rows, kTileFloats / w.cols));
    float* tile =
        workspace(context, kTileSlot, static_cast<size_t>(chunk * w.cols));  // [chunk, in]
    for (int64_t c0 = 0; c0 < w.rows; c0 += chunk) {
      const int64_t count = std::min(chunk, w.rows - c0);
      dequantize_rows(w, c0, count, tile, context.stream);
      CKV_CUBLAS_CHECK(detail::cublas().sgemm(context.blas, CUBLAS_OP_T, CUBLAS_OP_N,
                                              static_cast<int>(count), m_rows, in, &one, tile, in,
                                              x, ldx, &zero, y + c0, ldy));
    }
  }
  if (bias != nullptr) {
    const int64_t n = rows * w.rows;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
    add_bias_kernel<<<detail::grid_size(blocks, "add_bias"), kThreads, 0, context.stream>>>(
        y, y_stride, bias, rows, w.rows);
    CKV_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ckv::cuda
