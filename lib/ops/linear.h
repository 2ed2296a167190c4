#pragma once
// Linear layer y = x W^T + b with HF weight layout W [out, in], W in its stored dtype.
#include <optional>
#include <span>
#include <string_view>

#include "core/tensor.h"
#include "io/weight_matrix.h"
#include "ops/context.h"

namespace ckv {

class ThreadPool;

// The GEMM engine of the tiled path in this build: "onednn" or "eigen" (provenance).
std::string_view gemm_engine_name();
// How ComputeDType::BF16 multiplies on this CPU (chosen once, from oneDNN's view of the
// CPU): NativeMatmul, oneDNN's bf16 matmul on bf16 dot-product instructions (AVX512_BF16 or
// AMX); SgemmOnRoundedValues, float32 sgemm over x and W rounded to bf16 and held as float32,
// where oneDNN would only emulate those instructions (3x slower than its sgemm). The same
// arithmetic either way: bf16 inputs, exact products, float32 sums; only the order of the
// sums differs. None in a build without oneDNN.
enum class Bf16Kernel { None, NativeMatmul, SgemmOnRoundedValues };
Bf16Kernel bf16_kernel();
// "onednn-bf16-matmul", "onednn-sgemm-on-bf16-values" or "none" (provenance: bf16_kernel).
std::string_view bf16_kernel_name(Bf16Kernel kernel = bf16_kernel());

// x: [rows, in], weight: [out, in] (any stored dtype), bias: [out] or empty, y: [rows, out]
// (resized). Two paths, both independent of the number of threads bit for bit:
//  - tiled (rows > kLinearFewRows, or a float32 weight read in place at any rows): work
//    is split over chunks of output columns whose width depends on the shape only; each
//    chunk converts its weight rows to float32 in thread-local scratch (a tile) and
//    multiplies with one single-threaded GEMM (oneDNN's where the build found it, else
//    Eigen's), so the result equals bit for bit the product with the weight converted to
//    float32 first, by the same engine.
//  - fused (rows <= kLinearFewRows, decode): each output is a dot product with its weight
//    row dequantised block by block in registers (no tile). The weight values are exactly
//    rows_f32's; only the order of summation differs (fused multiply-adds into 4 x 16
//    partial sums, added in a fixed tree), so each output differs from the float32 product
//    by rounding only: |y - y_f32| <= 2 * (in + 1) * 2^-24 * (sum_i |x_i w_i| + |b|) (the
//    two orders' error bounds added; tests/test_linear_few_rows.cpp checks it for every
//    dtype). A row's result does not depend on the other rows of the call either.
// With the context's compute ComputeDType::BF16 every call of more than kLinearFewRows rows
// takes the tiled path with bf16 x and tiles; fewer rows take the fused float32 path as they
// do under F32 (converting a tile for them costs more than their product). A build without
// oneDNN cannot make such a context. Both paths run on the context's thread pool.
void linear(ExecContext& ctx, const Tensor& x, const WeightMatrix& weight, const Tensor& bias, Tensor& y);
// Rows [begin, begin+count) of x [rows, in] only: y [count, out] (resized). What a caller
// that works in row chunks uses, so that its outputs exist for one chunk at a time.
void linear_rows(ExecContext& ctx, const Tensor& x, int64_t begin, int64_t count, const WeightMatrix& weight,
                 const Tensor& bias, Tensor& y);
// One weight of a batch: y = x W^T + b for the batch's rows ([count, out], resized).
struct LinearTarget {
  const WeightMatrix* weight;
  const Tensor* bias;  // empty for none
  Tensor* y;
};
// linear_rows for several weights on the same rows of x (a layer's q, k and v), with one
// wait for all of them: on the CPU's tiled float32 path every weight's column chunks are
// tasks of one parallel_for, each the GEMM call linear_rows makes, so every y equals its
// linear_rows bit for bit. Other paths run the weights one after the other.
void linear_rows_batch(ExecContext& ctx, const Tensor& x, int64_t begin, int64_t count,
                       std::span<const LinearTarget> targets);
// Rows per chunk where the forward pass and the MLP bound their activations: the
// [chunk, d_ff] MLP intermediates and [chunk, n_head*d_head] projections replace
// [seq, ...] ones (docs/PERF.md). A sequence of at most this many rows is one chunk. 512
// rather than 1024: a chunk's x of the default model (512 x 576 floats, 1.2 MB) stays in a
// 2 MB L2 while the column chunks' GEMMs read it again and again, which made a 2048-token
// prefill 4.5 % faster on an Intel Xeon (docs/PERF.md, "Intel Xeon host").
inline constexpr int64_t kLinearRowChunk = 512;
// The most rows that take the few-row (decode) path: below it the fused kernel reads each
// weight once for all rows and beats converting a tile; above it the GEMM wins
// (bench/bench_linear.cpp, docs/PERF.md "Decode").
inline constexpr int64_t kLinearFewRows = 8;
// Whether every weight, whatever its dtype, takes the tiled float32 path at this many rows
// (a float32 weight read in place takes it at any rows): where callers may run the tiles of
// several weights in one dispatch (linear_rows_batch, gated_mlp) with the same bits.
inline bool tiled_f32_for_any_weight(int64_t rows, ComputeDType compute) {
  return compute == ComputeDType::F32 && rows > kLinearFewRows;
}
// The same with a float32 weight [out, in] (tests, analysis).
void linear(ExecContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);

namespace detail {
// Tests only: runs ComputeDType::BF16 on `kernel` (NativeMatmul is emulated by oneDNN on an
// AVX-512 CPU without bf16 instructions); nullopt restores the CPU's choice. No effect
// without oneDNN.
void force_bf16_kernel(std::optional<Bf16Kernel> kernel);
// Whether `kernel` can run on this CPU in this build: SgemmOnRoundedValues wherever oneDNN
// is; NativeMatmul where oneDNN makes a bf16 matmul at all (it has none below AVX-512, where
// making one throws "could not create a primitive descriptor iterator").
bool bf16_kernel_runs(Bf16Kernel kernel);

// Output columns per tile for a weight [out, in]: about out/16, a multiple of 16, at least
// 32, and at most what keeps a float32 tile within 16 MiB.
int64_t linear_column_chunk(int64_t out, int64_t in);

// x: [rows, in] with row stride x_stride; w: [out, in]; bias: [out] or null;
// y: [rows, out] with row stride y_stride.
// Dispatches on rows (kLinearFewRows) and compute to one of the two below.
void linear_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias,
                float* y, int64_t y_stride, int64_t rows, ThreadPool& pool,
                ComputeDType compute = ComputeDType::F32);
// The tiled GEMM path, for any rows: one single-threaded GEMM per column chunk (oneDNN's
// sgemm or bf16 matmul in a build with oneDNN, else Eigen's), on the pool's threads.
void linear_tiled_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias,
                      float* y, int64_t y_stride, int64_t rows, ThreadPool& pool,
                      ComputeDType compute = ComputeDType::F32);
// Columns [begin, begin+min(chunk, out-begin)) of the tiled float32 product, y = x W^T + b
// there: the GEMM call linear_tiled_cpu makes for that column chunk (chunk =
// linear_column_chunk(out, in)), for callers that fuse work into the chunk's task.
void linear_f32_chunk_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias, float* y,
                          int64_t y_stride, int64_t rows, int64_t begin, int64_t chunk);
// One weight of linear_batch_cpu: w [out, in], bias [out] or null, y with row stride y_stride.
struct LinearJob {
  const WeightMatrix* w;
  const float* bias;
  float* y;
  int64_t y_stride;
};
// linear_cpu for each job on the same x; the tiled float32 path runs all the jobs' column
// chunks in one parallel_for (each chunk the call linear_tiled_cpu makes).
void linear_batch_cpu(const float* x, int64_t x_stride, std::span<const LinearJob> jobs, int64_t rows,
                      ThreadPool& pool, ComputeDType compute = ComputeDType::F32);
// The fused dequantise-and-dot path, for any rows (meant for few).
void linear_few_rows_cpu(const float* x, int64_t x_stride, const WeightMatrix& w, const float* bias,
                         float* y, int64_t y_stride, int64_t rows, ThreadPool& pool);
// Output rows per task of the few-row path (shape only; results do not depend on it).
int64_t linear_few_rows_chunk(int64_t out, int64_t in);
}  // namespace detail

}  // namespace ckv
