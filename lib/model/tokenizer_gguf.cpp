// Tokenizer from GGUF metadata (docs/MODELS.md "Tokenizers"); behaviour follows llama.cpp, the
// reference for GGUF vocabularies (src/llama-vocab.cpp: pre-tokeniser names and defaults).
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"
#include "model/chat_template.h"
#include "model/tokenizer_spec.h"

namespace ckv {
namespace {

struct PreSettings {
  PreTokenizerKind kind;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default when tokenizer.ggml.add_bos_token is absent
};

PreSettings pre_settings(const std::optional<std::string>& pre, const std::string& source) {
  if (!pre || *pre == "default") return {PreTokenizerKind::llamacpp_default};
  if (*pre == "gpt-2" || *pre == "gpt2") return {PreTokenizerKind::gpt2};
  if (*pre == "smollm") return {PreTokenizerKind::smollm};
  if (*pre == "qwen2") return {PreTokenizerKind::qwen2};
  if (*pre == "llama-bpe" || *pre == "llama3" || *pre == "llama-v3")
    return {PreTokenizerKind::llama3, true, true};
  fail<UnsupportedError>(
      "{}: tokenizer.ggml.pre '{}' is not supported (supported: default, gpt-2, smollm, "
      "llama-bpe, qwen2)",
      source, *pre);
}

TokenRole role_of(int64_t type) {
  switch (type) {
    case 2:
      return TokenRole::unknown;
    case 3:
      return TokenRole::control;
    case 4:
      return TokenRole::user_defined;
    case 5:
      return TokenRole::unused;
    case 6:
      return TokenRole::byte;
    default:
      return TokenRole::normal;
  }
}

// llama.cpp's end-of-generation spellings (src/llama-vocab.cpp, as llama-cpp-python 0.3.36
// loads a vocabulary): a token with one of these texts is a control token whatever type the
// file gives it, so it is not cut out of text tokenised without special tokens (Gemma 3's
// "</s>" is user-defined in its GGUF). When "<|tool_response>" is in the vocabulary too
// (Gemma 4), "</s>" is left as it is.
void mark_control_looking_tokens(const std::vector<std::string>& tokens, std::vector<TokenRole>& roles) {
  static constexpr std::string_view kEog[] = {
      "<|eot_id|>", "<|im_end|>",  "<|end|>", "<|return|>",      "<|call|>",          "<|flush|>", "<|calls|>",
      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>"};
  const bool keep_s = std::find(tokens.begin(), tokens.end(), "<|tool_response>") != tokens.end();
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (roles[i] == TokenRole::control || (keep_s && tokens[i] == "</s>")) continue;
    if (std::find(std::begin(kEog), std::end(kEog), tokens[i]) != std::end(kEog)) roles[i] = TokenRole::control;
  }
}

int32_t token_id(const GgufFile& gguf, std::string_view key, int32_t fallback) {
  auto v = gguf.get_int(key);
  if (!v) return fallback;
  // Checked before narrowing: 4e9 must not wrap to a plausible negative id.
  if (*v < -1 || *v > INT32_MAX)
    fail<FormatError>("{}: {} = {} is not a token id", gguf.path().string(), key, *v);
  return static_cast<int32_t>(*v);
}

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& gguf) {
  TokenizerSpec spec;
  spec.source = gguf.path().string();
  auto model = gguf.get_string("tokenizer.ggml.model");
  if (!model) fail<FormatError>("{}: no tokenizer (tokenizer.ggml.model is missing)", spec.source);
  if (*model != "gpt2" && *model != "llama")
    fail<UnsupportedError>("{}: tokenizer.ggml.model '{}' is not supported (gpt2 or llama)",
                           spec.source, *model);
  auto tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty())
    fail<FormatError>("{}: tokenizer.ggml.tokens is missing or empty", spec.source);
  spec.tokens = std::move(*tokens);
  const size_t n = spec.tokens.size();

  spec.roles.assign(n, TokenRole::normal);
  if (auto types = gguf.get_int_array("tokenizer.ggml.token_type")) {
    if (types->size() != n)
      fail<FormatError>("{}: tokenizer.ggml.token_type has {} entries for {} tokens", spec.source,
                        types->size(), n);
    for (size_t i = 0; i < n; ++i) spec.roles[i] = role_of((*types)[i]);
  }
  mark_control_looking_tokens(spec.tokens, spec.roles);

  if (*model == "gpt2") {
    PreSettings pre = pre_settings(gguf.get_string("tokenizer.ggml.pre"), spec.source);
    spec.byte_level = true;
    spec.pre = pre.kind;
    spec.ignore_merges = pre.ignore_merges;
    spec.add_bos = pre.add_bos;
    auto merges = gguf.get_string_array("tokenizer.ggml.merges");
    if (!merges)
      fail<FormatError>("{}: tokenizer.ggml.merges is missing for a gpt2 tokenizer", spec.source);
    for (const auto& m : *merges) {
      size_t space = m.find(' ', 1);  // a merge is "left right"; pieces never contain ' '
      if (space == std::string::npos)
        fail<FormatError>("{}: tokenizer.ggml.merges entry '{}' is not 'left right'", spec.source,
                          m);
      spec.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    }
    spec.bos_id = token_id(gguf, "tokenizer.ggml.bos_token_id", -1);
    spec.eos_id = token_id(gguf, "tokenizer.ggml.eos_token_id", -1);
    spec.unk_id = token_id(gguf, "tokenizer.ggml.unknown_token_id", -1);
  } else {  // "llama"
    spec.byte_level = false;
    spec.pre = PreTokenizerKind::none;
    auto scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (!scores || scores->size() != n)
      fail<FormatError>("{}: tokenizer.ggml.scores is missing or does not have {} entries",
                        spec.source, n);
    spec.scores.assign(scores->begin(), scores->end());
    spec.add_bos = true;  // llama.cpp's SPM defaults: BOS, a prefix space, ids 1/2/0
    bool space_prefix = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
    spec.prefix_space = space_prefix ? PrefixSpace::every_fragment : PrefixSpace::none;
    spec.strip_decoded_prefix = space_prefix;
    spec.bos_id = token_id(gguf, "tokenizer.ggml.bos_token_id", 1);
    spec.eos_id = token_id(gguf, "tokenizer.ggml.eos_token_id", 2);
    spec.unk_id = token_id(gguf, "tokenizer.ggml.unknown_token_id", 0);
  }
  for (int32_t* id : {&spec.bos_id, &spec.eos_id, &spec.unk_id})
    if (*id < -1 || *id >= static_cast<int64_t>(n))
      fail<FormatError>("{}: special token id {} is outside the vocabulary of {} tokens",
                        spec.source, *id, n);
  if (auto add_bos = gguf.get_bool("tokenizer.ggml.add_bos_token")) spec.add_bos = *add_bos;
  if (spec.bos_id < 0) spec.add_bos = false;
  spec.chat_template = gguf.get_string("tokenizer.chat_template").value_or("");
  // Gemma 3's GGUFs carry no template; their vocabulary's turn tokens say which it is.
  if (spec.chat_template.empty() && gguf.get_string("general.architecture") == "gemma3" &&
      std::find(spec.tokens.begin(), spec.tokens.end(), "<start_of_turn>") != spec.tokens.end())
    spec.chat_template = kGemma3ChatTemplate;
  return make_tokenizer(std::move(spec));
}

}  // namespace ckv
