// The few-row (decode) linear path of ops/linear (rows <= kLinearFewRows): a fused
// dequantise-and-dot kernel per stored dtype. It is checked against the float32 reference
// (the weight converted by rows_f32, then the tiled GEMM, and a double-precision sum) with
// the rounding bound linear.h states, for every dtype and every row count up to the
// threshold, and checked to be independent of the thread count bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <numeric>
#include <random>

#include "core/thread_pool.h"
#include "io/weight_matrix.h"
#include "ops/linear.h"
#include "random_blocks.h"
#include "test_util.h"

namespace ckv {
namespace {

using test::same_bits;

constexpr double kUnit = 0x1p-24;  // float32 unit roundoff

// Columns per dtype: not a multiple of 64 elements where the dtype allows it, so the
// kernels' tails (a lone 32-element block, F32/F16/BF16 elements past the last 16) run.
int64_t test_cols(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return 32 * 17 + 16 + 5;  // 565: 8 groups of 64, 3 pieces of 16, 5 scalars
    default:
      // An odd number of 32-element blocks; three 256-element super-blocks.
      return block_elements(t) == 32 ? 32 * 17 : 256 * 3;
  }
}

// Every stored type (io/dtype.h).
const std::vector<DType> kAllTypes = [] {
  std::vector<DType> all;
  for (const DTypeTraits& t : kDTypeTraits) all.push_back(t.type);
  return all;
}();

TEST(LinearFewRows, WithinTheStatedRoundingOfTheFloat32ProductForEveryDtype) {
  const int64_t out = 83;  // several chunks, the last one short
  ThreadPool pool(2);
  for (DType t : kAllTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t in = test_cols(t);
    const std::vector<uint8_t> bytes = random_blocks(t, out, in, 21);
    WeightMatrix w = WeightMatrix::view(t, out, in, bytes, nullptr);
    std::vector<int32_t> map(static_cast<size_t>(out));
    std::iota(map.begin(), map.end(), 0);
    std::shuffle(map.begin(), map.end(), std::mt19937(22));
    w.set_row_map(map);
    const Tensor dense = w.to_f32();
    const Tensor bias = random_tensor({1, out}, 23);
    double worst_ratio = 0;  // max |got - want| / (in * u * sum |x w|) over all outputs
    for (int64_t rows = 1; rows <= kLinearFewRows; ++rows) {
      SCOPED_TRACE(rows);
      const Tensor x = random_tensor({rows, in}, static_cast<uint32_t>(24 + rows));
      std::vector<float> got(static_cast<size_t>(rows * out)), want(got.size());
      detail::linear_few_rows_cpu(x.data(), in, w, bias.data(), got.data(), out, rows, pool);
      detail::linear_tiled_cpu(x.data(), in, WeightMatrix::borrow(dense), bias.data(), want.data(),
                               out, rows, pool);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          double exact = bias.data()[o], magnitude = std::abs(bias.data()[o]);
          for (int64_t i = 0; i < in; ++i) {
            const double p = double{x.data()[r * in + i]} * dense.data()[o * in + i];
            exact += p;
            magnitude += std::abs(p);
          }
          const auto at = static_cast<size_t>(r * out + o);
          // Each order of summation is within (in+1) u * magnitude of the exact sum (the
          // products with FMA are exact or rounded once); the two paths within twice that.
          const double bound = (in + 1) * kUnit * magnitude;
          EXPECT_LE(std::abs(got[at] - exact), bound) << "row " << r << " out " << o;
          EXPECT_LE(std::abs(double{got[at]} - want[at]), 2 * bound) << "row " << r << " out " << o;
          worst_ratio = std::max(worst_ratio,
                                 std::abs(double{got[at]} - want[at]) / (in * kUnit * magnitude));
        }
    }
    // How tight the stated bound is in practice (typically far below 1).
    RecordProperty(std::string("worst_ratio_") + std::string(dtype_name(t)),
                   std::to_string(worst_ratio));
  }
}

TEST(LinearFewRows, IndependentOfThreadsAndOfTheOtherRowsBitForBit) {
  const int64_t out = 150;
  ExecContext one_ctx({.threads = 1}), two_ctx({.threads = 2}), five_ctx({.threads = 5});
  ThreadPool &two = two_ctx.pool(), &five = five_ctx.pool();
  for (DType t : kAllTypes) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const int64_t in = test_cols(t);
    const std::vector<uint8_t> bytes = random_blocks(t, out, in, 31);
    const WeightMatrix w = WeightMatrix::view(t, out, in, bytes, nullptr);
    const Tensor x = random_tensor({kLinearFewRows, in}, 32);
    for (int64_t rows = 1; rows <= kLinearFewRows; ++rows) {
      SCOPED_TRACE(rows);
      Tensor y1, y2, y5;
      linear_rows(one_ctx, x, 0, rows, w, Tensor(), y1);
      linear_rows(two_ctx, x, 0, rows, w, Tensor(), y2);
      linear_rows(five_ctx, x, 0, rows, w, Tensor(), y5);
      EXPECT_TRUE(same_bits(y1.span(), y2.span()));
      EXPECT_TRUE(same_bits(y1.span(), y5.span()));
      // linear() takes the fused path for these rows (the tiled one for a float32 weight
      // read in place), and the fused path gives each row what that row alone gives.
      std::vector<float> fused(static_cast<size_t>(rows * out)), tiled(fused.size());
      detail::linear_few_rows_cpu(x.data(), in, w, nullptr, fused.data(), out, rows, two);
      detail::linear_tiled_cpu(x.data(), in, w, nullptr, tiled.data(), out, rows, two);
      EXPECT_TRUE(same_bits(y2.span(), t == DType::F32 ? tiled : fused));
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> alone(static_cast<size_t>(out));
        detail::linear_few_rows_cpu(x.data() + r * in, in, w, nullptr, alone.data(), out, 1, five);
        EXPECT_TRUE(same_bits(alone, std::span<const float>(fused).subspan(
                                         static_cast<size_t>(r * out), static_cast<size_t>(out))));
      }
    }
  }
}

TEST(LinearFewRows, ChunkDependsOnShapeOnly) {
  for (int64_t out : {1, 15, 192, 576, 1536, 49152, 128256})
    for (int64_t in : {64, 576, 1536, 4096, 14336}) {
      const int64_t c = detail::linear_few_rows_chunk(out, in);
      EXPECT_GE(c, 16);
      EXPECT_EQ(c % 16, 0);
    }
}

}  // namespace
}  // namespace ckv
