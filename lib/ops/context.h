#pragma once
// The execution context every op runs in (the device is chosen once, when
// the weights are loaded): the device, the CPU thread pool, the device's stream (an opaque
// handle: no CUDA type appears in lib/), a scratch arena for the ops' intermediates, and the
// arithmetic of the linear layers. Ops take `ExecContext&` first and dispatch on
// device(): `<op>.cpp` checks the shapes, then calls `detail::<op>_cpu` or the kernels/
// launcher (kernels/cuda_ops.h).
//
//   ExecContext ctx({.threads = 4});            // CPU, 4 threads, float32 linear layers
//   rms_norm(ctx, x, weight, eps, y);
//
// A context is used by one caller at a time (its scratch and pool are not thread-safe).
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace ckv {

class ThreadPool;

namespace cuda {
class DeviceContext;  // kernels/cuda_ops.h: stream, cuBLAS handle, workspace, weights
}

// Where the ops run. CPU is the reference backend; CUDA runs kernels/ (cuda_ops.h).
enum class Device { CPU, CUDA };
std::string_view device_name(Device device);  // "cpu", "cuda"

// The arithmetic of the linear layers (the CLI's --compute-dtype). F32: float32 products and
// sums (the default; fidelity). BF16: x and each weight tile rounded to bfloat16 (8
// significant bits, round to nearest even), products summed in float32, output float32, in
// every product over more than kLinearFewRows rows (ops/linear.h: those of at most that many,
// decoding and a prefill's last-row logits, stay float32); only in a build with oneDNN (its
// bf16 matmul), see compute_dtype_available().
enum class ComputeDType { F32, BF16 };
std::string_view compute_dtype_name(ComputeDType dtype);  // "f32", "bf16"
// Whether this build can run `dtype` (F32 always; BF16 with oneDNN).
bool compute_dtype_available(ComputeDType dtype);

struct ExecOptions {
  Device device = Device::CPU;
  int device_index = 0;                      // which CUDA device (cuda:N)
  int threads = 1;                           // CPU worker threads (<= 0: all hardware threads)
  ComputeDType compute = ComputeDType::F32;  // the linear layers' arithmetic
};

// Reusable intermediates of the ops, one tensor per slot, kept across calls so that a
// forward pass allocates them once (their sizes follow the largest call). Host memory;
// device intermediates live in the CUDA context's workspace.
enum class ScratchSlot {
  MlpGate,  // [chunk, d_ff]: gated_mlp's gate projection, then silu(gate) * up
  MlpUp,    // [chunk, d_ff]: gated_mlp's up projection
  Count
};

class ScratchArena {
 public:
  Tensor& operator[](ScratchSlot slot) { return slots_[static_cast<size_t>(slot)]; }
  // Bytes held by every slot (for memory accounting).
  int64_t bytes() const;

 private:
  std::array<Tensor, static_cast<size_t>(ScratchSlot::Count)> slots_;
};

class ExecContext {
 public:
  // Throws UsageError for a compute dtype this build lacks, DeviceError for a CUDA device
  // that cannot be opened (a build without CUDA, no such device).
  explicit ExecContext(ExecOptions options = {});
  ~ExecContext();
  ExecContext(const ExecContext&) = delete;
  ExecContext& operator=(const ExecContext&) = delete;

  Device device() const { return options_.device; }
  // The device as provenance records it: "cpu", or "cuda:N".
  std::string device_string() const;
  ComputeDType compute() const { return options_.compute; }
  ThreadPool& pool() { return *pool_; }
  int threads() const;
  ScratchArena& scratch() { return scratch_; }
  // The device's stream as an opaque handle (a cudaStream_t on CUDA, null on the CPU).
  void* stream() const;
  // The kernels-side context (CUDA only; null on the CPU).
  cuda::DeviceContext* cuda() const { return cuda_.get(); }

 private:
  struct CudaDeleter {
    void operator()(cuda::DeviceContext* context) const;
  };

  ExecOptions options_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<cuda::DeviceContext, CudaDeleter> cuda_;
  ScratchArena scratch_;
};

}  // namespace ckv
