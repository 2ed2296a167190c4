// Weights in their stored dtype (issue 12, items 1-2): WeightMatrix views, the row map that
// undoes GGUF's llama Q/K permutation, and the tiled linear layer against the float32-at-load
// path that ckv used before (every matrix dequantised once at load). The tiled path converts
// each chunk's rows with the same dequantiser and multiplies them with the same Eigen GEMM on
// the same shapes, so it is expected to be bit-identical; these tests say whether it is.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/quant.h"
#include "io/weight_check.h"
#include "io/weight_matrix.h"
#include "model/forward.h"
#include "model/model.h"
#include "ops/linear.h"
#include "random_blocks.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::equal(a.span().begin(), a.span().end(), b.span().begin(),
                    [](float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); });
}

Tensor random_input(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor x({rows, cols});
  for (float& v : x.span()) v = u(rng);
  return x;
}

TEST(WeightMatrix, RowsAndRowMapMatchWholeDequantisation) {
  const int64_t rows = 12, cols = 512;
  for (const DTypeTraits& traits : kDTypeTraits) {  // every stored type (io/dtype.h)
    const DType t = traits.type;
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::vector<uint8_t> bytes = random_blocks(t, rows, cols, 1);
    WeightMatrix w = WeightMatrix::view(t, rows, cols, bytes, nullptr);
    EXPECT_EQ(w.row_bytes(), static_cast<int64_t>(storage_bytes(t, cols)));
    Tensor whole({rows, cols});
    dequantize(t, bytes, whole.span());
    EXPECT_TRUE(bit_equal(w.to_f32(), whole));
    std::vector<float> some(static_cast<size_t>(3 * cols));
    w.rows_f32(4, 3, some.data());
    EXPECT_TRUE(std::equal(some.begin(), some.end(), whole.data() + 4 * cols));

    std::vector<int32_t> map(static_cast<size_t>(rows));
    std::iota(map.rbegin(), map.rend(), 0);  // reversed rows
    w.set_row_map(map);
    const Tensor mapped = w.to_f32();
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_TRUE(std::equal(mapped.data() + r * cols, mapped.data() + (r + 1) * cols,
                             whole.data() + (rows - 1 - r) * cols));
    EXPECT_EQ(w.f32_rows(0), nullptr);  // a mapped matrix is never read in place
  }
}

TEST(WeightMatrix, RejectsBadShapesAndMaps) {
  const std::vector<uint8_t> bytes = random_blocks(DType::Q4_K, 2, 256, 2);
  EXPECT_THROW(WeightMatrix::view(DType::Q4_K, 2, 128, bytes, nullptr), FormatError);  // half a block
  EXPECT_THROW(WeightMatrix::view(DType::Q4_K, 3, 256, bytes, nullptr), FormatError);  // too few bytes
  WeightMatrix w = WeightMatrix::view(DType::Q4_K, 2, 256, bytes, nullptr);
  EXPECT_THROW(w.set_row_map({0, 0}), FormatError);
  EXPECT_THROW(w.set_row_map({0}), FormatError);
  EXPECT_THROW(w.set_row_map({0, 2}), FormatError);
  std::vector<float> out(256);
  EXPECT_THROW(w.rows_f32(1, 2, out.data()), InputError);
}

// Non-finite weights are found in the stored form: exactly for F32/F16/BF16, by the block
// scales for the block formats, with the element index in HF order (row map applied).
TEST(WeightMatrix, FindsNonFiniteValuesWithoutConverting) {
  const int64_t rows = 4, cols = 512;
  for (const DTypeTraits& traits : kDTypeTraits) {  // every stored type (io/dtype.h)
    const DType t = traits.type;
    SCOPED_TRACE(std::string(dtype_name(t)));
    std::vector<uint8_t> bytes = random_blocks(t, rows, cols, 9);
    EXPECT_EQ(first_non_finite(WeightMatrix::view(t, rows, cols, bytes, nullptr)), -1);
    // Stored row 2, second block (or element 300 for the plain types): a NaN/inf scale.
    const int64_t row_bytes = static_cast<int64_t>(storage_bytes(t, cols));
    const int64_t be = block_elements(t), bb = block_bytes(t);
    const int64_t elem = be == 1 ? 300 : be;  // first element the damage reaches
    const int64_t scale_at = be == 1 ? 0 : traits.f16_fields[0];  // the block's d (io/dtype.h)
    uint8_t* at = bytes.data() + 2 * row_bytes + (be == 1 ? 300 * bb : bb) + scale_at;
    if (t == DType::F32) {
      const float inf = std::numeric_limits<float>::infinity();
      std::memcpy(at, &inf, 4);
    } else if (t == DType::BF16) {
      at[0] = 0xC0, at[1] = 0x7F;  // NaN
    } else {
      at[0] = 0x00, at[1] = 0x7C;  // f16 +inf as the (first) scale
    }
    WeightMatrix w = WeightMatrix::view(t, rows, cols, bytes, nullptr);
    EXPECT_EQ(first_non_finite(w), 2 * cols + elem);
    EXPECT_THROW(check_finite("w", w), FormatError);
    w.set_row_map({3, 2, 1, 0});  // stored row 2 is HF row 1
    EXPECT_EQ(first_non_finite(w), cols + elem);
  }
}

// The tiled linear against the product with the weight dequantised first, for every stored
// dtype, with a bias, several chunks and 1 or 3 threads.
TEST(Linear, TiledEqualsDequantisedFirstBitForBit) {
  const int64_t rows = 37, in = 512, out = 200;
  const Tensor x = random_input(rows, in, 3), bias = random_input(1, out, 4);
  const Tensor b({out}, std::vector<float>(bias.span().begin(), bias.span().end()));
  ExecContext one({.threads = 1}), three({.threads = 3});
  for (const DTypeTraits& traits : kDTypeTraits) {  // every stored type (io/dtype.h)
    const DType t = traits.type;
    SCOPED_TRACE(std::string(dtype_name(t)));
    const std::vector<uint8_t> bytes = random_blocks(t, out, in, 5);
    WeightMatrix w = WeightMatrix::view(t, out, in, bytes, nullptr);
    std::vector<int32_t> map(static_cast<size_t>(out));
    std::iota(map.begin(), map.end(), 0);
    std::shuffle(map.begin(), map.end(), std::mt19937(6));
    w.set_row_map(map);
    const Tensor dense = w.to_f32();
    Tensor want, got1, got3;
    linear(one, x, dense, b, want);
    linear(one, x, w, b, got1);
    linear(three, x, w, b, got3);
    EXPECT_TRUE(bit_equal(got1, want));
    EXPECT_TRUE(bit_equal(got3, want));
  }
}

TEST(Linear, ColumnChunkDependsOnShapeOnlyAndBoundsTheTile) {
  EXPECT_EQ(detail::linear_column_chunk(49152, 576), 3072);  // default model lm_head: as before
  EXPECT_EQ(detail::linear_column_chunk(1536, 576), 96);
  EXPECT_EQ(detail::linear_column_chunk(192, 576), 32);
  // Llama-3.1-8B lm_head [128256, 4096]: a tile of 1024 rows, 16 MiB of float32.
  EXPECT_EQ(detail::linear_column_chunk(128256, 4096), 1024);
  EXPECT_LE(detail::linear_column_chunk(14336, 4096) * 4096 * 4, int64_t{16} << 20);
}

// Logits of every position through the tiled path (weights in their stored dtype) and
// through the float32-at-load path (dequantized_copy), for the tiny models of every
// architecture/format and the default model. Records the max abs difference.
void expect_paths_agree(const fs::path& path, int64_t seq) {
  SCOPED_TRACE(path.string());
  const Model m = load_model(path);
  const ModelWeights dense = dequantized_copy(m.weights);
  std::vector<int32_t> tokens(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i)
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % m.config.vocab);
  ForwardRequest req;
  for (int64_t i = 0; i < seq; ++i) req.logit_rows.push_back(i);
  Forward tiled(m.config, m.weights, {.threads = 2});
  Forward at_load(m.config, dense, {.threads = 2});
  const Tensor a = tiled.run(tokens, req).logits, b = at_load.run(tokens, req).logits;
  ASSERT_EQ(a.shape(), b.shape());
  double max_abs = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    max_abs = std::max(max_abs, double{std::abs(a.data()[i] - b.data()[i])});
  ::testing::Test::RecordProperty(path.filename().string() + "_max_abs_diff", std::to_string(max_abs));
  std::printf("%s: logits max abs diff tiled vs float32-at-load %g\n", path.filename().string().c_str(), max_abs);
  EXPECT_EQ(max_abs, 0.0);
  EXPECT_TRUE(bit_equal(a, b));
}

TEST(Weights, TiledPathIsBitIdenticalToFloat32AtLoad) {
  const fs::path dir = fs::path(CKV_TEST_DATA_DIR);
  for (const char* name : {"models/tiny_llama_quant.gguf", "models/tiny_llama3_rope.gguf",
                           "models/tiny_llama_gqa", "models/tiny_llama_tied", "models/tiny_qwen2_bias",
                           "loaders/tiny_llama.gguf", "loaders/tiny_qwen2", "loaders/tiny_qwen2.gguf"})
    expect_paths_agree(dir / name, 24);
  const fs::path default_model = fs::path(CKV_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (fs::exists(default_model)) expect_paths_agree(default_model, 64);
}

TEST(Weights, MatricesStayInTheirStoredDtype) {
  const fs::path default_model = fs::path(CKV_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(default_model)) GTEST_SKIP() << "default model not fetched";
  const Model m = load_model(default_model);
  EXPECT_EQ(m.weights.layers[0].w_gate.dtype(), DType::Q4_1);
  EXPECT_TRUE(m.weights.layers[0].wq.has_row_map());
  // The matrices are the file's bytes, not a float32 copy: less than the file itself.
  EXPECT_LT(m.weights.matrix_bytes(), fs::file_size(default_model));
}

}  // namespace
}  // namespace ckv
