#include "model/bpe.h"

#include <algorithm>
#include <queue>

namespace ckv {
namespace {

std::string utf8_encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// Printable bytes map to themselves; the other 68, in order, to U+0100, U+0101, ...
std::array<char32_t, 256> make_byte_code_points() {
  std::array<char32_t, 256> cps{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cps[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return cps;
}

const std::array<char32_t, 256>& byte_code_points() {
  static const auto cps = make_byte_code_points();
  return cps;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() {
  static const auto table = [] {
    std::array<std::string, 256> t;
    for (int b = 0; b < 256; ++b) t[b] = utf8_encode(byte_code_points()[b]);
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t code_point) {
  static const auto inverse = [] {
    std::array<int16_t, 0x144> inv;
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_code_points()[b]] = static_cast<int16_t>(b);
    return inv;
  }();
  return code_point < inverse.size() ? inverse[code_point] : -1;
}

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

bool RankMerges::add(int32_t left, int32_t right, int32_t merged) {
  if (left < 0 || right < 0 || merged < 0) return false;
  // A repeated pair keeps its first (best) rank, as HF does.
  merges_.emplace(key(left, right), Merge{static_cast<int32_t>(merges_.size()), merged});
  return true;
}

void RankMerges::apply(std::vector<int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  // Doubly linked list over positions; a queue entry is stale when either side changed.
  const int n = static_cast<int>(symbols.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    auto it = merges_.find(key(symbols[left], symbols[next[left]]));
    if (it != merges_.end())
      queue.push({it->second.rank, left, symbols[left], symbols[next[left]]});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    int right = next[c.left];
    if (!alive[c.left] || right < 0 || symbols[c.left] != c.left_id || symbols[right] != c.right_id)
      continue;
    symbols[c.left] = merges_.at(key(c.left_id, c.right_id)).merged;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  std::vector<int32_t> out;
  for (int i = 0; i != -1; i = next[i]) out.push_back(symbols[i]);
  symbols = std::move(out);
}

std::vector<std::string_view> score_merge(std::string_view text, const TokenIndex& index,
                                          const std::vector<float>& scores) {
  struct Symbol {
    size_t begin, length;
    int prev, next;
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = std::min(utf8_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
    int i = static_cast<int>(symbols.size());
    symbols.push_back({pos, len, i - 1, pos + len < text.size() ? i + 1 : -1});
    pos += len;
  }
  struct Bigram {
    float score;
    int left, right;
    size_t length;
  };
  // Highest score first; on ties the leftmost pair (llama.cpp's llm_bigram_spm order).
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    std::string_view joined =
        text.substr(symbols[left].begin, symbols[left].length + symbols[right].length);
    auto it = index.find(joined);
    if (it == index.end() || it->second < 0 || static_cast<size_t>(it->second) >= scores.size())
      return;
    queue.push({scores[it->second], left, right, joined.size()});
  };
  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol& left = symbols[b.left];
    Symbol& right = symbols[b.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != b.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = b.left;
    try_add(left.prev, b.left);
    try_add(b.left, left.next);
  }
  std::vector<std::string_view> out;
  for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next)
    out.push_back(text.substr(symbols[i].begin, symbols[i].length));
  return out;
}

}  // namespace ckv
