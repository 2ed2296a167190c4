// safetensors reader against files written by the safetensors package
// (tests/reference/make_loader_data.py) and against crafted bad headers.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace {

// A safetensors file from a header text and a data buffer.
std::vector<uint8_t> make_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out.append(data_bytes, '\0');
  return {out.begin(), out.end()};
}

ckv::SafetensorsFile parse(const std::vector<uint8_t>& bytes) {
  return ckv::SafetensorsFile(ckv::MappedFile::from_memory(bytes, "crafted.safetensors"));
}

// Expects E with a message that names the file and contains `what`.
template <typename E>
void expect_error(const std::vector<uint8_t>& bytes, const std::string& what) {
  try {
    parse(bytes);
    ADD_FAILURE() << "no error; expected one containing '" << what << "'";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("crafted.safetensors: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

}  // namespace

TEST(Safetensors, RoundTripMatchesPythonPackage) {
  std::ifstream f(ckv::test::kLoadersDir / "roundtrip.expected.json");
  const nlohmann::json want = nlohmann::json::parse(f);
  ASSERT_EQ(want.at("format_version").get<int>(), 1);
  const ckv::SafetensorsFile file(ckv::test::kLoadersDir / "roundtrip.safetensors");
  EXPECT_EQ(file.tensors().size(), want.at("tensors").size());
  for (const auto& [key, value] : want.at("metadata").items()) {
    EXPECT_EQ(file.metadata().at(key), value.get<std::string>());
  }
  for (const auto& [name, t] : want.at("tensors").items()) {
    SCOPED_TRACE(name);
    const ckv::TensorInfo* info = file.find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->shape, t.at("shape").get<std::vector<int64_t>>());
    const std::map<std::string, std::string> dtypes = {
        {"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"}};
    EXPECT_EQ(ckv::dtype_name(info->dtype), dtypes.at(t.at("dtype").get<std::string>()));
    const ckv::Tensor got = file.load_f32(name);
    const auto bits = t.at("f32_bits").get<std::vector<int32_t>>();
    ASSERT_EQ(static_cast<size_t>(got.numel()), bits.size());
    for (size_t i = 0; i < bits.size(); ++i) {
      EXPECT_EQ(std::bit_cast<int32_t>(got.data()[i]), bits[i]) << "element " << i;
    }
  }
  EXPECT_THROW(file.load_f32("nope"), ckv::FormatError);
}

TEST(Safetensors, ShardedDirectory) {
  const ckv::SafetensorsDir dir(ckv::test::kLoadersDir / "tiny_qwen2");
  EXPECT_NE(dir.find("model.embed_tokens.weight"), nullptr);
  EXPECT_NE(dir.find("model.layers.1.mlp.down_proj.weight"), nullptr);
  EXPECT_EQ(dir.find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(dir.load_f32("model.layers.0.self_attn.q_proj.bias").shape(),
            (std::vector<int64_t>{32}));
}

TEST(Safetensors, MissingFilesAndDirectories) {
  EXPECT_THROW(ckv::SafetensorsFile(ckv::test::kLoadersDir / "absent.safetensors"), ckv::IoError);
  EXPECT_THROW(ckv::SafetensorsDir(ckv::test::kLoadersDir / "tiny_llama_absent"), ckv::FormatError);
}

TEST(Safetensors, EveryTruncationIsAFormatError) {
  const std::vector<uint8_t> good =
      ckv::test::read_file_bytes(ckv::test::kLoadersDir / "roundtrip.safetensors");
  ASSERT_GT(good.size(), 100u);
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_THROW(parse(prefix), ckv::FormatError) << "prefix of " << n << " bytes";
  }
  EXPECT_NO_THROW(parse(good));
}

TEST(Safetensors, BadHeaders) {
  const std::string entry = R"("t": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]})";
  EXPECT_NO_THROW(parse(make_file("{" + entry + "}  ", 16)));  // space padding is allowed
  expect_error<ckv::FormatError>(make_file("{" + entry, 16), "not valid JSON");
  expect_error<ckv::FormatError>(make_file("[1, 2]", 0), "not a JSON object");
  expect_error<ckv::FormatError>(make_file("{" + entry + "}", 15), "outside");
  expect_error<ckv::FormatError>(make_file("{" + entry + "}", 20), "cover 16 bytes");
  expect_error<ckv::FormatError>(
      make_file(R"({"t": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", 16),
      "need 24");
  expect_error<ckv::FormatError>(
      make_file(R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", 0),
      "non-negative");
  expect_error<ckv::FormatError>(
      make_file(
          R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})",
          0),
      "overflows");
  expect_error<ckv::FormatError>(
      make_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8), "outside");
  expect_error<ckv::FormatError>(
      make_file(
          R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 18446744073709551615]}})", 8),
      "outside");
  expect_error<ckv::FormatError>(
      make_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                12),
      "overlaps");
  expect_error<ckv::FormatError>(
      make_file(R"({"t": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}})", 8),
      "unknown dtype");
  expect_error<ckv::UnsupportedError>(
      make_file(R"({"t": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8), "I64");
  expect_error<ckv::FormatError>(make_file(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})", 4),
                                 "dtype");
  expect_error<ckv::FormatError>(make_file(R"({"__metadata__": {"k": 1}, )" + entry + "}", 16),
                                 "__metadata__");
}

TEST(Safetensors, HeaderSizeCap) {
  std::vector<uint8_t> bytes(16, ' ');
  const uint64_t n = 100'000'001;
  std::memcpy(bytes.data(), &n, 8);
  expect_error<ckv::FormatError>(bytes, "exceeds the limit");
  const uint64_t big = UINT64_MAX;
  std::memcpy(bytes.data(), &big, 8);
  expect_error<ckv::FormatError>(bytes, "exceeds the limit");
}

TEST(Safetensors, IndexJson) {
  const auto map = ckv::parse_safetensors_index(
      R"({"metadata": {"total_size": 8}, "weight_map": {"a": "x.safetensors"}})", "index.json");
  EXPECT_EQ(map.at("a"), "x.safetensors");
  EXPECT_THROW(ckv::parse_safetensors_index(R"({"weight_map": {"a": "../x"}})", "i"),
               ckv::FormatError);
  EXPECT_THROW(ckv::parse_safetensors_index(R"({"weight_map": {"a": 3}})", "i"), ckv::FormatError);
  EXPECT_THROW(ckv::parse_safetensors_index(R"({"metadata": {}})", "i"), ckv::FormatError);
  EXPECT_THROW(ckv::parse_safetensors_index("{", "i"), ckv::FormatError);
}
