#pragma once
// Host-side API of the CUDA kernels. No CUDA types appear here, so lib/ and apps/ include
// it in builds without nvcc; there available() is false and every function throws
// ckv::DeviceError("... built without CUDA") (no_cuda.cpp).
//
// The state of one device lives in a DeviceContext, created once per execution context
// (lib/ops/context.h): a stream, the cuBLAS handle bound to that stream, a workspace of
// reusable device buffers, and the device copies of the weights (uploaded once, on first
// use; no launcher copies a weight). Launchers take device pointers and a stream (the
// context's, as the opaque handle stream() returns) and only enqueue work: they return
// before the kernel ends, and copy_to_host() + synchronize() collect the result.
// Every CUDA or cuBLAS failure throws ckv::DeviceError naming the call, file and line
// (out of memory: the size asked for and what is free): one `ckv: error:` line.
// Shapes use docs/MATH.md §0 vocabulary; every pointer below is a device pointer unless named
// `host`.
#include <cstddef>
#include <cstdint>
#include <string>

#include "io/dtype.h"
#include "op_math.h"

namespace ckv::cuda {

// True when ckv was built with CUDA and a device is present.
bool available();
// Loads cuBLAS as a device context would (on first use, not at program start) and returns
// the library's own text for CUBLAS_STATUS_SUCCESS (cuBLAS 13: "success"): proof that the loaded
// library answers, which needs no device. Throws DeviceError (library or symbol missing; built
// without CUDA).
std::string cublas_check();

// ---- The per-device context -----------------------------------------------------------

class DeviceContext;
// Selects device `device_index` and creates its stream and handle; throws DeviceError
// (no device, a build without CUDA, a failed call).
DeviceContext* create_context(int device_index);
void destroy_context(DeviceContext* context) noexcept;  // null is allowed
// The context's cudaStream_t, as an opaque handle.
void* stream(DeviceContext& context);
// Waits for the stream's work; throws DeviceError for a failed kernel.
void synchronize(DeviceContext& context);

// Workspace slot `slot` (0 <= slot < kWorkspaceSlots) as a buffer of at least `floats`
// floats; grows (never shrinks) and keeps its contents only until the next call that grows it.
inline constexpr int kWorkspaceSlots = 8;
float* workspace(DeviceContext& context, int slot, size_t floats);
// Asynchronous copies on the context's stream (from pageable memory: the host-to-device
// copy has read `host` when it returns).
void copy_to_device(DeviceContext& context, void* device, const void* host, size_t bytes);
void copy_to_host(DeviceContext& context, void* host, const void* device, size_t bytes);

// ---- Weights, resident on the device --------------------------------------------------

// A weight matrix [rows, cols] in its stored format, rows in HF order (a GGUF row map is
// applied when uploading), row r at data + r * row_bytes.
struct DeviceWeight {
  DType dtype = DType::F32;
  int64_t rows = 0, cols = 0, row_bytes = 0;
  const uint8_t* data = nullptr;
};
// The device copy of the host weight identified by `key` (its storage, which must not
// change while the context lives: copies are not refreshed), or null before upload_weight().
const DeviceWeight* find_weight(DeviceContext& context, const void* key);
// Uploads the weight once: host_rows [rows] point at each HF row's stored bytes. A key seen
// with another dtype or shape (storage freed and reused) is uploaded again.
const DeviceWeight& upload_weight(DeviceContext& context, const void* key, DType dtype,
                                  int64_t rows, int64_t cols, int64_t row_bytes,
                                  const uint8_t* const* host_rows);
// A float32 vector weight (norm weights, biases) [n], uploaded on first use of `host` (again
// if n changed).
const float* device_vector(DeviceContext& context, const float* host, int64_t n);

// ---- Launchers (enqueue on `stream`) --------------------------------------------------

// RMSNorm (ops/rms_norm.h). x, y: [rows, cols]; w: [cols]. y may equal x.
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps,
              void* stream);

// RoPE in place (ops/rope.h). x: [heads, seq, 2*half]; cos, sin: [seq, half], the table's
// rows of these positions.
void rope(float* x, int64_t heads, int64_t seq, int64_t half, const float* cos, const float* sin,
          void* stream);

// gate <- silu(gate) * up. gate, up: [n].
void silu_mul(float* gate, const float* up, int64_t n, void* stream);

// Rows [begin, begin+count) of w to float32: dst [count, w.cols].
void dequantize_rows(const DeviceWeight& w, int64_t begin, int64_t count, float* dst, void* stream);

// y = x W^T + b. x: [rows, w.cols] (row stride x_stride); bias: [w.rows] or null;
// y: [rows, w.rows] (row stride y_stride). Float32 weights are multiplied in place; others
// are dequantised to float32 in column tiles in the context's workspace (slot 7) and
// multiplied by cuBLAS SGEMM on the context's stream.
void linear(DeviceContext& context, const float* x, int64_t x_stride, int64_t rows,
            const DeviceWeight& w, const float* bias, float* y, int64_t y_stride);

// The additive mask of causal_attention (ops/attention.h) by key: the entries of KV head g
// and key j are [offsets[g*seq + j], offsets[g*seq + j + 1]); entry e adds value[e] to the
// logits of query rows [q_begin[e], q_end[e]). offsets null: no mask.
struct DeviceMask {
  const int64_t* offsets = nullptr;  // [n_kv_head*seq + 1]
  const int64_t* q_begin = nullptr;  // [entries]
  const int64_t* q_end = nullptr;    // [entries]
  const float* value = nullptr;      // [entries]
};
// Causal attention with grouped KV heads. q: [n_head, seq, d_head]; k, v: [n_kv_head, seq,
// d_head]; out: [seq, n_head*d_head]. d_head <= 256.
void causal_attention(const float* q, const float* k, const float* v, float* out, int64_t n_head,
                      int64_t n_kv_head, int64_t seq, int64_t d_head, const DeviceMask& mask,
                      void* stream);

}  // namespace ckv::cuda
