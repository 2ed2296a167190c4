#pragma once
// Small text helpers shared by the parsers of flags, selection files and templates.
#include <string_view>

namespace ckv {

// s without the leading and trailing characters that are in `chars` (by default spaces).
inline std::string_view trim(std::string_view s, std::string_view chars = " ") {
  const size_t begin = s.find_first_not_of(chars);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(chars) - begin + 1);
}

}  // namespace ckv
