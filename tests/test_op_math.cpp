// The CUDA kernels' per-element arithmetic (kernels/op_math.h, and the stored-type decoders of
// io/dtype_decode.h that the dequantisation kernel calls), run here on the CPU against the CPU
// ops and lib/io/quant's dequantisation, so a formula or index mistake in a kernel is caught
// without a GPU (the kernels call these same functions). What this cannot check is
// the launch geometry; tests/test_cuda_ops.cpp does that where a device exists.
// Products are rounded one at a time here as in lib/io/quant.cpp (and as the device does
// with __fmul_rn): no fused multiply-adds in this file.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "core/thread_pool.h"
#include "io/dtype_decode.h"
#include "io/quant.h"
#include "io/weight_matrix.h"
#include "op_math.h"
#include "ops/attention.h"
#include "ops/context.h"
#include "ops/device_path.h"
#include "ops/mlp.h"
#include "ops/reduce.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "random_blocks.h"

namespace ckv {
namespace {

// max |a - b| / max |b|.
double relative_error(std::span<const float> a, std::span<const float> b) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, double{std::abs(b[i])});
    worst = std::max(worst, double{std::abs(a[i] - b[i])});
  }
  return scale == 0 ? worst : worst / scale;
}

// f16_to_f32 (one function for host and device) against the binary16 formula, for every
// bit pattern: (-1)^s * m * 2^-24 for exponent 0, (-1)^s * (1024 + m) * 2^(e - 25) else,
// inf or NaN (payload in the top mantissa bits) for exponent 31.
TEST(OpMath, HalfToFloatEqualsTheLibraryForEveryBitPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const uint32_t e = (h >> 10) & 31, m = h & 1023;
    const float sign = (h & 0x8000) ? -1.0f : 1.0f;
    const float got = f16_to_f32(bits);
    if (e == 31) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), ((h & 0x8000u) << 16) | 0x7F800000u | (m << 13)) << h;
    } else {
      const float want =
          e == 0 ? sign * std::ldexp(static_cast<float>(m), -24)
                 : sign * std::ldexp(static_cast<float>(1024 + m), static_cast<int>(e) - 25);
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << h;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(bits)), h << 16) << h;
  }
}

// Each stored type element by element with the device kernel's indexing (decode_row_element:
// the element of a row) against lib/io/quant's block-by-block conversion, bit for bit, with
// the geometry of cuda_ops.h's DeviceWeight.
TEST(OpMath, DequantElementEqualsTheCpuDequantiserInEveryFormat) {
  for (const DTypeTraits& traits : kDTypeTraits) {
    const DType t = traits.type;
    SCOPED_TRACE(std::string(dtype_name(t)));
    EXPECT_EQ(traits.block_elements, block_elements(t));
    EXPECT_EQ(traits.block_bytes, block_bytes(t));
    const int64_t rows = 5, cols = 512;
    const std::vector<uint8_t> bytes = random_blocks(t, rows, cols, 21);
    const WeightMatrix w = WeightMatrix::view(t, rows, cols, bytes, nullptr);
    const Tensor want = w.to_f32();  // [rows, cols]
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const float got = decode_row_element(t, bytes.data() + r * w.row_bytes(), c);
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want.data()[r * cols + c]))
            << "row " << r << " col " << c;
      }
  }
}

// The kernel's row: sum of squares (any order; here the CPU's), rms_inv, rms_scale.
TEST(OpMath, RmsNormRowEqualsTheCpuOp) {
  ExecContext ctx;
  for (int64_t cols : {7, 64, 576}) {
    const Tensor x = random_tensor({9, cols}, 22), w = random_tensor({cols}, 23);
    Tensor want;
    rms_norm(ctx, x, w, 1e-5f, want);
    std::vector<float> got(static_cast<size_t>(x.numel()));
    for (int64_t r = 0; r < 9; ++r) {
      const float inv =
          op_math::rms_inv(detail::sum_squares_fixed_order(x.data() + r * cols, cols), cols, 1e-5f);
      for (int64_t c = 0; c < cols; ++c)
        got[static_cast<size_t>(r * cols + c)] =
            op_math::rms_scale(x.data()[r * cols + c], inv, w.data()[c]);
    }
    // The same formula, but the compiler may contract the sum of squares into fused
    // multiply-adds in one translation unit and not in the other: a few float32 ulps
    // (2^-23 relative each), where a wrong formula or index errs by far more.
    EXPECT_LE(relative_error(got, want.span()), 4 * 0x1p-23) << cols;
  }
}

// The kernel's pair indexing (head, position, i) and rotation against the CPU op.
TEST(OpMath, RopeRotationEqualsTheCpuOp) {
  ExecContext ctx;
  std::vector<float> inv_freq(16);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(10000.0f, -static_cast<float>(i) / 16.0f);
  const RopeTable table = make_rope_table(inv_freq, 64);
  const int64_t heads = 3, seq = 20, half = 16, first = 30;
  Tensor want = random_tensor({heads, seq, 2 * half}, 24);
  Tensor got = want;
  apply_rope(ctx, want, table, first);
  const float* cos_rows = table.cos.data() + first * half;  // what the kernel receives
  const float* sin_rows = table.sin.data() + first * half;
  for (int64_t p = 0; p < heads * seq * half; ++p) {  // the kernel's loop, one pair per step
    const int64_t i = p % half, row = p / half, pos = row % seq;
    float* r = got.data() + row * 2 * half;
    op_math::rope_rotate(r[i], r[i + half], cos_rows[pos * half + i], sin_rows[pos * half + i]);
  }
  EXPECT_LE(relative_error(got.span(), want.span()), 1e-6);
}

TEST(OpMath, SiluMulEqualsTheCpuOp) {
  ExecContext ctx({.threads = 2});
  Tensor want = random_tensor({40000}, 25, 8.0f);
  const Tensor up = random_tensor({40000}, 26);
  std::vector<float> got(want.span().begin(), want.span().end());
  for (size_t i = 0; i < got.size(); ++i) got[i] = op_math::silu_mul(got[i], up.data()[i]);
  silu_mul(ctx, want, up);
  EXPECT_LE(relative_error(got, want.span()), 1e-6);  // exp: scalar here, vectorised there
}

// The attention kernel's loop on the CPU: one query row at a time, keys 0..row, the mask
// grouped by key (detail::attention_mask_by_key, what the kernel receives), the online softmax
// update; against the CPU op's blocked GEMM-and-softmax.
TEST(OpMath, OnlineSoftmaxAttentionEqualsTheCpuOp) {
  const int64_t n_head = 4, n_kv_head = 2, seq = 45, d_head = 24;
  const Tensor q = random_tensor({n_head, seq, d_head}, 27),
               k = random_tensor({n_kv_head, seq, d_head}, 28),
               v = random_tensor({n_kv_head, seq, d_head}, 29);
  const std::vector<AttentionMaskSpan> spans{
      {.kv_head = 1, .q_begin = 5, .q_end = seq, .keys = {0, 2, 4}},
      {.kv_head = 0, .q_begin = 0, .q_end = 2, .keys = {0, 1}},
      {.kv_head = 1, .q_begin = 10, .q_end = 30, .keys = {2, 8}, .value = 2.5f},
      {.kv_head = 1, .q_begin = 12, .q_end = 20, .keys = {8}, .value = -0.75f}};
  ExecContext ctx;
  AttentionParams params;
  params.mask = spans;
  Tensor want;
  causal_attention(ctx, q, k, v, want, params);  // [seq, n_head*d_head]

  const detail::AttentionMaskByKey mask = detail::attention_mask_by_key(spans, n_kv_head, seq);
  ASSERT_EQ(mask.offsets.back(), 3 + 2 + 2 + 1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
  std::vector<float> got(static_cast<size_t>(seq * n_head * d_head));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t row = 0; row < seq; ++row) {
      const int64_t g = h / (n_head / n_kv_head);
      const float* q_row = q.data() + (h * seq + row) * d_head;
      std::vector<float> acc(static_cast<size_t>(d_head), 0.0f);
      op_math::SoftmaxState state = op_math::softmax_start();
      for (int64_t j = 0; j <= row; ++j) {
        const float* k_row = k.data() + (g * seq + j) * d_head;
        float dot = 0;
        for (int64_t d = 0; d < d_head; ++d) dot += q_row[d] * k_row[d];
        float logit = dot * scale;
        for (int64_t e = mask.offsets[static_cast<size_t>(g * seq + j)];
             e < mask.offsets[static_cast<size_t>(g * seq + j + 1)]; ++e)
          if (mask.q_begin[static_cast<size_t>(e)] <= row &&
              row < mask.q_end[static_cast<size_t>(e)])
            logit += mask.value[static_cast<size_t>(e)];
        const op_math::SoftmaxStep step = op_math::softmax_update(state, logit);
        const float* v_row = v.data() + (g * seq + j) * d_head;
        for (int64_t d = 0; d < d_head; ++d)
          acc[static_cast<size_t>(d)] =
              acc[static_cast<size_t>(d)] * step.rescale + step.weight * v_row[d];
      }
      for (int64_t d = 0; d < d_head; ++d)
        got[static_cast<size_t>(row * n_head * d_head + h * d_head + d)] =
            op_math::softmax_finish(state, acc[static_cast<size_t>(d)]);
    }
  EXPECT_LE(relative_error(got, want.span()), 1e-5);
  // Rows 0 and 1 of KV head 0's query heads see no key at all: 0, as the CPU op gives.
  for (int64_t d = 0; d < d_head; ++d) EXPECT_EQ(got[static_cast<size_t>(d)], 0.0f);
}

}  // namespace
}  // namespace ckv
