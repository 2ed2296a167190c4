// The tokenizer behind both loaders: special-token cutting, pre-tokenisation, BPE, decode.
#include <algorithm>
#include <array>

#include "core/error.h"
#include "model/bpe.h"
#include "model/chat_template.h"
#include "model/tokenizer_spec.h"
#include "model/unicode_normalize.h"

namespace ckv {
namespace {

constexpr std::string_view kSpmSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t pos = 0;;) {
    size_t hit = text.find(from, pos);
    out.append(text.substr(pos, hit == std::string_view::npos ? hit : hit - pos));
    if (hit == std::string_view::npos) return out;
    out.append(to);
    pos = hit + from.size();
  }
}

// "<0xAB>" -> 0xAB, or -1.
int byte_token_value(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int digit = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(TokenizerSpec spec)
      : spec_(std::move(spec)),
        pre_(spec_.pre_patterns.empty() ? PreTokenizer(spec_.pre)
                                        : PreTokenizer(spec_.pre_patterns)) {
    const auto n = static_cast<int32_t>(spec_.tokens.size());
    if (n == 0) fail<FormatError>("{}: the vocabulary is empty", spec_.source);
    if (spec_.roles.size() != spec_.tokens.size())
      fail<FormatError>("{}: {} token types for {} tokens", spec_.source, spec_.roles.size(), n);
    for (int32_t id : {spec_.bos_id, spec_.eos_id, spec_.unk_id})
      if (id >= n)
        fail<FormatError>("{}: special token id {} >= vocabulary size {}", spec_.source, id, n);
    for (int32_t id = 0; id < n; ++id) {
      index_.emplace(spec_.tokens[id], id);  // first occurrence wins for duplicates
      TokenRole role = spec_.roles[id];
      if ((role == TokenRole::control || role == TokenRole::user_defined ||
           role == TokenRole::unknown) &&
          !spec_.tokens[id].empty())
        specials_.push_back({spec_.tokens[id], id, role != TokenRole::user_defined});
    }
    // Longest first, so the first hit at a position is the longest match there.
    std::stable_sort(specials_.begin(), specials_.end(), [](const Special& a, const Special& b) {
      return a.text.size() > b.text.size();
    });
    for (size_t i = 0; i < specials_.size(); ++i)
      by_first_byte_[static_cast<unsigned char>(specials_[i].text[0])].push_back(i);
    byte_ids_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      if (spec_.byte_level) {
        // Some vocabularies lack bytes that never occur in UTF-8 text (SmolLM2: 0x04, 0xC0,
        // 0xF5..); llama.cpp and HF then drop such bytes, and so does encode_byte_level.
        auto it = index_.find(byte_to_unicode()[b]);
        if (it != index_.end()) byte_ids_[b] = it->second;
      } else {
        auto it = index_.find(fmt::format("<0x{:02X}>", b));
        byte_ids_[b] = it != index_.end() ? it->second : spec_.unk_id;
      }
    }
    for (const auto& [left, right] : spec_.merges) {
      auto l = index_.find(left), r = index_.find(right), m = index_.find(left + right);
      if (l != index_.end() && r != index_.end() && m != index_.end())
        merges_.add(l->second, r->second, m->second);
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_bos && spec_.add_bos && spec_.bos_id >= 0) ids.push_back(spec_.bos_id);
    size_t raw_start = 0;
    for (size_t pos = 0; pos < text.size();) {
      const Special* hit = nullptr;
      for (size_t i : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
        const Special& s = specials_[i];
        if ((parse_special || !s.control) && text.substr(pos, s.text.size()) == s.text) {
          hit = &s;
          break;
        }
      }
      if (hit == nullptr) {
        ++pos;
        continue;
      }
      if (pos > raw_start)
        encode_normalized(text.substr(raw_start, pos - raw_start), raw_start == 0, ids);
      ids.push_back(hit->id);
      pos += hit->text.size();
      raw_start = pos;
    }
    if (raw_start < text.size()) encode_normalized(text.substr(raw_start), raw_start == 0, ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
      std::string piece = token_text(ids[i]);
      if (i == 0 && spec_.strip_decoded_prefix && !piece.empty() && piece[0] == ' ')
        piece.erase(0, 1);
      out += piece;
    }
    return out;
  }

  std::string token_text(int32_t id) const override {
    if (id < 0 || id >= vocab_size())
      fail<InputError>("token id {} is outside the vocabulary of {} tokens ({})", id, vocab_size(),
                       spec_.source);
    const std::string& token = spec_.tokens[id];
    TokenRole role = spec_.roles[id];
    if (role == TokenRole::control || role == TokenRole::user_defined || role == TokenRole::unknown)
      return token;
    if (!spec_.byte_level) {
      int byte = role == TokenRole::byte ? byte_token_value(token) : -1;
      return byte >= 0 ? std::string(1, static_cast<char>(byte))
                       : replace_all(token, kSpmSpace, " ");
    }
    std::string out;  // GPT-2 stand-in code points back to bytes; anything else passes through
    for (size_t pos = 0; pos < token.size();) {
      auto lead = static_cast<unsigned char>(token[pos]);
      size_t len = std::min(utf8_length(lead), token.size() - pos);
      char32_t cp = len == 1 ? lead : len == 2 ? ((lead & 0x1F) << 6) | (token[pos + 1] & 0x3F) : 0;
      int byte = len <= 2 ? unicode_to_byte(cp) : -1;
      if (byte >= 0)
        out += static_cast<char>(byte);
      else
        out.append(token, pos, len);
      pos += len;
    }
    return out;
  }

  std::string_view kind() const override { return spec_.byte_level ? "bpe" : "spm"; }
  std::string_view pre_tokenizer() const override {
    return spec_.pre_patterns.empty() ? pre_tokenizer_name(spec_.pre) : "custom";
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(spec_.tokens.size()); }
  int32_t bos_id() const override { return spec_.bos_id; }
  int32_t eos_id() const override { return spec_.eos_id; }
  const std::string& chat_template() const override { return spec_.chat_template; }
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const override {
    return render_chat_template(spec_.chat_template, messages, add_generation_prompt, spec_.source);
  }

 private:
  struct Special {
    std::string text;
    int32_t id;
    bool control;  // matched only when parse_special is true
  };

  // One run of text between special tokens.
  // Special tokens are matched on the raw text; the normalizer applies to what lies between.
  void encode_normalized(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
    if (!spec_.nfc) return encode_fragment(text, at_start, ids);
    const std::string normalized = nfc_normalize(text);
    encode_fragment(normalized, at_start, ids);
  }

  void encode_fragment(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
    bool prefix = spec_.prefix_space == PrefixSpace::every_fragment ||
                  (spec_.prefix_space == PrefixSpace::first_fragment && at_start);
    if (spec_.byte_level) {
      std::string owned;
      if (prefix) {
        owned.reserve(text.size() + 1);
        owned.push_back(' ');
        owned.append(text);
        text = owned;
      }
      for (std::string_view piece : pre_.split(text)) encode_byte_level(piece, ids);
      return;
    }
    std::string escaped =
        (prefix ? std::string(kSpmSpace) : std::string()) + replace_all(text, " ", kSpmSpace);
    if (!spec_.scores.empty()) {
      for (std::string_view symbol : score_merge(escaped, index_, spec_.scores)) {
        auto it = index_.find(symbol);
        if (it != index_.end())
          ids.push_back(it->second);
        else
          push_bytes(symbol, ids);
      }
      return;
    }
    std::vector<int32_t> symbols;
    for (size_t pos = 0; pos < escaped.size();) {
      size_t len =
          std::min(utf8_length(static_cast<unsigned char>(escaped[pos])), escaped.size() - pos);
      auto it = index_.find(std::string_view(escaped).substr(pos, len));
      if (it != index_.end())
        symbols.push_back(it->second);
      else if (spec_.byte_fallback)
        push_bytes(std::string_view(escaped).substr(pos, len), symbols);
      else
        push_unknown(symbols);
      pos += len;
    }
    merges_.apply(symbols);
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }

  void encode_byte_level(std::string_view piece, std::vector<int32_t>& ids) const {
    if (spec_.ignore_merges) {
      std::string encoded;
      for (unsigned char b : piece) encoded += byte_to_unicode()[b];
      auto it = index_.find(encoded);
      if (it != index_.end()) {
        ids.push_back(it->second);
        return;
      }
    }
    std::vector<int32_t> symbols;
    symbols.reserve(piece.size());
    for (unsigned char b : piece)
      if (byte_ids_[b] >= 0) symbols.push_back(byte_ids_[b]);
    merges_.apply(symbols);
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }

  void push_bytes(std::string_view text, std::vector<int32_t>& ids) const {
    for (unsigned char b : text) {
      if (byte_ids_[b] < 0)
        fail<InputError>("{}: byte 0x{:02X} has no token and the vocabulary has no unknown token",
                         spec_.source, b);
      ids.push_back(byte_ids_[b]);
    }
  }

  void push_unknown(std::vector<int32_t>& ids) const {
    if (spec_.unk_id < 0)
      fail<InputError>("{}: a character has no token and the vocabulary has no unknown token",
                       spec_.source);
    ids.push_back(spec_.unk_id);
  }

  TokenizerSpec spec_;
  PreTokenizer pre_;
  TokenIndex index_;
  RankMerges merges_;
  std::vector<Special> specials_;                       // longest first
  std::array<std::vector<size_t>, 256> by_first_byte_;  // first byte -> indices into specials_
  std::array<int32_t, 256> byte_ids_{};                 // token of each raw byte
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(TokenizerSpec spec) {
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace ckv
