#include "model/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace ckv {
namespace {

// The regexes of docs/MODELS.md "Tokenizers".
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace

std::vector<std::string> pre_tokenizer_patterns(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::none:
      return {};
    case PreTokenizerKind::gpt2:
      return {kGpt2};
    case PreTokenizerKind::smollm:
      return {R"(\p{N})", kGpt2};
    case PreTokenizerKind::llama3:
      return {kLlama3};
    case PreTokenizerKind::qwen2:
      return {kQwen2};
    case PreTokenizerKind::llamacpp_default:
      // llama.cpp (src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_DEFAULT): used for GGUF files
      // whose pre-tokeniser is named "default"; it is not GPT-2's split.
      return {R"([\p{P}\$\+<=>\^~\|]+)",
              R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
              R"(\p{N}+)", "[0-9][0-9][0-9]"};
  }
  return {};
}

std::string_view pre_tokenizer_name(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::none:
      return "none";
    case PreTokenizerKind::gpt2:
      return "gpt2";
    case PreTokenizerKind::smollm:
      return "smollm";
    case PreTokenizerKind::llama3:
      return "llama3";
    case PreTokenizerKind::qwen2:
      return "qwen2";
    case PreTokenizerKind::llamacpp_default:
      return "default";
  }
  return "none";
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  explicit Regex(const std::string& pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    // MATCH_INVALID_UTF: invalid UTF-8 in a prompt must not abort matching.
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      fail<UnsupportedError>("pre-tokeniser regex '{}': {} at offset {}", pattern,
                             reinterpret_cast<const char*>(message), offset);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter also works
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
};

PreTokenizer::PreTokenizer(PreTokenizerKind kind) : PreTokenizer(pre_tokenizer_patterns(kind)) {}

PreTokenizer::PreTokenizer(const std::vector<std::string>& patterns) {
  for (const auto& p : patterns) regexes_.push_back(std::make_unique<Regex>(p));
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  for (const auto& regex : regexes_) {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(regex->code, nullptr);
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0;
      size_t gap_start = 0;
      while (pos < piece.size()) {
        int rc = pcre2_match(regex->code, subject, piece.size(), pos, 0, match, nullptr);
        if (rc < 0) break;  // no further match (errors cannot occur in MATCH_INVALID_UTF mode)
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
        size_t begin = ovector[0], end = ovector[1];
        if (end == begin) {  // an empty match cannot happen with these patterns; step past it
          pos = end + 1;
          continue;
        }
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        next.push_back(piece.substr(begin, end - begin));
        pos = gap_start = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pcre2_match_data_free(match);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace ckv
