#include "ops/device_path.h"

#include <vector>

#include "core/error.h"
#include "cuda_ops.h"
#include "ops/linear.h"

namespace ckv::detail {

namespace {

// Workspace slots of the staging (kernels/cuda_ops.h; slot 7 is linear's weight tile).
enum Slot : int {
  kIn = 0,
  kOut = 1,
  kK = 2,
  kV = 3,
  kMaskOffsets = 4,
  kMaskRanges = 5,
  kMaskValues = 6
};

cuda::DeviceContext& device_of(ExecContext& ctx) {
  if (ctx.cuda() == nullptr) fail<DeviceError>("{}: no CUDA context", ctx.device_string());
  return *ctx.cuda();
}


// Host floats [n] into workspace slot `slot`.
float* stage(cuda::DeviceContext& dc, int slot, const float* host, int64_t n) {
  float* device = cuda::workspace(dc, slot, static_cast<size_t>(n));
  cuda::copy_to_device(dc, device, host, static_cast<size_t>(n) * sizeof(float));
  return device;
}

// Device floats [n] back to the host, waiting for the stream (and so for the kernels).
void collect(cuda::DeviceContext& dc, float* host, const float* device, int64_t n) {
  cuda::copy_to_host(dc, host, device, static_cast<size_t>(n) * sizeof(float));
  cuda::synchronize(dc);
}

}  // namespace

const cuda::DeviceWeight& resident_weight(ExecContext& ctx, const WeightMatrix& w) {
  cuda::DeviceContext& dc = device_of(ctx);
  const void* key = w.row(0);  // the stored bytes identify the weight (a row map keeps row 0's)
  if (const cuda::DeviceWeight* known = cuda::find_weight(dc, key);
      known != nullptr && known->rows == w.rows() && known->cols == w.cols() &&
      known->row_bytes == w.row_bytes() && known->dtype == w.dtype())
    return *known;
  std::vector<const uint8_t*> rows(static_cast<size_t>(w.rows()));  // [rows] HF order
  for (int64_t r = 0; r < w.rows(); ++r) rows[static_cast<size_t>(r)] = w.row(r);
  return cuda::upload_weight(dc, key, w.dtype(), w.rows(), w.cols(), w.row_bytes(),
                             rows.data());
}

void linear_on_device(ExecContext& ctx, const float* x, int64_t x_stride, const WeightMatrix& w,
                      const float* bias, float* y, int64_t y_stride, int64_t rows) {
  if (ctx.device() == Device::CUDA) {
    linear_cuda(ctx, x, x_stride, w, bias, y, y_stride, rows);
    return;
  }
  linear_cpu(x, x_stride, w, bias, y, y_stride, rows, ctx.pool(), ctx.compute());
}

void linear_cuda(ExecContext& ctx, const float* x, int64_t x_stride, const WeightMatrix& w,
                 const float* bias, float* y, int64_t y_stride, int64_t rows) {
  if (ctx.compute() != ComputeDType::F32)
    fail<UnsupportedError>("linear: --compute-dtype {} has no CUDA path",
                           compute_dtype_name(ctx.compute()));
  cuda::DeviceContext& dc = device_of(ctx);
  const int64_t in = w.cols(), out = w.rows();
  const cuda::DeviceWeight& dw = resident_weight(ctx, w);
  const float* device_bias = bias == nullptr ? nullptr : cuda::device_vector(dc, bias, out);
  float* dx = cuda::workspace(dc, kIn, static_cast<size_t>(rows * in));    // [rows, in]
  float* dy = cuda::workspace(dc, kOut, static_cast<size_t>(rows * out));  // [rows, out]
  // Packed rows move in one copy; strided ones (a column block of a wider tensor) row by row.
  if (x_stride == in)
    cuda::copy_to_device(dc, dx, x, static_cast<size_t>(rows * in) * sizeof(float));
  else
    for (int64_t r = 0; r < rows; ++r)
      cuda::copy_to_device(dc, dx + r * in, x + r * x_stride,
                           static_cast<size_t>(in) * sizeof(float));
  cuda::linear(dc, dx, in, rows, dw, device_bias, dy, out);
  if (y_stride == out)
    cuda::copy_to_host(dc, y, dy, static_cast<size_t>(rows * out) * sizeof(float));
  else
    for (int64_t r = 0; r < rows; ++r)
      cuda::copy_to_host(dc, y + r * y_stride, dy + r * out,
                         static_cast<size_t>(out) * sizeof(float));
  cuda::synchronize(dc);
}

void rms_norm_cuda(ExecContext& ctx, const float* x, const float* w, float* y, int64_t rows,
                   int64_t cols, float eps) {
  cuda::DeviceContext& dc = device_of(ctx);
  const float* dw = cuda::device_vector(dc, w, cols);
  float* dx = stage(dc, kIn, x, rows * cols);  // [rows, cols], normalised in place
  cuda::rms_norm(dx, dw, dx, rows, cols, eps, cuda::stream(dc));
  collect(dc, y, dx, rows * cols);
}

void silu_mul_cuda(ExecContext& ctx, float* gate, const float* up, int64_t n) {
  cuda::DeviceContext& dc = device_of(ctx);
  float* dg = stage(dc, kIn, gate, n);
  const float* du = stage(dc, kOut, up, n);
  cuda::silu_mul(dg, du, n, cuda::stream(dc));
  collect(dc, gate, dg, n);
}

void apply_rope_cuda(ExecContext& ctx, float* x, int64_t heads, int64_t seq, const RopeTable& table,
                     int64_t first_position) {
  cuda::DeviceContext& dc = device_of(ctx);
  const int64_t half = table.half;
  // The table's rows of these positions, per call (a table grows and moves as sequences do).
  const float* dcos =
      stage(dc, kK, table.cos.data() + first_position * half, seq * half);  // [seq, half]
  const float* dsin =
      stage(dc, kV, table.sin.data() + first_position * half, seq * half);  // [seq, half]
  float* dx = stage(dc, kIn, x, heads * seq * 2 * half);                    // [heads, seq, d_head]
  cuda::rope(dx, heads, seq, half, dcos, dsin, cuda::stream(dc));
  collect(dc, x, dx, heads * seq * 2 * half);
}

AttentionMaskByKey attention_mask_by_key(std::span<const AttentionMaskSpan> spans,
                                         int64_t n_kv_head, int64_t seq) {
  AttentionMaskByKey m;
  m.offsets.assign(static_cast<size_t>(n_kv_head * seq + 1), 0);
  for (const AttentionMaskSpan& span : spans)
    for (int64_t key : span.keys) ++m.offsets[static_cast<size_t>(span.kv_head * seq + key + 1)];
  for (size_t i = 1; i < m.offsets.size(); ++i) m.offsets[i] += m.offsets[i - 1];
  const auto entries = static_cast<size_t>(m.offsets.back());
  m.q_begin.resize(entries);
  m.q_end.resize(entries);
  m.value.resize(entries);
  std::vector<int64_t> next(m.offsets.begin(), m.offsets.end() - 1);
  // Spans in their order, so each (head, key)'s values are added in the CPU op's order.
  for (const AttentionMaskSpan& span : spans)
    for (int64_t key : span.keys) {
      const auto e = static_cast<size_t>(next[static_cast<size_t>(span.kv_head * seq + key)]++);
      m.q_begin[e] = span.q_begin;
      m.q_end[e] = span.q_end;
      m.value[e] = span.value;
    }
  return m;
}

void causal_attention_cuda(ExecContext& ctx, const float* q, const float* k, const float* v,
                           float* out, const AttentionShape& shape, const AttentionParams& params) {
  cuda::DeviceContext& dc = device_of(ctx);
  const int64_t q_n = shape.n_head * shape.seq * shape.d_head,
                kv_n = shape.n_kv_head * shape.seq * shape.d_head;
  const float* dq = stage(dc, kIn, q, q_n);
  const float* dk = stage(dc, kK, k, kv_n);
  const float* dv = stage(dc, kV, v, kv_n);
  float* dout = cuda::workspace(dc, kOut, static_cast<size_t>(q_n));  // [seq, n_head*d_head]
  cuda::DeviceMask mask;
  AttentionMaskByKey by_key;
  if (!params.mask.empty()) {
    by_key = attention_mask_by_key(params.mask, shape.n_kv_head, shape.seq);
    const auto entries = static_cast<int64_t>(by_key.value.size());
    auto* offsets =
        reinterpret_cast<int64_t*>(cuda::workspace(dc, kMaskOffsets, by_key.offsets.size() * 2));
    auto* ranges = reinterpret_cast<int64_t*>(
        cuda::workspace(dc, kMaskRanges, static_cast<size_t>(entries * 4 + 2)));
    float* values = cuda::workspace(dc, kMaskValues, static_cast<size_t>(entries + 1));
    cuda::copy_to_device(dc, offsets, by_key.offsets.data(),
                         by_key.offsets.size() * sizeof(int64_t));
    cuda::copy_to_device(dc, ranges, by_key.q_begin.data(),
                         by_key.q_begin.size() * sizeof(int64_t));
    cuda::copy_to_device(dc, ranges + entries, by_key.q_end.data(),
                         by_key.q_end.size() * sizeof(int64_t));
    cuda::copy_to_device(dc, values, by_key.value.data(), by_key.value.size() * sizeof(float));
    mask = {offsets, ranges, ranges + entries, values};
  }
  cuda::causal_attention(dq, dk, dv, dout, shape.n_head, shape.n_kv_head, shape.seq, shape.d_head,
                         mask, cuda::stream(dc));
  collect(dc, out, dout, q_n);
}

}  // namespace ckv::detail
