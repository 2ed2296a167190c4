// Tokenizers against references: HF `tokenizers` for tokenizer.json files, llama.cpp for GGUF
// vocabularies (tests/data/tokenizers/golden_*.json, made by
// tests/reference/make_tokenizer_goldens.py). Ids must match exactly.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/tokenizer.h"
#include "test_util.h"

namespace {

using nlohmann::json;

const json& golden(const std::string& name) {
  static std::map<std::string, json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::ifstream in(ckv::test::kTokenizersDir / name);
    json j = json::parse(in);
    EXPECT_EQ(j.at("format_version").get<int>(), 1);
    it = cache.emplace(name, std::move(j)).first;
  }
  return it->second;
}

// Every recorded string: ids without and with BOS, decode of the ids, and the strings
// encoded with special-token parsing off.
void expect_matches(const ckv::Tokenizer& tok, const json& g, const json& rec, bool check_decode) {
  const auto strings = g.at("strings").get<std::vector<std::string>>();
  for (size_t i = 0; i < strings.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "string " << i << ": " << json(strings[i]).dump());
    auto expected = rec.at("encode")[i].get<std::vector<int32_t>>();
    auto ids = tok.encode(strings[i], false, true);
    EXPECT_EQ(ids, expected);
    EXPECT_EQ(tok.encode(strings[i], true, true),
              rec.at("encode_bos")[i].get<std::vector<int32_t>>());
    if (check_decode) {
      EXPECT_EQ(tok.decode(expected), rec.at("decode")[i].get<std::string>());
    }
  }
  const auto plain = g.at("no_special_strings").get<std::vector<std::string>>();
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(tok.encode(plain[i], false, false),
              rec.at("no_special")[i].get<std::vector<int32_t>>())
        << json(plain[i]).dump();
  }
}

class HfFamily : public testing::TestWithParam<std::string> {};

TEST_P(HfFamily, IdsAndDecodeMatchHfTokenizers) {
  const json& g = golden("golden_hf.json");
  const json& rec = g.at("families").at(GetParam());
  auto tok =
      ckv::tokenizer_from_json(ckv::test::kTokenizersDir / rec.at("file").get<std::string>());
  EXPECT_EQ(tok->kind(), GetParam() == "spm" ? "spm" : "bpe");
  expect_matches(*tok, g, rec, true);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, HfFamily,
                         testing::Values("gpt2", "smollm", "llama3", "qwen2", "spm"));

class GgufVocab : public testing::TestWithParam<std::string> {};

TEST_P(GgufVocab, IdsAndDecodeMatchLlamaCpp) {
  const json& g = golden("golden_llamacpp.json");
  const json& rec = g.at("gguf").at(GetParam());
  ckv::GgufFile gguf(ckv::test::kTokenizersDir / rec.at("file").get<std::string>());
  auto tok = ckv::tokenizer_from_gguf(gguf);
  expect_matches(*tok, g, rec, true);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, GgufVocab,
                         testing::Values("gpt2", "gpt2-default", "smollm", "llama3", "qwen2",
                                         "spm"),
                         [](const testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Tokenizer, PreTokenizerNames) {
  std::map<std::string, std::string> expected = {{"gpt2", "gpt2"},     {"gpt2-default", "default"},
                                                 {"smollm", "smollm"}, {"llama3", "llama3"},
                                                 {"qwen2", "qwen2"},   {"spm", "none"}};
  for (const auto& [file, name] : expected) {
    ckv::GgufFile gguf(ckv::test::kTokenizersDir / (file + ".vocab.gguf"));
    EXPECT_EQ(ckv::tokenizer_from_gguf(gguf)->pre_tokenizer(), name) << file;
  }
}

// The default model: llama.cpp is the reference (transformers' conversion differs, see
// tests/reference/README-tokenizers.md); the chat template must render like transformers.
class DefaultModel : public testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::path(CKV_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::filesystem::exists(path_)) GTEST_SKIP() << "default model not present: " << path_;
    gguf_ = std::make_unique<ckv::GgufFile>(path_);
    tok_ = ckv::tokenizer_from_gguf(*gguf_);
  }
  std::filesystem::path path_;
  std::unique_ptr<ckv::GgufFile> gguf_;
  std::unique_ptr<ckv::Tokenizer> tok_;
};

TEST_F(DefaultModel, IdsMatchLlamaCpp) {
  const json& g = golden("golden_llamacpp.json");
  EXPECT_EQ(tok_->vocab_size(), 49152);
  EXPECT_EQ(tok_->pre_tokenizer(), "smollm");
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_id(), 2);
  expect_matches(*tok_, g, g.at("gguf").at("default_model"), true);
}

TEST_F(DefaultModel, ChatTemplateMatchesTransformers) {
  for (const auto& chat : golden("golden_llamacpp.json").at("default_model_chats")) {
    std::vector<ckv::ChatMessage> messages;
    for (const auto& m : chat.at("messages"))
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    EXPECT_EQ(tok_->apply_chat_template(messages, true), chat.at("rendered").get<std::string>());
    EXPECT_EQ(tok_->apply_chat_template(messages, false),
              chat.at("rendered_no_prompt").get<std::string>());
  }
}

// Gemma 3 270M's GGUF vocabulary (SentencePiece-style BPE, 262,144 tokens, byte fallback, no
// prefix space): llama.cpp's ids on the stress list. Its GGUF has no chat template; ckv
// renders Gemma's turn format (HF's template for a user message).
class Gemma3Model : public testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::path(CKV_SOURCE_DIR) / "models" / "gemma-3-270m-q4_k_m.gguf";
    if (!std::filesystem::exists(path_)) GTEST_SKIP() << "Gemma 3 270M not present: " << path_;
    gguf_ = std::make_unique<ckv::GgufFile>(path_);
    tok_ = ckv::tokenizer_from_gguf(*gguf_);
  }
  std::filesystem::path path_;
  std::unique_ptr<ckv::GgufFile> gguf_;
  std::unique_ptr<ckv::Tokenizer> tok_;
};

TEST_F(Gemma3Model, IdsMatchLlamaCpp) {
  const json& g = golden("golden_gemma3_llamacpp.json");
  EXPECT_EQ(tok_->vocab_size(), 262144);
  EXPECT_EQ(tok_->kind(), "spm");
  EXPECT_EQ(tok_->bos_id(), 2);
  EXPECT_EQ(tok_->eos_id(), 1);
  expect_matches(*tok_, g, g.at("gguf").at("gemma3_270m"), true);
}

TEST_F(Gemma3Model, ChatTemplateIsGemmas) {
  EXPECT_EQ(tok_->apply_chat_template({{"user", " Hi there \n"}}, true),
            "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(tok_->apply_chat_template({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}}, false),
            "<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n");
  const std::vector<int32_t> ids = tok_->encode(tok_->apply_chat_template({{"user", "Hi"}}, true), false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 2);  // <bos>, once
  EXPECT_EQ(tok_->decode({ids[1]}), "<start_of_turn>");
}

TEST_F(DefaultModel, FourThousandTokensInWellUnderASecond) {
  std::string text;
  for (int i = 0; i < 120; ++i)
    text += "The quick brown fox, number " + std::to_string(i * 7919) +
            ", jumps over the lazy dog; naïve café 你好 🤗\n";
  auto start = std::chrono::steady_clock::now();
  auto ids = tok_->encode(text);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(ids.size(), 3000u);
  EXPECT_LT(seconds, 0.5) << ids.size() << " tokens";
  EXPECT_EQ(tok_->decode(ids), text);
}

}  // namespace
