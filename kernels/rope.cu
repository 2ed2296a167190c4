// RoPE (ops/rope.h, HF rotate_half), in place. Mapping: one thread per rotated pair
// (head, position, i < half): a grid-stride loop over heads * seq * half pairs, each rotating
// (x[i], x[i + half]) of its row by the table's angle (op_math::rope_rotate). Layout: x
// [heads, seq, 2*half] row-major; cos, sin [seq, half] (the rows of these positions, so the
// caller offsets the table by the first position). Precision: fp32, the CPU's operations in
// its order (bit-identical where the compiler does not fuse into FMAs).
#include <algorithm>
#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"

namespace ckv::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void rope_kernel(float* x, int64_t heads, int64_t seq, int64_t half,
                            const float* __restrict__ cos_table,
                            const float* __restrict__ sin_table) {
  const int64_t pairs = heads * seq * half;
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = p % half, row = p / half, pos = row % seq;  // row = head * seq + pos
    float* r = x + row * 2 * half;                                // [2*half]
    op_math::rope_rotate(r[i], r[i + half], cos_table[pos * half + i], sin_table[pos * half + i]);
  }
}

}  // namespace

void rope(float* x, int64_t heads, int64_t seq, int64_t half, const float* cos, const float* sin,
          void* stream) {
  const int64_t pairs = heads * seq * half;
  if (pairs <= 0) return;
  const int64_t blocks = std::min<int64_t>((pairs + kThreads - 1) / kThreads, 65535);
  rope_kernel<<<detail::grid_size(blocks, "rope"), kThreads, 0, as_stream(stream)>>>(
      x, heads, seq, half, cos, sin);
  CKV_CUDA_CHECK_LAUNCH();
}

}  // namespace ckv::cuda
