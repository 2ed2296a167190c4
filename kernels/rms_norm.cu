// RMSNorm (ops/rms_norm.h): y = x * rsqrt(mean(x^2) + eps) * w.
// Mapping: one block of kThreads threads per row; each thread sums the squares of a strided
// slice of the row, warps reduce with shuffles, warp sums meet in shared memory, and thread 0
// forms the row's inverse RMS (op_math::rms_inv). Every thread then scales its slice
// (op_math::rms_scale). Layout: x, y [rows, cols] row-major; w [cols]. Precision: fp32
// throughout; the sum of squares is added in another order than the CPU's 16 lanes, so rows
// agree to float rounding, not bit for bit.
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

namespace {

constexpr int kThreads = 256;  // per block; a multiple of the warp size
constexpr int kWarp = 32;

__device__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// x, y: [rows, cols]; w: [cols]. Grid: rows blocks of kThreads threads.
__global__ void rms_norm_kernel(const float* x, const float* __restrict__ w, float* y, int64_t cols,
                                float eps) {
  const float* row_in = x + blockIdx.x * cols;  // [cols]
  float* row_out = y + blockIdx.x * cols;       // [cols]
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += row_in[c] * row_in[c];
  __shared__ float warp_sums[kThreads / kWarp];
  __shared__ float inv_rms;
  sum = warp_sum(sum);
  if (threadIdx.x % kWarp == 0) warp_sums[threadIdx.x / kWarp] = sum;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    float total = threadIdx.x < blockDim.x / kWarp ? warp_sums[threadIdx.x] : 0.0f;
    total = warp_sum(total);
    if (threadIdx.x == 0) inv_rms = op_math::rms_inv(total, cols, eps);
  }
  __syncthreads();
  // y may equal x: each element is read (above and here) before this thread writes it, and
  // the sum is complete before any thread writes (the barrier).
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    row_out[c] = op_math::rms_scale(row_in[c], inv_rms, w[c]);
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps,
              void* stream) {
  if (rows < 0 || cols <= 0)
    detail::raise_device_error("cuda::rms_norm: bad shape [" + std::to_string(rows) + ", " +
                               std::to_string(cols) + "]");
  if (rows == 0) return;
  rms_norm_kernel<<<detail::grid_size(rows, "rms_norm"), kThreads, 0, as_stream(stream)>>>(
      x, w, y, cols, eps);
  CKV_CUDA_CHECK_LAUNCH();
}

}  // namespace ckv::cuda
