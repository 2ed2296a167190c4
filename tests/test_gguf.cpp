// GGUF reader: the real default model against what the gguf package reads from it
// (tests/data/loaders/default_model_expected.json), files written by gguf-py, and crafted
// hostile files that must give typed errors naming the file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/weight_matrix.h"
#include "model/config.h"
#include "test_util.h"

namespace {

const std::filesystem::path kDefaultModel =
    std::filesystem::path(CKV_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";

// Writes GGUF bytes field by field, so each test can corrupt exactly one thing.
struct Builder {
  std::string b;
  Builder& u32(uint32_t v) { return raw(&v, 4); }
  Builder& u64(uint64_t v) { return raw(&v, 8); }
  Builder& str(const std::string& s) {
    u64(s.size());
    b += s;
    return *this;
  }
  Builder& raw(const void* p, size_t n) {
    b.append(static_cast<const char*>(p), n);
    return *this;
  }
  Builder& header(uint64_t tensors, uint64_t kvs) {
    b += "GGUF";
    return u32(3).u64(tensors).u64(kvs);
  }
  Builder& kv_u32(const std::string& key, uint32_t v) { return str(key).u32(4).u32(v); }
  Builder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  uint64_t off) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(off);
  }
  Builder& pad(size_t align = 32) {
    b.append((align - b.size() % align) % align, '\0');
    return *this;
  }
  Builder& data(size_t n) {
    b.append(n, '\x01');
    return *this;
  }
  std::vector<uint8_t> bytes() const { return {b.begin(), b.end()}; }
};

ckv::GgufFile parse(const std::vector<uint8_t>& bytes) {
  return ckv::GgufFile(ckv::MappedFile::from_memory(bytes, "crafted.gguf"));
}

template <typename E>
void expect_error(const std::vector<uint8_t>& bytes, const std::string& what) {
  try {
    parse(bytes);
    ADD_FAILURE() << "no error; expected one containing '" << what << "'";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("crafted.gguf: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  } catch (const ckv::Error& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
  }
}

// One valid F32 tensor [2, 4] (dims {4, 2}) with one key.
Builder valid() {
  Builder g;
  g.header(1, 1).kv_u32("general.alignment", 32).tensor("w", {4, 2}, 0, 0).pad().data(32);
  return g;
}

}  // namespace

TEST(Gguf, CraftedValidFileParses) {
  const auto bytes = valid().bytes();
  const ckv::GgufFile g = parse(bytes);
  ASSERT_EQ(g.tensors().size(), 1u);
  EXPECT_EQ(g.tensors()[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(g.get_int("general.alignment"), 32);
  EXPECT_EQ(g.get_int("absent"), std::nullopt);
  EXPECT_THROW(g.get_string("general.alignment"), ckv::FormatError);
  EXPECT_EQ(g.load_f32("w").numel(), 8);
}

TEST(Gguf, DefaultModelMatchesGgufPackage) {
  if (!std::filesystem::exists(kDefaultModel)) GTEST_SKIP() << "default model not fetched";
  std::ifstream f(ckv::test::kLoadersDir / "default_model_expected.json");
  const nlohmann::json want = nlohmann::json::parse(f);
  ASSERT_EQ(want.at("format_version").get<int>(), 1);
  const ckv::GgufFile g(kDefaultModel);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.tensors().size(), want.at("tensor_count").get<size_t>());
  std::map<std::string, size_t> counts;
  for (const auto& t : g.tensors()) ++counts[std::string(ckv::dtype_name(t.dtype))];
  EXPECT_EQ(counts, want.at("dtype_counts").get<decltype(counts)>());
  EXPECT_EQ(g.get_string_array("tokenizer.ggml.tokens")->size(),
            want.at("token_count").get<size_t>());
  EXPECT_EQ(g.get_string("tokenizer.ggml.model"), want.at("tokenizer_model").get<std::string>());

  const ckv::ModelConfig c = ckv::config_from_gguf(g);
  EXPECT_NO_THROW(c.validate("default"));
  EXPECT_EQ(c.arch_name, want.at("architecture").get<std::string>());
  EXPECT_EQ(c.n_layer, want.at("n_layer").get<int64_t>());
  EXPECT_EQ(c.d_model, want.at("d_model").get<int64_t>());
  EXPECT_EQ(c.d_ff, want.at("d_ff").get<int64_t>());
  EXPECT_EQ(c.n_head, want.at("n_head").get<int64_t>());
  EXPECT_EQ(c.n_kv_head, want.at("n_kv_head").get<int64_t>());
  EXPECT_EQ(c.d_head, want.at("d_head").get<int64_t>());
  EXPECT_EQ(c.vocab, want.at("vocab").get<int64_t>());
  EXPECT_EQ(c.context_length, want.at("context_length").get<int64_t>());
  EXPECT_EQ(c.tied_embeddings, want.at("tied_embeddings").get<bool>());
  EXPECT_EQ(static_cast<float>(c.rms_eps), static_cast<float>(want.at("rms_eps").get<double>()));
  EXPECT_EQ(c.rope_theta, want.at("rope_theta").get<double>());
  const ckv::TensorInfo* embd = g.find("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (std::vector<int64_t>{c.vocab, c.d_model}));
}

TEST(Gguf, UnsupportedTypeNamesTypeAndTensor) {
  try {
    ckv::GgufFile g(ckv::test::kLoadersDir / "unsupported_type.gguf");
    ADD_FAILURE() << "no error";
  } catch (const ckv::UnsupportedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unsupported_type.gguf: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("blk.0.attn_q.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("23 (IQ4_XS)"), std::string::npos) << msg;
  }
}

TEST(Gguf, MissingFile) {
  EXPECT_THROW(ckv::GgufFile(ckv::test::kLoadersDir / "absent.gguf"), ckv::IoError);
}

TEST(Gguf, EveryTruncationIsAFormatError) {
  // A small file copied at each length, so a read past the end is a heap overflow that
  // sanitizers catch; and every prefix of a larger one, viewed in place.
  const std::vector<uint8_t> small =
      ckv::test::read_file_bytes(ckv::test::kLoadersDir / "bad_arch.gguf");
  ASSERT_GT(small.size(), 100u);
  for (size_t n = 0; n < small.size(); ++n) {
    const std::vector<uint8_t> prefix(small.begin(), small.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_THROW(parse(prefix), ckv::FormatError) << "prefix of " << n << " bytes";
  }
  EXPECT_NO_THROW(parse(small));
  const std::vector<uint8_t> big =
      ckv::test::read_file_bytes(ckv::test::kLoadersDir / "tiny_qwen2.gguf");
  for (size_t n = 0; n < big.size(); ++n) {
    const auto bytes = std::span<const uint8_t>(big.data(), n);
    EXPECT_THROW(ckv::GgufFile(ckv::MappedFile::from_memory(bytes, "t.gguf")), ckv::FormatError)
        << "prefix of " << n << " bytes";
  }
}

TEST(Gguf, CorruptedHeaderFields) {
  expect_error<ckv::FormatError>(Builder().raw("GGUG", 4).u32(3).u64(0).u64(0).bytes(), "magic");
  expect_error<ckv::UnsupportedError>(Builder().raw("GGUF", 4).u32(1).u64(0).u64(0).bytes(),
                                      "version 1");
  expect_error<ckv::FormatError>(Builder().header(0, UINT64_MAX).bytes(), "metadata_kv_count");
  expect_error<ckv::FormatError>(Builder().header(1ULL << 60, 0).data(64).bytes(), "tensor_count");
  expect_error<ckv::FormatError>(Builder().header(0, 1).u64(UINT64_MAX).data(16).bytes(),
                                 "metadata key");
  expect_error<ckv::FormatError>(Builder().header(0, 1).str("k").u32(13).bytes(),
                                 "unknown value type 13");
  expect_error<ckv::FormatError>(
      Builder().header(0, 1).str("k").u32(9).u32(4).u64(1ULL << 40).data(16).bytes(),
      "array length");
  expect_error<ckv::FormatError>(Builder().header(0, 1).str("k").u32(9).u32(9).u64(1).bytes(),
                                 "nested");
  expect_error<ckv::FormatError>(Builder().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).bytes(),
                                 "appears twice");
  expect_error<ckv::FormatError>(Builder().header(0, 1).str("k").u32(7).raw("\x05", 1).bytes(),
                                 "bool");
}

TEST(Gguf, CorruptedTensorInfos) {
  auto one = [](const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t off,
                size_t data) {
    return Builder().header(1, 0).tensor(name, std::move(dims), type, off).pad().data(data).bytes();
  };
  expect_error<ckv::FormatError>(one("w", {1, 1, 1, 1, 1}, 0, 0, 32), "5 dimensions");
  expect_error<ckv::FormatError>(one("w", {1ULL << 32, 1ULL << 32}, 0, 0, 32), "overflows");
  expect_error<ckv::FormatError>(one("w", {UINT64_MAX}, 0, 0, 32), "overflows");
  expect_error<ckv::FormatError>(one("w", {4}, 99, 0, 32), "unknown ggml type id 99");
  expect_error<ckv::UnsupportedError>(one("w", {256}, 23, 0, 256), "'w' has ggml type 23 (IQ4_XS)");
  expect_error<ckv::FormatError>(one("w", {16}, 8, 0, 64), "whole number of Q8_0 blocks");
  expect_error<ckv::FormatError>(one("w", {4}, 0, 8, 64), "not a multiple of the alignment");
  expect_error<ckv::FormatError>(one("w", {8}, 0, 32, 48), "run past the end");
  expect_error<ckv::FormatError>(one("w", {8}, 0, 1ULL << 62, 48), "run past the end");
  expect_error<ckv::FormatError>(
      Builder().header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad().data(64).bytes(),
      "overlap");
  expect_error<ckv::FormatError>(
      Builder().header(2, 0).tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32).pad().data(64).bytes(),
      "appears twice");
  expect_error<ckv::FormatError>(Builder()
                                     .header(1, 1)
                                     .kv_u32("general.alignment", 24)
                                     .tensor("w", {4}, 0, 0)
                                     .pad()
                                     .data(32)
                                     .bytes(),
                                 "power of two");
  expect_error<ckv::FormatError>(Builder()
                                     .header(1, 1)
                                     .kv_u32("general.alignment", 0)
                                     .tensor("w", {4}, 0, 0)
                                     .pad()
                                     .data(32)
                                     .bytes(),
                                 "power of two");
}

// The second real model, Gemma 3 270M Q4_K_M (scripts/fetch_model.sh gemma3-270m; skipped
// when absent; CKV_GEMMA3_MODEL names another copy): every tensor is of a type ckv reads (an
// unknown one would throw when the file opens), and every element of every tensor converts
// to a finite float32. Its rows of 640 fall back to Q5_0 where Q4_K_M would use Q4_K.
TEST(Gguf, Gemma3_270mEveryTensorTypeIsReadable) {
  const char* env = std::getenv("CKV_GEMMA3_MODEL");
  const std::filesystem::path path = env != nullptr
                                         ? std::filesystem::path(env)
                                         : std::filesystem::path(CKV_TEST_DATA_DIR) / ".." / ".." /
                                               "models" / "gemma-3-270m-q4_k_m.gguf";
  if (!std::filesystem::exists(path))
    GTEST_SKIP() << path << " absent (scripts/fetch_model.sh gemma3-270m)";
  const ckv::GgufFile g(path);
  std::map<std::string, int> tensors_by_type;
  std::vector<float> row;
  for (const ckv::TensorInfo& t : g.tensors()) {
    ++tensors_by_type[std::string(ckv::dtype_name(t.dtype))];
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const int64_t cols = t.shape.back(), rows = numel / cols;
    const ckv::WeightMatrix w =
        ckv::WeightMatrix::view(t.dtype, rows, cols, g.stored_bytes(t.name), nullptr);
    row.resize(static_cast<size_t>(cols));
    int64_t non_finite = 0;
    for (int64_t r = 0; r < rows; ++r) {
      w.rows_f32(r, 1, row.data());
      for (float v : row) non_finite += std::isfinite(v) ? 0 : 1;
    }
    EXPECT_EQ(non_finite, 0) << t.name;
  }
  EXPECT_EQ(tensors_by_type,
            (std::map<std::string, int>{
                {"F32", 109}, {"Q4_K", 27}, {"Q5_0", 81}, {"Q6_K", 9}, {"Q8_0", 10}}));
}
