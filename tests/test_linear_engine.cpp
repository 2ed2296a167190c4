// The tiled (prefill) GEMM engine of ops/linear in this build (oneDNN when libdnnl-dev was
// found, else Eigen; docs/PERF.md "Prefill GEMM engine") and --compute-dtype bf16:
//  - float32: within float32's rounding of a double-precision product, for every stored
//    dtype, and bit-identical whatever the pool size (1, 2, 3 threads);
//  - bf16: within the bound that bf16's 8 significant bits give (below), really rounded
//    (not float32 in disguise), bit-identical across pool sizes; refused with a UsageError
//    by a build without oneDNN;
//  - linear_rows_batch: each weight's linear_rows, bit for bit; so is gated_mlp's fused
//    gate/up/gating task against the separate calls;
//  - the default model: logits and every layer bit-identical across --threads 1/2/3 in both
//    compute dtypes, and bf16 logits within a stated tolerance of float32's.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/weight_matrix.h"
#include "logits_util.h"
#include "model/forward.h"
#include "model/model.h"
#include "ops/linear.h"
#include "ops/mlp.h"
#include "random_blocks.h"
#include "test_util.h"

namespace ckv {
namespace {

using test::same_bits;

namespace fs = std::filesystem;

constexpr double kF32Unit = 0x1p-24;  // float32 unit roundoff
constexpr double kBf16Unit = 0x1p-8;  // bfloat16 unit roundoff: 8 significant bits, nearest even

float to_bf16(float v) {
  return static_cast<float>(Eigen::bfloat16(v));
}

constexpr DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16,
                            DType::Q8_0, DType::Q4_1, DType::Q4_K};

int64_t cols_of(DType t) {
  return t == DType::Q4_K ? 512 : 32 * 19;
}

// Each compute dtype this build has, bf16 once per kernel this CPU runs (oneDNN emulates the
// native matmul's bf16 instructions on an AVX-512 CPU without them, and has no bf16 matmul
// below AVX-512).
struct ComputeCase {
  ComputeDType compute;
  Bf16Kernel kernel;
  std::string name() const {
    return compute == ComputeDType::F32 ? "f32" : "bf16 " + std::string(bf16_kernel_name(kernel));
  }
};

std::vector<ComputeCase> available_computes() {
  std::vector<ComputeCase> c{{ComputeDType::F32, Bf16Kernel::None}};
  if (compute_dtype_available(ComputeDType::BF16))
    for (const Bf16Kernel k : {Bf16Kernel::NativeMatmul, Bf16Kernel::SgemmOnRoundedValues})
      if (detail::bf16_kernel_runs(k)) c.push_back({ComputeDType::BF16, k});
  return c;
}

// Runs bf16 on one kernel for the guard's lifetime.
class ForcedBf16Kernel {
 public:
  explicit ForcedBf16Kernel(Bf16Kernel k) { detail::force_bf16_kernel(k); }
  ~ForcedBf16Kernel() { detail::force_bf16_kernel(std::nullopt); }
  ForcedBf16Kernel(const ForcedBf16Kernel&) = delete;
  ForcedBf16Kernel& operator=(const ForcedBf16Kernel&) = delete;
};

// y = x W^T + b against a double-precision sum: float32 within (in+1) u |x||W| (any order of
// summation); bf16 within the rounding of x and W to 8 bits plus the float32 sum of the
// rounded products (exact in float32: 8 x 8 significant bits fit in 24):
//   |y - y_exact| <= (2 u_bf16 + u_bf16^2) S + (in+1) u_f32 (1 + u_bf16)^2 S,   S = sum |x_i w_i| +
//   |b|
// and, against the double sum of the bf16-rounded x and W themselves, within the float32 sum
// term alone, which a float32 product (no rounding of x and W) would break.
TEST(LinearEngine, WithinTheRoundingOfEachComputeDtype) {
  const int64_t out = 211,
                rows = 37;  // several column chunks, the last one short; > kLinearFewRows
  ThreadPool pool(2);
  for (const ComputeCase& c : available_computes())
    for (const DType t : kTypes) {
      SCOPED_TRACE(c.name() + " " + std::string(dtype_name(t)));
      const ComputeDType compute = c.compute;
      const ForcedBf16Kernel forced(c.kernel);
      const int64_t in = cols_of(t);
      const std::vector<uint8_t> bytes = random_blocks(t, out, in, 41);
      const WeightMatrix w = WeightMatrix::view(t, out, in, bytes, nullptr);
      const Tensor dense = w.to_f32(), bias = random_tensor({1, out}, 42),
                   x = random_tensor({rows, in}, 43);
      std::vector<float> y(static_cast<size_t>(rows * out));
      detail::linear_tiled_cpu(x.data(), in, w, bias.data(), y.data(), out, rows, pool, compute);
      double beyond_f32_sum = 0;  // the largest |y - exact| in units of the float32 sum's bound
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          const float b = bias.data()[o];
          double exact = b, rounded = b, magnitude = std::abs(b);
          for (int64_t i = 0; i < in; ++i) {
            const float xv = x.data()[r * in + i], wv = dense.data()[o * in + i];
            exact += double{xv} * wv;
            rounded += double{to_bf16(xv)} * to_bf16(wv);
            magnitude += std::abs(double{xv} * wv);
          }
          const double got = y[static_cast<size_t>(r * out + o)];
          const double sum_bound = (in + 1) * kF32Unit * magnitude;
          if (compute == ComputeDType::F32) {
            EXPECT_LE(std::abs(got - exact), sum_bound) << r << " " << o;
          } else {
            const double grow = (1 + kBf16Unit) * (1 + kBf16Unit);
            EXPECT_LE(std::abs(got - exact),
                      (2 * kBf16Unit + kBf16Unit * kBf16Unit) * magnitude + sum_bound * grow)
                << r << " " << o;
            EXPECT_LE(std::abs(got - rounded), sum_bound * grow) << r << " " << o;
            beyond_f32_sum = std::max(beyond_f32_sum, std::abs(got - exact) / sum_bound);
          }
        }
      // bf16 really rounds x and W: somewhere the error exceeds what float32 sums allow.
      if (compute == ComputeDType::BF16) {
        EXPECT_GT(beyond_f32_sum, 1.0);
      }
    }
}

// Each column chunk is one single-threaded GEMM on one pool thread (oneDNN's OpenMP team
// held at one thread), so the pool size changes nothing, bit for bit.
TEST(LinearEngine, TiledPathIndependentOfThreadsBitForBit) {
  for (const ComputeCase& c : available_computes())
    for (const DType t : {DType::F32, DType::Q4_1, DType::BF16}) {
      SCOPED_TRACE(c.name() + " " + std::string(dtype_name(t)));
      const ComputeDType compute = c.compute;
      const ForcedBf16Kernel forced(c.kernel);
      ExecContext one({.threads = 1, .compute = compute}), two({.threads = 2, .compute = compute}),
          three({.threads = 3, .compute = compute});
      const int64_t in = cols_of(t), out = 600;
      const std::vector<uint8_t> bytes = random_blocks(t, out, in, 51);
      const WeightMatrix w = WeightMatrix::view(t, out, in, bytes, nullptr);
      const Tensor x = random_tensor({300, in}, 52), bias = random_tensor({1, out}, 53);
      for (const int64_t rows : {int64_t{1}, int64_t{9}, int64_t{300}}) {
        SCOPED_TRACE(rows);
        Tensor y1, y2, y3;
        linear_rows(one, x, 0, rows, w, bias, y1);
        linear_rows(two, x, 0, rows, w, bias, y2);
        linear_rows(three, x, 0, rows, w, bias, y3);
        EXPECT_TRUE(same_bits(y1.span(), y2.span()));
        EXPECT_TRUE(same_bits(y1.span(), y3.span()));
      }
    }
}

// Under bf16 a call of at most kLinearFewRows rows (a decode step, a prefill's last-row
// logits) takes the fused float32 path, so it equals the float32 call bit for bit; one more
// row takes the bf16 tiles and differs from float32 by bf16's rounding.
TEST(LinearEngine, Bf16LeavesDecodeSizedCallsInFloat32) {
  if (!compute_dtype_available(ComputeDType::BF16)) GTEST_SKIP() << "built without oneDNN";
  for (const ComputeCase& c : available_computes()) {
    if (c.compute != ComputeDType::BF16) continue;
    SCOPED_TRACE(c.name());
    const ForcedBf16Kernel forced(c.kernel);
    ExecContext f32({.threads = 2, .compute = ComputeDType::F32}), bf16({.threads = 2, .compute = ComputeDType::BF16});
    for (const DType t : {DType::Q4_1, DType::Q8_0}) {
      SCOPED_TRACE(std::string(dtype_name(t)));
      const int64_t in = cols_of(t), out = 96;
      const std::vector<uint8_t> bytes = random_blocks(t, out, in, 61);
      const WeightMatrix w = WeightMatrix::view(t, out, in, bytes, nullptr);
      const Tensor x = random_tensor({kLinearFewRows + 1, in}, 62), bias = random_tensor({1, out}, 63);
      for (const int64_t rows : {int64_t{1}, kLinearFewRows, kLinearFewRows + 1}) {
        SCOPED_TRACE(rows);
        Tensor y32, y16;
        linear_rows(f32, x, 0, rows, w, bias, y32);
        linear_rows(bf16, x, 0, rows, w, bias, y16);
        EXPECT_EQ(same_bits(y32.span(), y16.span()), rows <= kLinearFewRows);
      }
    }
  }
}

// linear_rows_batch (a layer's q, k and v in one dispatch) gives each weight what
// linear_rows gives it, bit for bit, on every path: tiled float32 (one parallel_for over all
// the column chunks), few rows and bf16 (one weight after the other); with and without bias.
TEST(LinearEngine, BatchEqualsOneCallPerWeightBitForBit) {
  for (const ComputeCase& c : available_computes()) {
    SCOPED_TRACE(c.name());
    const ForcedBf16Kernel forced(c.kernel);
    ExecContext two({.threads = 2, .compute = c.compute});
    const int64_t in = 32 * 19;
    const std::vector<uint8_t> bq = random_blocks(DType::Q4_1, 600, in, 61), bk = random_blocks(DType::Q8_0, 200, in, 62),
                               bv = random_blocks(DType::F32, 72, in, 63);
    const WeightMatrix wq = WeightMatrix::view(DType::Q4_1, 600, in, bq, nullptr),
                       wk = WeightMatrix::view(DType::Q8_0, 200, in, bk, nullptr),
                       wv = WeightMatrix::view(DType::F32, 72, in, bv, nullptr);
    const Tensor x = random_tensor({300, in}, 64), bias_q = random_tensor({1, 600}, 65), no_bias;
    for (const int64_t rows : {int64_t{1}, int64_t{8}, int64_t{9}, int64_t{300}}) {
      SCOPED_TRACE(rows);
      Tensor yq, yk, yv, want;
      const LinearTarget targets[] = {{&wq, &bias_q, &yq}, {&wk, &no_bias, &yk}, {&wv, &no_bias, &yv}};
      linear_rows_batch(two, x, 0, rows, targets);
      linear_rows(two, x, 0, rows, wq, bias_q, want);
      EXPECT_TRUE(same_bits(yq.span(), want.span()));
      linear_rows(two, x, 0, rows, wk, no_bias, want);
      EXPECT_TRUE(same_bits(yk.span(), want.span()));
      linear_rows(two, x, 0, rows, wv, no_bias, want);
      EXPECT_TRUE(same_bits(yv.span(), want.span()));
    }
  }
  // Two weights writing one tensor would race: refused before any work.
  ExecContext two({.threads = 2});
  const std::vector<uint8_t> bytes = random_blocks(DType::Q8_0, 64, 64, 66);
  const WeightMatrix w = WeightMatrix::view(DType::Q8_0, 64, 64, bytes, nullptr);
  const Tensor x = random_tensor({16, 64}, 67), no_bias;
  Tensor y;
  const LinearTarget same[] = {{&w, &no_bias, &y}, {&w, &no_bias, &y}};
  EXPECT_THROW(linear_rows_batch(two, x, 0, 16, same), InputError);
}

// gated_mlp's float32 path gates each column chunk of d_ff in the task that computed it
// (detail::gate_up_silu_cpu): the same bits as linear_rows for gate and up, silu_mul, and the
// down projection, at 1 and 2 threads. d_ff 200 makes column chunks of 32 and a last one of 8
// floats (a partial vector).
TEST(LinearEngine, GatedMlpFusedGatingEqualsSeparateCallsBitForBit) {
  const int64_t in = 32 * 19, d_ff = 200, rows = 300;
  const std::vector<uint8_t> bg = random_blocks(DType::Q4_1, d_ff, in, 71), bu = random_blocks(DType::Q8_0, d_ff, in, 72);
  const WeightMatrix wg = WeightMatrix::view(DType::Q4_1, d_ff, in, bg, nullptr),
                     wu = WeightMatrix::view(DType::Q8_0, d_ff, in, bu, nullptr);
  const Tensor down = random_tensor({in, d_ff}, 73, 0.05f), x = random_tensor({rows, in}, 74), no_bias;
  const WeightMatrix wd = WeightMatrix::borrow(down);
  for (const int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    ExecContext ctx({.threads = threads});
    Tensor y, gate, up, want;
    gated_mlp(ctx, x, wg, wu, wd, y);
    linear_rows(ctx, x, 0, rows, wg, no_bias, gate);
    linear_rows(ctx, x, 0, rows, wu, no_bias, up);
    silu_mul(ctx, gate, up);
    linear(ctx, gate, wd, no_bias, want);
    EXPECT_TRUE(same_bits(y.span(), want.span()));
  }
}

// Where the CPU has no bf16 instructions, bf16 is float32 sgemm over x and W rounded to bf16
// (Bf16Kernel::SgemmOnRoundedValues): bit for bit the float32 path on inputs that Eigen's
// bfloat16 cast rounded, including ties, NaN, infinities and subnormals in x.
TEST(LinearEngine, Bf16OnRoundedValuesIsFloat32OnBf16Inputs) {
  if (!compute_dtype_available(ComputeDType::BF16)) GTEST_SKIP() << "a build without oneDNN";
  const ForcedBf16Kernel forced(Bf16Kernel::SgemmOnRoundedValues);
  const int64_t rows = 23, in = 96, out = 70;
  Tensor x = random_tensor({rows, in}, 61);
  const Tensor w = random_tensor({out, in}, 62), bias = random_tensor({1, out}, 63);
  // Row rows-2: exact ties (to even: one down, one up), subnormals and a signed zero, whose
  // outputs stay finite, so a wrong rounding shows. Row rows-1: the largest finite float (to
  // infinity in bf16), infinities and NaNs.
  const float ties[] = {std::bit_cast<float>(0x3f808000u), std::bit_cast<float>(0x3f818000u),
                        std::bit_cast<float>(0xbf808000u), std::bit_cast<float>(0x00008000u),
                        std::bit_cast<float>(0x80018000u), -0.0f};
  const float specials[] = {std::bit_cast<float>(0x7f7fffffu),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::bit_cast<float>(0x7f800001u), std::bit_cast<float>(0xffc12345u)};
  for (int64_t i = 0; i < in; ++i) x.data()[(rows - 2) * in + i] = ties[i % std::size(ties)];
  std::copy(std::begin(specials), std::end(specials), x.data() + (rows - 1) * in);
  Tensor x_rounded = x, w_rounded = w;
  for (float& v : x_rounded.span()) v = to_bf16(v);
  for (float& v : w_rounded.span()) v = to_bf16(v);
  for (const int threads : {1, 2}) {
    ExecContext bf16({.threads = threads, .compute = ComputeDType::BF16}),
        f32({.threads = threads, .compute = ComputeDType::F32});
    Tensor y_bf16, y_f32;
    linear(bf16, x, WeightMatrix::borrow(w), bias, y_bf16);
    linear(f32, x_rounded, WeightMatrix::borrow(w_rounded), bias, y_f32);
    EXPECT_TRUE(same_bits(y_bf16.span(), y_f32.span())) << threads;
    // Every row but the last is finite (its outputs are infinities and NaNs).
    EXPECT_EQ(first_non_finite(std::span<const float>(y_bf16.data(), (rows - 1) * out)), -1);
    EXPECT_NE(first_non_finite(std::span<const float>(y_bf16.data() + (rows - 1) * out, out)), -1);
  }
}

TEST(LinearEngine, Bf16RefusedByABuildWithoutOneDnn) {
  EXPECT_TRUE(compute_dtype_available(ComputeDType::F32));
  EXPECT_EQ(compute_dtype_available(ComputeDType::BF16), gemm_engine_name() == "onednn");
  if (compute_dtype_available(ComputeDType::BF16))
    GTEST_SKIP() << "this build has oneDNN's bf16 matmul";
  const Tensor x = random_tensor({16, 64}, 1), w = random_tensor({32, 64}, 2);
  // The context refuses it, so no linear layer ever runs in float32 while asked for bf16.
  EXPECT_THROW(ExecContext({.threads = 1, .compute = ComputeDType::BF16}), UsageError);
  const Model m = load_model(fs::path(CKV_TEST_DATA_DIR) / "models/tiny_llama_gqa");
  try {
    Forward f(m, {.threads = 1, .compute = ComputeDType::BF16});
    ADD_FAILURE() << "a Forward in bf16 was made without oneDNN";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("built without oneDNN"), std::string::npos) << e.what();
  }
}

fs::path default_model() {
  return fs::path(CKV_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// The real model in both compute dtypes: logits of a 300-token prefill (rows > kLinearFewRows,
// the lm_head in its narrowed chunks) bit-identical across 1, 2 and 3 threads.
TEST(LinearEngine, DefaultModelIndependentOfThreadsBitForBit) {
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " absent";
  const Model model = load_model(default_model());
  const std::vector<int32_t> tokens = test::random_tokens(300, model.config.vocab, 11);
  ForwardRequest req;
  req.logit_rows = {0, 150, 299};
  for (const ComputeCase& c : available_computes()) {
    SCOPED_TRACE(c.name());
    const ComputeDType compute = c.compute;
    const ForcedBf16Kernel forced(c.kernel);
    const Tensor base = Forward(model, {.threads = 1, .compute = compute}).run(tokens, req).logits;
    for (const int threads : {2, 3})
      EXPECT_TRUE(same_bits(
          Forward(model, {.threads = threads, .compute = compute}).run(tokens, req).logits.span(),
          base.span()))
          << threads;
  }
}

// bf16 against float32 on the default model (30 layers of 7 linear layers, and the lm_head).
// Rounding to bf16 errs by at most u = 2^-8 of a value (RMS u/sqrt(3) for uniform rounding
// errors); a linear layer's output, with its input and weight both rounded, by about
// sqrt(2/3) u of its magnitude (RMS; errors of random sign add in quadrature like the terms).
// The network does not amplify that much: measured on README text (docs/PERF.md), the logits'
// RMS error is 1.1 u of their RMS and the largest error 2.6-3.1 u of its row's logit range.
// Stated tolerance: RMS error <= 4 u = 2^-6 of the logits' RMS, and every row's largest error
// <= 8 u = 2^-5 of that row's range (max - min logit). A float32 run in disguise fails the
// second check below (the error would be 0).
TEST(LinearEngine, DefaultModelBf16LogitsNearFloat32) {
  if (!compute_dtype_available(ComputeDType::BF16)) GTEST_SKIP() << "built without oneDNN";
  if (!fs::exists(default_model())) GTEST_SKIP() << default_model() << " absent";
  const Model model = load_model(default_model());
  const std::vector<int32_t> tokens = test::random_tokens(200, model.config.vocab, 12);
  ForwardRequest req;
  req.logit_rows = {10, 100, 150, 199};
  const Tensor f32 = Forward(model, {.threads = 2}).run(tokens, req).logits;
  for (const Bf16Kernel kernel : {Bf16Kernel::NativeMatmul, Bf16Kernel::SgemmOnRoundedValues}) {
    if (!detail::bf16_kernel_runs(kernel)) continue;  // no bf16 matmul below AVX-512
    SCOPED_TRACE(std::string(bf16_kernel_name(kernel)));
    const ForcedBf16Kernel forced(kernel);
    const Tensor bf16 =
        Forward(model, {.threads = 2, .compute = ComputeDType::BF16}).run(tokens, req).logits;
    const int64_t vocab = f32.dim(1);
    double sum_sq = 0, sum_sq_diff = 0, worst_of_range = 0;
    for (int64_t r = 0; r < f32.dim(0); ++r) {
      const std::span<const float> a =
          f32.span().subspan(static_cast<size_t>(r * vocab), static_cast<size_t>(vocab));
      const std::span<const float> b =
          bf16.span().subspan(static_cast<size_t>(r * vocab), static_cast<size_t>(vocab));
      const auto [lo, hi] = std::minmax_element(a.begin(), a.end());
      double worst = 0;
      for (size_t j = 0; j < a.size(); ++j) {
        const double d = double{b[j]} - a[j];
        sum_sq += double{a[j]} * a[j];
        sum_sq_diff += d * d;
        worst = std::max(worst, std::abs(d));
      }
      worst_of_range = std::max(worst_of_range, worst / (double{*hi} - *lo));
    }
    const double rms = std::sqrt(sum_sq_diff / sum_sq);
    RecordProperty(std::string(bf16_kernel_name(kernel)) + "_rms_error_over_u",
                   std::to_string(rms / kBf16Unit));
    RecordProperty(std::string(bf16_kernel_name(kernel)) + "_max_error_of_range_over_u",
                   std::to_string(worst_of_range / kBf16Unit));
    EXPECT_LE(rms, 4 * kBf16Unit);
    EXPECT_LE(worst_of_range, 8 * kBf16Unit);
    EXPECT_GT(rms, kBf16Unit / 8);  // it does compute in bf16
  }
}

}  // namespace
}  // namespace ckv
