#pragma once
// Linear layer y = x W^T + b with HF weight layout W [out, in], W in its stored dtype.
#include "core/tensor.h"
#include "io/weight_matrix.h"

namespace ckv {

class ThreadPool;

// x: [rows, in], weight: [out, in] (any stored dtype), bias: [out] or empty, y: [rows, out]
// (resized). Work is split over chunks of output columns whose width depends on the shape
// only; each chunk converts its weight rows to float32 in thread-local scratch (a tile)
// and multiplies with one Eigen GEMM, so the result does not depend on the number of
// threads, and equals bit for bit the product with the weight converted to float32 first.
void linear(const Tensor& x, const WeightMatrix& weight, const Tensor& bias, Tensor& y,
            ThreadPool& pool);
// Rows [begin, begin+count) of x [rows, in] only: y [count, out] (resized). What a caller
// that works in row chunks uses, so that its outputs exist for one chunk at a time.
void linear_rows(const Tensor& x, int64_t begin, int64_t count, const WeightMatrix& weight,
                 const Tensor& bias, Tensor& y, ThreadPool& pool);
// Rows per chunk where the forward pass and the MLP bound their activations: the
// [chunk, d_ff] MLP intermediates and [chunk, n_head*d_head] projections replace
// [seq, ...] ones (docs/PERF.md). A sequence of at most this many rows is one chunk.
inline constexpr int64_t kLinearRowChunk = 1024;
// The same with a float32 weight [out, in] (tests, analysis).
void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, ThreadPool& pool);

namespace detail {
// Output columns per tile for a weight [out, in]: about out/16, a multiple of 16, at least
// 32, and at most what keeps a float32 tile within 16 MiB.
int64_t linear_column_chunk(int64_t out, int64_t in);

// x: [rows, in] with row stride x_stride; w: [out, in]; bias: [out] or null;
// y: [rows, out] with row stride y_stride.
void linear_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias, float* y,
                int64_t y_stride, int64_t rows, ThreadPool& pool);
}  // namespace detail

}  // namespace ckv
