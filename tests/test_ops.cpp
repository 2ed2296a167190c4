// CPU ops against direct double-precision evaluations of their formulas (docs/MODELS.md).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/rope_freq.h"
#include "ops/attention.h"
#include "ops/context.h"
#include "ops/linear.h"
#include "ops/mlp.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "cuda_ops.h"
#include "random_blocks.h"

namespace ckv {
namespace {

// A one-thread CPU context for the ops that need no other.
ExecContext& cpu_ctx() {
  static ExecContext ctx;
  return ctx;
}

double max_abs_diff(std::span<const float> a, std::span<const double> b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(ThreadPool, RunsEveryTaskOnceAndRethrows) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(1000, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(10,
                                 [](int64_t i) {
                                   if (i == 7) throw InputError("x");
                                 }),
               InputError);
  pool.parallel_for(4, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });  // still usable
  EXPECT_EQ(hits[3].load(), 2);
}

TEST(RmsNorm, MatchesFormula) {
  const Tensor x = random_tensor({5, 24}, 1, 3.0f), w = random_tensor({24}, 2);
  Tensor y;
  rms_norm(cpu_ctx(), x, w, 1e-5f, y);
  std::vector<double> ref(static_cast<size_t>(x.numel()));
  for (int64_t r = 0; r < 5; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < 24; ++c) ms += std::pow(double{x.data()[r * 24 + c]}, 2) / 24;
    for (int64_t c = 0; c < 24; ++c)
      ref[static_cast<size_t>(r * 24 + c)] =
          x.data()[r * 24 + c] / std::sqrt(ms + 1e-5) * w.data()[c];
  }
  EXPECT_LT(max_abs_diff(y.span(), ref), 1e-5 * 3);
  EXPECT_THROW(rms_norm(cpu_ctx(), x, random_tensor({23}, 3), 1e-5f, y), InputError);
}

TEST(Rope, InvFreqDefaultAndLlama3Regimes) {
  ModelConfig c;
  c.d_head = 8;
  c.rope_theta = 10000.0;
  auto inv = rope_inv_freq(c, {});
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i)
    EXPECT_FLOAT_EQ(inv[static_cast<size_t>(i)], std::pow(10000.0, -2.0 * i / 8));
  // llama3 with original length 128, low 1, high 4: wavelengths 2*pi/inv are 6.3, 63, 628,
  // 6283: the first is kept (< 128/4), the last two are divided by the factor (> 128/1)
  // and the second is interpolated with s = (128/w - 1)/(4 - 1).
  c.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 128, {}, {}, 1.0};
  inv = rope_inv_freq(c, {});
  const double inv1 = std::pow(10000.0, -0.25), s = (128 / (2 * std::numbers::pi / inv1) - 1) / 3;
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[1], (1 - s) * inv1 / 8 + s * inv1, 1e-7);
  EXPECT_FLOAT_EQ(inv[2], static_cast<float>(std::pow(10000.0, -0.5) / 8));
  EXPECT_FLOAT_EQ(inv[3], static_cast<float>(std::pow(10000.0, -0.75) / 8));
  // GGUF rope_freqs factors replace the config's scaling: inv / factor.
  const std::vector<float> factors{1.0f, 2.0f, 4.0f, 8.0f};
  inv = rope_inv_freq(c, factors);
  EXPECT_FLOAT_EQ(inv[2], static_cast<float>(std::pow(10000.0, -0.5) / 4));
  EXPECT_THROW(rope_inv_freq(c, std::vector<float>{1.0f}), FormatError);
}

// The frequencies each layer rotated by (what expectedattention undoes): a Gemma 3 local
// layer its own unscaled base, a global one the model's; longrope its long factors once a
// pass ends past the original context. Each against the formula from the config's numbers.
TEST(Rope, EachLayerRotatesByItsOwnFrequencies) {
  ModelConfig c;
  c.n_layer = 2;
  c.d_head = 8;
  c.rope_theta = 10000.0;
  c.rope_local_theta = 100.0;
  c.sliding_window = 4;
  c.sliding_layers = {1, 0};
  c.rope_scaling = {"linear", 2.0, 1.0, 4.0, 128, {}, {}, 1.0};
  const auto local = layer_rope_inv_freq(c, {}, 0, 16), global = layer_rope_inv_freq(c, {}, 1, 16);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(local[static_cast<size_t>(i)], static_cast<float>(std::pow(100.0, -2.0 * i / 8)));
    EXPECT_FLOAT_EQ(global[static_cast<size_t>(i)], static_cast<float>(std::pow(10000.0, -2.0 * i / 8)) / 2.0f);
  }
  ModelConfig phi;
  phi.d_head = 8;
  phi.rope_theta = 10000.0;
  phi.rope_scaling = {"longrope", 1.0, 1.0, 4.0, 32, {1, 1, 2, 2}, {4, 4, 8, 8}, 1.2};
  const auto short_f = layer_rope_inv_freq(phi, {}, 0, 32), long_f = layer_rope_inv_freq(phi, {}, 0, 33);
  EXPECT_FLOAT_EQ(short_f[2], 1.0f / (2.0f * static_cast<float>(std::pow(10000.0, 0.5))));
  EXPECT_FLOAT_EQ(long_f[2], 1.0f / (8.0f * static_cast<float>(std::pow(10000.0, 0.5))));
}

TEST(Rope, RotateHalfFormula) {
  ModelConfig c;
  c.d_head = 16;
  c.rope_theta = 500.0;
  const auto inv = rope_inv_freq(c, {});
  const RopeTable table = make_rope_table(inv, 40);
  Tensor x = random_tensor({3, 40, 16}, 4);
  const Tensor before = x;
  apply_rope(cpu_ctx(), x, table);
  std::vector<double> ref(static_cast<size_t>(x.numel()));
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t p = 0; p < 40; ++p)
      for (int64_t i = 0; i < 8; ++i) {
        const double angle =
            static_cast<double>(p) * std::pow(500.0, -2.0 * static_cast<double>(i) / 16);
        const float* in = before.data() + (h * 40 + p) * 16;
        double* out = ref.data() + (h * 40 + p) * 16;
        out[i] = in[i] * std::cos(angle) - in[i + 8] * std::sin(angle);
        out[i + 8] = in[i + 8] * std::cos(angle) + in[i] * std::sin(angle);
      }
  // fp32 angles (as HF forms them) differ from exact ones by ~pos * 2^-24 radians.
  EXPECT_LT(max_abs_diff(x.span(), ref), 2e-5);
}

TEST(Linear, MatchesNaiveAndIsThreadIndependent) {
  const Tensor x = random_tensor({37, 50}, 5), w = random_tensor({200, 50}, 6),
               b = random_tensor({200}, 7);
  ExecContext one({.threads = 1}), three({.threads = 3});
  Tensor y1, y3;
  linear(one, x, w, b, y1);
  linear(three, x, w, b, y3);
  std::vector<double> ref(37 * 200);
  for (int64_t r = 0; r < 37; ++r)
    for (int64_t o = 0; o < 200; ++o) {
      double s = b.data()[o];
      for (int64_t i = 0; i < 50; ++i) s += double{x.data()[r * 50 + i]} * w.data()[o * 50 + i];
      ref[static_cast<size_t>(r * 200 + o)] = s;
    }
  EXPECT_LT(max_abs_diff(y1.span(), ref), 1e-4);
  EXPECT_EQ(y1.storage(), y3.storage());  // bit-identical across thread counts
  EXPECT_THROW(linear(one, x, random_tensor({4, 49}, 8), Tensor(), y1), InputError);
}

TEST(GatedMlp, MatchesFormula) {
  const Tensor x = random_tensor({6, 16}, 9), g = random_tensor({40, 16}, 10, 0.5f),
               u = random_tensor({40, 16}, 11, 0.5f), d = random_tensor({16, 40}, 12, 0.5f);
  ExecContext ctx({.threads = 2});
  Tensor y;
  gated_mlp(ctx, x, g, u, d, y);
  std::vector<double> ref(6 * 16, 0.0);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t f = 0; f < 40; ++f) {
      double gate = 0, up = 0;
      for (int64_t i = 0; i < 16; ++i) {
        gate += double{x.data()[r * 16 + i]} * g.data()[f * 16 + i];
        up += double{x.data()[r * 16 + i]} * u.data()[f * 16 + i];
      }
      const double hidden = gate / (1 + std::exp(-gate)) * up;
      for (int64_t o = 0; o < 16; ++o)
        ref[static_cast<size_t>(r * 16 + o)] += hidden * d.data()[o * 40 + f];
    }
  EXPECT_LT(max_abs_diff(y.span(), ref), 1e-4);
}

// Long inputs go through the MLP in row chunks (issue 12, item 8): the intermediates are
// [kLinearRowChunk, d_ff], not [rows, d_ff], and every row equals the one-pass composition
// (full-height linear, silu*up, linear), bit for bit on this machine's Eigen.
TEST(GatedMlp, RowChunksBoundScratchAndMatchOnePass) {
  const int64_t rows = 2 * kLinearRowChunk + 37, d_model = 64, d_ff = 96;
  const Tensor x = random_tensor({rows, d_model}, 13), g = random_tensor({d_ff, d_model}, 14, 0.3f),
               u = random_tensor({d_ff, d_model}, 15, 0.3f), d = random_tensor({d_model, d_ff}, 16, 0.3f);
  ExecContext ctx({.threads = 2});
  Tensor y;
  gated_mlp(ctx, x, g, u, d, y);
  // the last chunk's rows: never more than kLinearRowChunk
  EXPECT_EQ(ctx.scratch()[ScratchSlot::MlpGate].dim(0), 37);
  Tensor gate, up, want;
  linear(ctx, x, g, Tensor(), gate);
  linear(ctx, x, u, Tensor(), up);
  detail::silu_mul_cpu(gate.data(), up.data(), gate.numel(), ctx.pool());
  linear(ctx, gate, d, Tensor(), want);
  ASSERT_EQ(y.shape(), want.shape());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    worst = std::max(worst, double{std::abs(y.data()[i] - want.data()[i])});
    scale = std::max(scale, double{std::abs(want.data()[i])});
  }
  EXPECT_LE(worst, 1e-6 * scale);
  RecordProperty("max_abs_diff", std::to_string(worst));
}

TEST(Linear, RowRangeEqualsThoseRowsOfTheFullProduct) {
  const Tensor x = random_tensor({50, 32}, 17), w = random_tensor({40, 32}, 18);
  ExecContext ctx({.threads = 2});
  Tensor full, part;
  linear(ctx, x, w, Tensor(), full);
  linear_rows(ctx, x, 10, 25, WeightMatrix::borrow(w), Tensor(), part);
  ASSERT_EQ(part.shape(), (std::vector<int64_t>{25, 40}));
  for (int64_t r = 0; r < 25; ++r)
    for (int64_t o = 0; o < 40; ++o) EXPECT_NEAR(part.data()[r * 40 + o], full.data()[(r + 10) * 40 + o], 1e-5);
  EXPECT_THROW(linear_rows(ctx, x, 40, 11, WeightMatrix::borrow(w), Tensor(), part), InputError);
}

// The execution context (issue 12, item 4): made once, it carries the device, the pool and
// the scratch every op uses.
TEST(ExecContext, CpuContextCarriesPoolScratchAndDevice) {
  ExecContext ctx({.threads = 3});
  EXPECT_EQ(ctx.device(), Device::CPU);
  EXPECT_EQ(ctx.device_string(), "cpu");
  EXPECT_EQ(ctx.threads(), 3);
  EXPECT_EQ(ctx.pool().size(), 3);
  EXPECT_EQ(ctx.stream(), nullptr);
  EXPECT_EQ(ctx.cuda(), nullptr);
  EXPECT_EQ(ctx.scratch().bytes(), 0);
  const Tensor x = random_tensor({5, 16}, 40), g = random_tensor({24, 16}, 41), d = random_tensor({16, 24}, 42);
  Tensor y;
  gated_mlp(ctx, x, g, g, d, y);
  EXPECT_EQ(ctx.scratch().bytes(), 2 * 5 * 24 * 4);  // gate and up, [5, d_ff] each
}

TEST(ExecContext, CudaWithoutADeviceIsATypedError) {
  if (cuda::available()) GTEST_SKIP() << "a CUDA device is present";
  try {
    ExecContext ctx({.device = Device::CUDA});
    ADD_FAILURE() << "a CUDA context was made without a device";
  } catch (const DeviceError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();  // one line
  }
}

}  // namespace
}  // namespace ckv
