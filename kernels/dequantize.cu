// Dequantisation of weight rows on the device (every stored type of io/dtype.h) to a float32
// tile. Mapping: a grid-stride loop, one output element per thread per step; each element
// reads its block's scale bytes and its quant bits (decode_row_element of io/dtype_decode.h,
// the element decoders the CPU conversion calls too). Layout: w [rows, cols] in its stored
// dtype, HF row order, row r at data + r * row_bytes; dst [count, cols] row-major.
// Precision: exact (every product rounded once, as the CPU does: no FMA).
#include <algorithm>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"
#include "io/dtype_decode.h"

namespace ckv::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void dequantize_kernel(DType dtype, const uint8_t* __restrict__ data, int64_t row_bytes,
                                  int64_t cols, int64_t begin, int64_t count,
                                  float* __restrict__ dst) {
  const int64_t n = count * cols;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    dst[e] = decode_row_element(dtype, data + (begin + r) * row_bytes, c);
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
      w.dtype, w.data, w.row_bytes, w.cols, begin, count, dst);
  CKV_CUDA_CHECK_LAUNCH();
}

}  // namespace ckv::cuda
