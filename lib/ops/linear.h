#pragma once
// Linear layer y = x W^T + b with HF weight layout W [out, in].
#include "core/tensor.h"

namespace ckv {

class ThreadPool;

// x: [rows, in], weight: [out, in], bias: [out] or empty, y: [rows, out] (resized).
// Work is split over fixed chunks of output columns, so the result does not depend on the
// number of threads.
void linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, ThreadPool& pool);

namespace detail {
// x: [rows, in] with row stride x_stride; w: [out, in]; bias: [out] or null;
// y: [rows, out] with row stride y_stride.
void linear_cpu(const float* x, int64_t x_stride, const float* w, const float* bias, float* y,
                int64_t y_stride, int64_t rows, int64_t in, int64_t out, ThreadPool& pool);
}  // namespace detail

}  // namespace ckv
