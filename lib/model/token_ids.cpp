// `--tokens FILE`: prompts given as token ids.
#include <fstream>
#include <sstream>

#include "core/input_file.h"
#include "core/error.h"
#include "model/tokenizer.h"

namespace ckv {

std::vector<int32_t> parse_token_ids(std::string_view text, std::string_view source,
                                     int64_t vocab_size) {
  std::string_view body = text;
  // A JSON array is the same list inside brackets.
  size_t first = body.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && body[first] == '[') {
    size_t last = body.find_last_not_of(" \t\r\n");
    if (body[last] != ']')
      fail<InputError>("{}: JSON array of token ids is not closed with ']'", source);
    body = body.substr(first + 1, last - first - 1);
  }
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t start = body.find_first_not_of(" \t\r\n,", pos);
    if (start == std::string_view::npos) break;
    size_t end = body.find_first_of(" \t\r\n,", start);
    std::string_view entry = body.substr(start, end == std::string_view::npos ? end : end - start);
    int64_t value = 0;
    bool ok = !entry.empty() && entry.size() <= 12;
    for (char c : entry) {
      if (c < '0' || c > '9') ok = false;
      if (!ok) break;  // also stops before an over-long entry could overflow value
      value = value * 10 + (c - '0');
    }
    if (!ok)
      fail<InputError>("{}: '{}' (entry {}) is not a non-negative integer token id", source, entry,
                       ids.size() + 1);
    if (value >= vocab_size)
      fail<InputError>("{}: token id {} (entry {}) is outside the vocabulary of {} tokens", source,
                       value, ids.size() + 1, vocab_size);
    ids.push_back(static_cast<int32_t>(value));
    pos = end == std::string_view::npos ? body.size() : end;
  }
  if (ids.empty()) fail<InputError>("{}: no token ids", source);
  return ids;
}

std::vector<int32_t> read_token_ids(const std::filesystem::path& path, int64_t vocab_size) {
  return parse_token_ids(read_regular_file(path, "the token file"), path.string(), vocab_size);
}

}  // namespace ckv
