// Tokenizer failure modes: each bad input raises the typed error naming it.
#include <fstream>

#include <gtest/gtest.h>

#include "core/error.h"
#include "io/gguf.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "test_util.h"

namespace {

std::filesystem::path write_temp(const std::string& name, const std::string& content) {
  auto dir = std::filesystem::temp_directory_path() / ("ckv_tok_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << content;
  return dir / name;
}

template <typename E, typename F>
void expect_error_naming(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, DecodeRejectsOutOfRangeIds) {
  auto tok = ckv::tokenizer_from_json(ckv::test::kTokenizersDir / "gpt2.tokenizer.json");
  EXPECT_THROW(tok->decode({1, static_cast<int32_t>(tok->vocab_size())}), ckv::InputError);
  EXPECT_THROW(tok->decode({-1}), ckv::InputError);
  EXPECT_THROW(tok->token_text(1 << 30), ckv::InputError);
  EXPECT_EQ(tok->decode({}), "");
}

TEST(TokenizerErrors, BadTokenizerJson) {
  expect_error_naming<ckv::IoError>(
      [] { ckv::tokenizer_from_json(ckv::test::kTokenizersDir / "absent.json"); }, "absent.json");
  auto junk = write_temp("junk.json", "{ not json");
  expect_error_naming<ckv::FormatError>([&] { ckv::tokenizer_from_json(junk); }, "junk.json");
  auto no_model = write_temp("no_model.json", R"({"added_tokens": []})");
  expect_error_naming<ckv::FormatError>([&] { ckv::tokenizer_from_json(no_model); },
                                        "no_model.json");
  auto unigram = write_temp("unigram.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_error_naming<ckv::UnsupportedError>([&] { ckv::tokenizer_from_json(unigram); }, "Unigram");
  auto nfkc = write_temp("nfkc.json", R"({"normalizer": {"type": "NFKC"},
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  expect_error_naming<ckv::UnsupportedError>([&] { ckv::tokenizer_from_json(nfkc); }, "NFKC");
  auto bad_merge = write_temp("bad_merge.json", R"({
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "model": {"type": "BPE", "vocab": {"a": 0}, "merges": [5]}})");
  expect_error_naming<ckv::FormatError>([&] { ckv::tokenizer_from_json(bad_merge); }, "merge");
  auto split_metaspace = write_temp("metaspace.json", R"({
      "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "split": true},
      "model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})");
  expect_error_naming<ckv::UnsupportedError>([&] { ckv::tokenizer_from_json(split_metaspace); },
                                             "Metaspace");
}

TEST(TokenizerErrors, BadGgufTokenizer) {
  ckv::GgufFile none(ckv::test::kTokenizersDir / "no_tokenizer.gguf");
  expect_error_naming<ckv::FormatError>([&] { ckv::tokenizer_from_gguf(none); },
                                        "tokenizer.ggml.model");
  ckv::GgufFile bert(ckv::test::kTokenizersDir / "bert_tokenizer.gguf");
  expect_error_naming<ckv::UnsupportedError>([&] { ckv::tokenizer_from_gguf(bert); }, "bert");
}

TEST(TokenizerErrors, ChatTemplates) {
  auto tok = ckv::tokenizer_from_json(ckv::test::kTokenizersDir /
                                      "gpt2.tokenizer.json");  // no chat template
  EXPECT_THROW(tok->apply_chat_template({{"user", "hi"}}), ckv::UnsupportedError);
  const std::string llama2 = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}";
  EXPECT_THROW(ckv::render_chat_template(llama2, {{"user", "hi"}}, true, "x"),
               ckv::UnsupportedError);
  // A ChatML template without a default system prompt adds none.
  const std::string plain =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";
  EXPECT_EQ(ckv::render_chat_template(plain, {{"user", "hi"}}, true, "x"),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TokenIds, ParsesListsAndJson) {
  EXPECT_EQ(ckv::parse_token_ids("1, 2 3\n4\t5,6", "f", 10),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ckv::parse_token_ids(" [7, 8,9] \n", "f", 10), (std::vector<int32_t>{7, 8, 9}));
  auto file = write_temp("ids.txt", "0 1\n2\n");
  EXPECT_EQ(ckv::read_token_ids(file, 3), (std::vector<int32_t>{0, 1, 2}));
}

TEST(TokenIds, RejectsJunk) {
  expect_error_naming<ckv::InputError>([] { ckv::parse_token_ids("1 x 3", "ids.txt", 10); }, "'x'");
  expect_error_naming<ckv::InputError>([] { ckv::parse_token_ids("1 -2", "ids.txt", 10); }, "-2");
  expect_error_naming<ckv::InputError>([] { ckv::parse_token_ids("1 10", "ids.txt", 10); }, "10");
  expect_error_naming<ckv::InputError>([] { ckv::parse_token_ids(" \n", "ids.txt", 10); },
                                       "ids.txt");
  expect_error_naming<ckv::InputError>([] { ckv::parse_token_ids("[1, 2", "ids.txt", 10); }, "]");
  expect_error_naming<ckv::InputError>([] { ckv::parse_token_ids("1.5", "ids.txt", 10); }, "1.5");
  expect_error_naming<ckv::InputError>(
      [] { ckv::parse_token_ids("99999999999999999999", "f", 10); }, "f");
  EXPECT_THROW(ckv::read_token_ids(ckv::test::kTokenizersDir / "absent.txt", 10), ckv::IoError);
}

}  // namespace

namespace {

// Invalid UTF-8 is not an error: byte-level BPE round-trips it; byte fallback (which, like
// llama.cpp, cuts the text at UTF-8 lead bytes) yields valid ids. Neither reference accepts
// invalid UTF-8 as a Python str, so this checks robustness only.
TEST(TokenizerErrors, InvalidUtf8IsEncoded) {
  const std::string text = "\xff\xfe abc \xc3 \xe2\x82 end\x80";
  for (const char* file : {"gpt2.tokenizer.json", "llama3.tokenizer.json"}) {
    auto tok = ckv::tokenizer_from_json(ckv::test::kTokenizersDir / file);
    EXPECT_EQ(tok->decode(tok->encode(text, false)), text) << file;
  }
  ckv::GgufFile spm(ckv::test::kTokenizersDir / "spm.vocab.gguf");
  for (const auto& tok :
       {ckv::tokenizer_from_gguf(spm),
        ckv::tokenizer_from_json(ckv::test::kTokenizersDir / "spm.tokenizer.json")}) {
    auto ids = tok->encode(text, false);
    EXPECT_FALSE(ids.empty());
    EXPECT_NO_THROW(tok->decode(ids));
  }
}

}  // namespace
