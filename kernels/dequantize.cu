// Dequantisation of weight rows on the device (the ggml block formats, F16, BF16, F32) to a
// float32 tile. Mapping: a grid-stride loop, one output element per thread per step; each
// element reads its block's scale bytes and its quant bits (op_math::dequant_element, the
// same function the CPU tests compare with lib/io/quant's dequantisers). Layout: w [rows,
// cols] in its stored format, HF row order, row r at data + r * row_bytes; dst [count, cols]
// row-major. Precision: exact (every product rounded once, as the CPU does: no FMA).
#include <algorithm>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void dequantize_kernel(op_math::Format format, const uint8_t* __restrict__ data,
                                  int64_t row_bytes, int64_t cols, int64_t begin, int64_t count,
                                  float* __restrict__ dst) {
  const int64_t n = count * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    dst[e] = op_math::dequant_element(format, data + (begin + r) * row_bytes, c);
  }
}

}  // namespace

void dequantize_rows(const DeviceWeight& w, int64_t begin, int64_t count, float* dst,
                     void* stream) {
  if (begin < 0 || count < 0 || begin + count > w.rows)
    detail::raise_device_error("cuda::dequantize_rows: rows [" + std::to_string(begin) + ", " +
                               std::to_string(begin + count) + ") outside " +
                               std::to_string(w.rows));
  const int64_t n = count * w.cols;
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  dequantize_kernel<<<detail::grid_size(blocks, "dequantize"), kThreads, 0, as_stream(stream)>>>(
      w.format, w.data, w.row_bytes, w.cols, begin, count, dst);
  CKV_CUDA_CHECK_LAUNCH();
}

}  // namespace ckv::cuda
