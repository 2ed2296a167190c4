#pragma once
// Internal: everything a tokenizer needs, filled by the tokenizer.json and GGUF loaders,
// and the factory that builds the tokenizer from it.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/pretokenizer.h"
#include "model/tokenizer.h"

namespace ckv {

// How a token is treated in text: control and user-defined tokens are cut out of the text
// before pre-tokenisation (user-defined ones even when parse_special is false, as llama.cpp
// and HF do); byte tokens <0xXX> carry one raw byte in byte-fallback vocabularies.
enum class TokenRole : uint8_t { normal, unknown, control, user_defined, unused, byte };

enum class PrefixSpace : uint8_t {
  none,
  every_fragment,  // llama.cpp SPM and HF Prepend("▁"): each text run, including after specials
  first_fragment,  // HF Metaspace prepend_scheme "first": only a run starting the text
};

struct TokenizerSpec {
  std::string source;      // file name used in error messages
  bool byte_level = true;  // false: SentencePiece-style BPE with byte fallback
  PreTokenizerKind pre = PreTokenizerKind::gpt2;
  std::vector<std::string> pre_patterns;  // custom Split regexes (tokenizer.json only)
  std::vector<std::string> tokens;        // [vocab]
  std::vector<TokenRole> roles;           // [vocab]
  std::vector<float> scores;              // [vocab], non-empty: score BPE instead of merges
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;
  bool add_bos = false;
  bool ignore_merges = false;  // a piece that is already a token is not merged (Llama 3)
  bool byte_fallback = true;   // SPM: unknown characters become <0xXX> tokens
  PrefixSpace prefix_space = PrefixSpace::none;
  bool strip_decoded_prefix = false;  // decode drops the first token's leading space
  bool nfc = false;  // NFC-normalise text between special tokens (tokenizer.json normalizer)
  std::string chat_template;
};

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec);

}  // namespace ckv
