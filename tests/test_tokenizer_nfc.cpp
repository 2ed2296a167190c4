// NFC normalisation of tokenizer.json normalizers (real Qwen2 tokenizers): ids equal HF
// tokenizers on strings whose NFC form differs from the input (golden_nfc.json, written by
// tests/reference/make_nfc_golden.py).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "model/tokenizer.h"
#include "model/unicode_normalize.h"
#include "test_util.h"

namespace {

TEST(TokenizerNfc, IdsMatchHfTokenizers) {
  std::ifstream in((ckv::test::kTokenizersDir / "golden_nfc.json").string());
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden.at("format_version"), 1);
  auto tok = ckv::tokenizer_from_json(
      (ckv::test::kTokenizersDir / golden.at("tokenizer").get<std::string>()).string());
  for (const auto& c : golden.at("cases")) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok->encode(text, false, true), c.at("ids").get<std::vector<int32_t>>()) << text;
  }
}

TEST(TokenizerNfc, NormalisationChangesIdsWhereItShould) {
  // Without the normalizer the decomposed spelling tokenises differently: the test above
  // can fail if NFC were skipped.
  auto plain =
      ckv::tokenizer_from_json((ckv::test::kTokenizersDir / "qwen2.tokenizer.json").string());
  auto nfc =
      ckv::tokenizer_from_json((ckv::test::kTokenizersDir / "qwen2-nfc.tokenizer.json").string());
  const std::string decomposed = "Cafe\xcc\x81";  // e + U+0301
  EXPECT_NE(plain->encode(decomposed, false, true), nfc->encode(decomposed, false, true));
  EXPECT_EQ(nfc->encode(decomposed, false, true), nfc->encode("Caf\xc3\xa9", false, true));
}

TEST(TokenizerNfc, InvalidUtf8PassesThroughUnchanged) {
  const std::string bad = "a\xff\xfe" "e\xcc\x81";
  EXPECT_EQ(ckv::nfc_normalize(bad), bad);
  EXPECT_EQ(ckv::nfc_normalize("e\xcc\x81"), "\xc3\xa9");
  EXPECT_EQ(ckv::nfc_normalize("\xe2\x84\xab"), "\xc3\x85");  // U+212B ANGSTROM SIGN -> U+00C5
}

}  // namespace
