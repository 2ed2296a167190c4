// Dequantisation against the gguf package (tests/reference/make_quant_goldens.py): every
// supported type must give the same float32 bits as gguf.quants.dequantize, and the linear op
// on those blocks the product with gguf's values.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/quant.h"
#include "io/weight_matrix.h"
#include "ops/context.h"
#include "ops/linear.h"
#include "random_blocks.h"
#include "test_util.h"

namespace {

const std::filesystem::path kQuantDir = std::filesystem::path(CKV_TEST_DATA_DIR) / "quant";

ckv::DType dtype_of(const std::string& name) {
  for (const ckv::DTypeTraits& t : ckv::kDTypeTraits) {
    if (t.name == name) return t.type;
  }
  throw std::runtime_error("unknown type in manifest: " + name);
}

nlohmann::json manifest() {
  std::ifstream f(kQuantDir / "manifest.json");
  return nlohmann::json::parse(f);
}

}  // namespace

TEST(Quant, ManifestCoversEveryType) {
  const nlohmann::json m = manifest();
  ASSERT_EQ(m.at("format_version").get<int>(), 1);
  std::set<std::string> types;
  for (const auto& e : m.at("types")) types.insert(e.at("type").get<std::string>());
  EXPECT_EQ(types, (std::set<std::string>{"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K",
                                          "Q6_K", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q5_K"}));
  // Every stored type of the table (io/dtype.h) has its golden, under its GGUF type id.
  std::set<std::string> table;
  for (const ckv::DTypeTraits& t : ckv::kDTypeTraits) table.insert(t.name);
  EXPECT_EQ(types, table);
  for (const auto& e : m.at("types"))
    EXPECT_EQ(e.at("ggml_type").get<uint32_t>(),
              ckv::dtype_traits(dtype_of(e.at("type"))).ggml_type)
        << e.at("type");
}

TEST(Quant, BitEqualToGgufPackage) {
  const nlohmann::json m = manifest();  // kept alive: the loop iterates into it
  for (const auto& e : m.at("types")) {
    const std::string name = e.at("type").get<std::string>();
    SCOPED_TRACE(name);
    const ckv::DType t = dtype_of(name);
    const std::vector<uint8_t> in =
        ckv::test::read_file_bytes(kQuantDir / e.at("input").get<std::string>());
    const std::vector<uint8_t> out =
        ckv::test::read_file_bytes(kQuantDir / e.at("output").get<std::string>());
    const auto n = e.at("elements").get<int64_t>();
    ASSERT_EQ(in.size(), ckv::storage_bytes(t, n));
    ASSERT_EQ(out.size(), static_cast<size_t>(n) * 4);
    std::vector<float> got(static_cast<size_t>(n));
    ckv::dequantize(t, in, got);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t want_bits = 0;
      std::memcpy(&want_bits, out.data() + 4 * i, 4);
      const auto got_bits = std::bit_cast<uint32_t>(got[static_cast<size_t>(i)]);
      if (got_bits != want_bits && mismatches++ < 5) {
        ADD_FAILURE() << name << " element " << i << ": got " << got[static_cast<size_t>(i)]
                      << " (0x" << std::hex << got_bits << "), gguf gives "
                      << std::bit_cast<float>(want_bits) << " (0x" << want_bits << std::dec << ")";
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(Quant, SizesFollowGgmlBlockTable) {
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q8_0, 64), 68u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q4_0, 32), 18u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q4_1, 32), 20u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q4_K, 256), 144u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q6_K, 512), 420u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::BF16, 3), 6u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q5_0, 64), 44u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q5_1, 32), 24u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q2_K, 256), 84u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q3_K, 512), 220u);
  EXPECT_EQ(ckv::storage_bytes(ckv::DType::Q5_K, 256), 176u);
}

TEST(Quant, RejectsPartialBlocksAndWrongSizes) {
  EXPECT_THROW(ckv::storage_bytes(ckv::DType::Q4_K, 255), ckv::FormatError);
  EXPECT_THROW(ckv::storage_bytes(ckv::DType::Q8_0, -32), ckv::FormatError);
  std::vector<uint8_t> src(33);
  std::vector<float> dst(32);
  EXPECT_THROW(ckv::dequantize(ckv::DType::Q8_0, src, dst), ckv::FormatError);
}

TEST(Quant, HalfPrecisionSpecialValues) {
  EXPECT_EQ(ckv::f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(ckv::f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(ckv::f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(ckv::f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(ckv::f16_to_f32(0x7C00)));
  EXPECT_TRUE(std::isnan(ckv::f16_to_f32(0x7E00)));
  EXPECT_EQ(std::bit_cast<uint32_t>(ckv::f16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(ckv::bf16_to_f32(0x3F80), 1.0f);
}

// The linear op end to end on the golden blocks of every block type (the float types' goldens
// hold values up to 1e38, whose products overflow float32): x W^T with W the stored
// blocks (as [rows, 256]), against the double-precision product with gguf-py's dequantised
// values, for a few rows (the fused decode path) and for more (the tiled path). Bound: each
// summation order is within (in + 1) u sum |x w| of the exact sum.
TEST(Quant, LinearOnGoldenBlocksEqualsTheProductWithGgufValues) {
  const nlohmann::json m = manifest();
  ckv::ExecContext ctx({.threads = 2});
  for (const auto& e : m.at("types")) {
    const std::string name = e.at("type").get<std::string>();
    SCOPED_TRACE(name);
    const ckv::DType t = dtype_of(name);
    if (ckv::block_elements(t) == 1) continue;
    const std::vector<uint8_t> in =
        ckv::test::read_file_bytes(kQuantDir / e.at("input").get<std::string>());
    const std::vector<uint8_t> out =
        ckv::test::read_file_bytes(kQuantDir / e.at("output").get<std::string>());
    const int64_t cols = 256, rows = e.at("elements").get<int64_t>() / cols;
    const ckv::WeightMatrix w = ckv::WeightMatrix::view(t, rows, cols, in, nullptr);
    std::vector<float> want_w(static_cast<size_t>(rows * cols));  // gguf-py's values
    std::memcpy(want_w.data(), out.data(), want_w.size() * 4);
    for (int64_t n : {int64_t{1}, ckv::kLinearFewRows, ckv::kLinearFewRows + 3}) {
      SCOPED_TRACE(n);
      const ckv::Tensor x = ckv::random_tensor({n, cols}, 7);
      ckv::Tensor y;
      ckv::linear(ctx, x, w, ckv::Tensor(), y);
      ASSERT_EQ(y.shape(), (std::vector<int64_t>{n, rows}));
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < rows; ++o) {
          double exact = 0, magnitude = 0;
          for (int64_t i = 0; i < cols; ++i) {
            const double p =
                double{x.data()[r * cols + i]} * want_w[static_cast<size_t>(o * cols + i)];
            exact += p;
            magnitude += std::abs(p);
          }
          EXPECT_LE(std::abs(y.data()[r * rows + o] - exact), (cols + 1) * 0x1p-24 * magnitude)
              << "row " << r << " out " << o;
        }
    }
  }
}
