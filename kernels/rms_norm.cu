// RMSNorm kernel: one block per row; each thread sums squares over a strided slice of the
// row, warps reduce with shuffles, warp sums meet in shared memory. fp32 throughout.
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
__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                float* __restrict__ y, int64_t cols, float eps) {
  const float* row_in = x + blockIdx.x * cols;
  float* row_out = y + blockIdx.x * cols;
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
    if (threadIdx.x == 0) inv_rms = rsqrtf(total / static_cast<float>(cols) + eps);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) row_out[c] = row_in[c] * inv_rms * w[c];
}

void check_shape(int64_t rows, int64_t cols) {
  if (rows < 0 || cols <= 0 || rows > 0x7fffffff)
    detail::raise_device_error("cuda::rms_norm: bad shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                               "]");
}

}  // namespace

void rms_norm_device(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                     float eps) {
  check_shape(rows, cols);
  if (rows == 0) return;
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads>>>(x, w, y, cols, eps);
  CKV_CUDA_CHECK(cudaGetLastError());
  CKV_CUDA_CHECK(cudaDeviceSynchronize());
}

void rms_norm(const float* x_host, const float* w_host, float* y_host, int64_t rows, int64_t cols,
              float eps) {
  check_shape(rows, cols);
  const auto n = static_cast<size_t>(rows * cols);
  detail::DeviceBuffer x(n), w(static_cast<size_t>(cols)), y(n);
  x.upload(x_host, n);
  w.upload(w_host, static_cast<size_t>(cols));
  rms_norm_device(x.get(), w.get(), y.get(), rows, cols, eps);
  y.download(y_host, n);
}

}  // namespace ckv::cuda
