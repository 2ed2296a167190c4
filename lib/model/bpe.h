#pragma once
// The two merge engines behind ckv's tokenizers, and GPT-2's byte-to-unicode table.
//   rank BPE:  adjacent symbol pairs merge in order of their rank in a merges list
//              (HF BPE, llama.cpp "gpt2" vocabularies).
//   score BPE: adjacent pairs whose concatenation is a token merge, highest token score
//              first (llama.cpp's SentencePiece tokenizer for GGUF "llama" vocabularies).
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ckv {

// Byte b as the UTF-8 of its GPT-2 stand-in code point (docs/MODELS.md "Byte-to-unicode").
const std::array<std::string, 256>& byte_to_unicode();
// The inverse: a stand-in code point back to its byte, or -1 when it is none.
int unicode_to_byte(char32_t code_point);

// Lookup of std::string keys by std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class RankMerges {
 public:
  // Registers "left right" -> merged with the next rank; returns false when a piece is not
  // a token (such merges can never apply and are skipped).
  bool add(int32_t left, int32_t right, int32_t merged);
  size_t size() const { return merges_.size(); }

  // Merges `symbols` (token ids) in place by rank; equal ranks merge leftmost first.
  void apply(std::vector<int32_t>& symbols) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  std::unordered_map<uint64_t, Merge> merges_;
};

// Score BPE over the UTF-8 characters of `text`. Returns the byte ranges of the final
// symbols; every range longer than one character is a token of `index`.
std::vector<std::string_view> score_merge(std::string_view text, const TokenIndex& index,
                                          const std::vector<float>& scores);

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for invalid bytes).
size_t utf8_length(unsigned char lead);

}  // namespace ckv
