// CUDA kernels against the CPU ops (the reference backend). Skipped without a device; a
// build without CUDA still checks that the launchers report it.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "cuda_ops.h"
#include "ops/linear.h"
#include "ops/rms_norm.h"

namespace ckv {
namespace {

// fp32 on both sides; the GPU's reduction order differs from Eigen's, so the tolerance is
// relative to the output's largest magnitude (STYLE.md: fp32 around 1e-5 relative).
constexpr double kFp32RelTolerance = 1e-5;

Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed) {
  Tensor t(std::move(shape));
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (float& x : t.span()) x = dist(rng);
  return t;
}

double relative_error(const Tensor& gpu, const Tensor& cpu) {
  const double scale = cpu.matrix().cwiseAbs().maxCoeff();
  return (gpu.matrix() - cpu.matrix()).cwiseAbs().maxCoeff() / scale;
}

TEST(CudaOps, ReportsMissingCuda) {
  if (cuda::available()) GTEST_SKIP() << "a CUDA device is present";
  float x = 1, w = 1, y = 0;
  // A typed error: one `ckv: error:` line, whether nvcc was absent or the device is.
  EXPECT_THROW(cuda::rms_norm(&x, &w, &y, 1, 1, 1e-5f), DeviceError);
}

TEST(CudaOps, RmsNormMatchesCpu) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device";
  // Widths below, at and above the block size, one not a multiple of the warp size.
  for (int64_t cols : {7, 256, 576, 4099}) {
    const Tensor x = random_tensor({33, cols}, 1), w = random_tensor({cols}, 2);
    Tensor cpu, gpu({33, cols});
    ExecContext ctx;
    rms_norm(ctx, x, w, 1e-5f, cpu);
    cuda::rms_norm(x.data(), w.data(), gpu.data(), 33, cols, 1e-5f);
    EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance) << cols;
  }
}

TEST(CudaOps, LinearMatchesCpu) {
  if (!cuda::available()) GTEST_SKIP() << "no CUDA device";
  const Tensor x = random_tensor({19, 130}, 3), w = random_tensor({70, 130}, 4);
  ExecContext ctx;
  Tensor cpu, gpu({19, 70});
  linear(ctx, x, w, Tensor(), cpu);
  cuda::linear(x.data(), w.data(), gpu.data(), 19, 130, 70);
  EXPECT_LE(relative_error(gpu, cpu), kFp32RelTolerance);
}

}  // namespace
}  // namespace ckv
