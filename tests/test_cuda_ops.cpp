// The ops on a CUDA execution context against the same ops on the CPU (the reference
// backend), through the one op interface (ops/context.h). Skipped without a device: CPU-only
// CI runs the CPU half (tests/test_op_math.cpp checks the kernels' per-element arithmetic),
// a GPU run adds these. A build or machine without CUDA still checks the typed error.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <random>

#include "core/error.h"
#include "cuda_ops.h"
#include "ops/attention.h"
#include "ops/context.h"
#include "ops/linear.h"
#include "ops/mlp.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "random_blocks.h"

namespace ckv {
namespace {

constexpr float kScale = 2.0f;  // the inputs' spread where a test names none

// fp32 on both sides; the GPU's reduction order differs from Eigen's, so the tolerance is
// relative to the output's largest magnitude (docs/MATH.md §0: fp32 around 1e-5 relative).
constexpr double kFp32RelTolerance = 1e-5;

double relative_error(const Tensor& gpu, const Tensor& cpu) {
  double scale = 0, worst = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    scale = std::max(scale, double{std::abs(cpu.data()[i])});
    worst = std::max(worst, double{std::abs(gpu.data()[i] - cpu.data()[i])});
  }
  return scale == 0 ? worst : worst / scale;
}

// A device context keeps device copies of the weights it has seen, by host address; the
// cases below free and remake host weights, so each gets a fresh context (fresh_gpu()).
class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::available()) GTEST_SKIP() << "no CUDA device";
    fresh_gpu();
  }
  ExecContext& fresh_gpu() {
    gpu_ = std::make_unique<ExecContext>(ExecOptions{.device = Device::CUDA});
    return *gpu_;
  }
  ExecContext cpu_{{.threads = 2}};
  std::unique_ptr<ExecContext> gpu_;
};

TEST(CudaContext, ReportsMissingCudaAsATypedError) {
  if (cuda::available()) GTEST_SKIP() << "a CUDA device is present";
  // One `ckv: error:` line, whether nvcc was absent or the device is.
  EXPECT_THROW(ExecContext({.device = Device::CUDA}), DeviceError);
}

// cuBLAS is loaded when a device context first needs it, not at program start (a CUDA build
// that runs on the CPU would carry libcublas + libcublasLt: +216 MiB RSS, +0.1 s per command).
bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublas") != std::string::npos) return true;
  return false;
}

TEST(CudaContext, CublasIsLoadedOnFirstUseOnly) {
#if defined(CKV_HAVE_CUDA)
  if (!cuda::available()) {
    EXPECT_FALSE(cublas_mapped());  // no test before this one had a device context
  }
  EXPECT_FALSE(cuda::cublas_check().empty());  // the library answers ("success"), no device needed
  EXPECT_TRUE(cublas_mapped());
#else
  EXPECT_THROW(cuda::cublas_check(), DeviceError);
  EXPECT_FALSE(cublas_mapped());
#endif
}

TEST_F(CudaOps, ContextIsTheDevice) {
  EXPECT_EQ(gpu_->device_string(), "cuda:0");
  EXPECT_NE(gpu_->stream(), nullptr);
}

TEST_F(CudaOps, RmsNormMatchesCpu) {
  // Widths below, at and above the block size, one not a multiple of the warp size.
  for (int64_t cols : {7, 256, 576, 4099}) {
    const Tensor x = random_tensor({33, cols}, 1, kScale), w = random_tensor({cols}, 2, kScale);
    Tensor cpu, gpu;
    rms_norm(cpu_, x, w, 1e-5f, cpu);
    rms_norm(fresh_gpu(), x, w, 1e-5f, gpu);
    EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance) << cols;
  }
}

TEST_F(CudaOps, RopeMatchesCpu) {
  std::vector<float> inv_freq(32);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(10000.0f, -static_cast<float>(i) / 32.0f);
  const RopeTable table = make_rope_table(inv_freq, 300);
  for (int64_t first : {0, 117}) {
    Tensor cpu = random_tensor({3, 150, 64}, 3, kScale), gpu = cpu;
    apply_rope(cpu_, cpu, table, first);
    apply_rope(*gpu_, gpu, table, first);
    EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance) << first;
  }
}

TEST_F(CudaOps, SiluMulMatchesCpu) {
  Tensor cpu = random_tensor({70, 300}, 4, 6.0f), gpu = cpu;
  const Tensor up = random_tensor({70, 300}, 5, kScale);
  silu_mul(cpu_, cpu, up);
  silu_mul(*gpu_, gpu, up);
  EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance);
}

TEST_F(CudaOps, LinearMatchesCpuInEveryStoredDtypeWithBiasAndRowMap) {
  for (const DTypeTraits& traits : kDTypeTraits) {  // every stored type (io/dtype.h)
    const DType t = traits.type;
    SCOPED_TRACE(std::string(dtype_name(t)));
    ExecContext& gpu_ctx = fresh_gpu();
    const int64_t in = 512, out = 96;
    const std::vector<uint8_t> bytes = random_blocks(t, out, in, 6);
    WeightMatrix w = WeightMatrix::view(t, out, in, bytes, nullptr);
    std::vector<int32_t> map(static_cast<size_t>(out));
    for (int64_t r = 0; r < out; ++r)
      map[static_cast<size_t>(r)] = static_cast<int32_t>((r * 7) % out);
    w.set_row_map(map);
    const Tensor bias = random_tensor({out}, 7, kScale);
    for (int64_t rows : {1, 5, 130}) {
      const Tensor x = random_tensor({rows, in}, 8, kScale);
      Tensor cpu, gpu;
      linear(cpu_, x, w, bias, cpu);
      linear(gpu_ctx, x, w, bias, gpu);
      EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance) << rows;
    }
  }
}

TEST_F(CudaOps, GatedMlpMatchesCpu) {
  const Tensor x = random_tensor({40, 64}, 9, kScale), g = random_tensor({96, 64}, 10, 0.3f),
               u = random_tensor({96, 64}, 11, 0.3f), d = random_tensor({64, 96}, 12, 0.3f);
  Tensor cpu, gpu;
  gated_mlp(cpu_, x, g, u, d, cpu);
  gated_mlp(*gpu_, x, g, u, d, gpu);
  EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance);
}

TEST_F(CudaOps, CausalAttentionWithMaskMatchesCpu) {
  const int64_t n_head = 6, n_kv_head = 2, seq = 77, d_head = 64;
  const Tensor q = random_tensor({n_head, seq, d_head}, 13, 0.5f),
               k = random_tensor({n_kv_head, seq, d_head}, 14, 0.5f),
               v = random_tensor({n_kv_head, seq, d_head}, 15, kScale);
  std::vector<AttentionMaskSpan> mask{
      {.kv_head = 1, .q_begin = 10, .q_end = seq, .keys = {0, 3, 9}},
      {.kv_head = 0, .q_begin = 0, .q_end = 1, .keys = {0}},  // row 0 sees nothing
      {.kv_head = 0, .q_begin = 20, .q_end = 50, .keys = {5, 6}, .value = -1.5f}};
  AttentionParams params;
  params.mask = mask;
  Tensor cpu, gpu;
  causal_attention(cpu_, q, k, v, cpu, params);
  causal_attention(*gpu_, q, k, v, gpu, params);
  EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance);
  params.mask = {};
  causal_attention(cpu_, q, k, v, cpu, params);
  causal_attention(*gpu_, q, k, v, gpu, params);
  EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance);
}

}  // namespace
}  // namespace ckv
