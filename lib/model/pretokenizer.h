#pragma once
// Pre-tokenisers of byte-level BPE vocabularies: the text is cut into pieces by a sequence
// of Unicode regexes (PCRE2, UTF + UCP), and BPE then runs inside each piece.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ckv {

enum class PreTokenizerKind {
  none,              // the whole fragment is one piece (SentencePiece-style BPE)
  gpt2,              // GPT-2 regex
  smollm,            // every \p{N} alone, then GPT-2
  llama3,            // Llama 3 regex (\p{N}{1,3})
  qwen2,             // Llama 3 regex with single digits
  llamacpp_default,  // llama.cpp's fallback for GGUF pre "default" (punctuation runs first)
};

// The regexes of a kind, applied in order (empty for none).
std::vector<std::string> pre_tokenizer_patterns(PreTokenizerKind kind);

// The name ckv reports ("gpt2", "smollm", "llama3", "qwen2", "default", "none").
std::string_view pre_tokenizer_name(PreTokenizerKind kind);

class PreTokenizer {
 public:
  explicit PreTokenizer(PreTokenizerKind kind);
  // A custom regex (HF tokenizer.json Split with behaviour "Isolated").
  explicit PreTokenizer(const std::vector<std::string>& patterns);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Pieces in order; their concatenation is `text`. Each regex in turn splits every piece
  // into its matches and the gaps between them (both kept), as HF's "Isolated" split and
  // llama.cpp's unicode_regex_split do. Invalid UTF-8 never matches and so stays in gaps.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace ckv
