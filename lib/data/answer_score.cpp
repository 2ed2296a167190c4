#include "data/answer_score.h"

#include <algorithm>
#include <map>

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "core/error.h"

namespace ckv {

namespace {

// UTF-8 -> code points; invalid bytes become U+FFFD per maximal subpart (ICU >= 60 follows
// the same W3C/Unicode practice as Python's errors="replace").
std::u32string decode(std::string_view text) {
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  std::u32string out;
  out.reserve(static_cast<size_t>(u.length()));
  for (int32_t i = 0; i < u.length(); i = u.moveIndex32(i, 1))
    out.push_back(static_cast<char32_t>(u.char32At(i)));
  return out;
}

// str.lower(): full case mapping with the root locale's context rules (final sigma).
std::u32string lower(std::string_view text) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  u.toLower(icu::Locale::getRoot());
  std::u32string out;
  out.reserve(static_cast<size_t>(u.length()));
  for (int32_t i = 0; i < u.length(); i = u.moveIndex32(i, 1))
    out.push_back(static_cast<char32_t>(u.char32At(i)));
  return out;
}

std::string encode(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

std::u32string_view strip(std::u32string_view text) {
  while (!text.empty() && is_python_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_python_space(text.back())) text.remove_suffix(1);
  return text;
}

std::u32string ruler_postprocess_u32(std::string_view prediction) {
  const std::u32string decoded = decode(prediction);
  std::u32string out(strip(decoded));
  for (char32_t& c : out)
    if (c < 0x20) c = U'\n';
  return std::u32string(strip(out));
}

// Python's string.punctuation: the ASCII punctuation characters, nothing else.
bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

// normalize_answer, as tokens (its .split()).
std::vector<std::u32string> normalized_tokens(std::string_view text) {
  std::u32string kept;
  for (const char32_t c : lower(text))
    if (!is_ascii_punctuation(c)) kept.push_back(c);
  // \b(a|an|the)\b matches exactly the maximal \w runs spelling a, an or the.
  std::u32string unarticled;
  for (size_t i = 0; i < kept.size();) {
    if (!is_python_word(kept[i])) {
      unarticled.push_back(kept[i++]);
      continue;
    }
    size_t end = i;
    while (end < kept.size() && is_python_word(kept[end])) ++end;
    const std::u32string_view word(kept.data() + i, end - i);
    if (word == U"a" || word == U"an" || word == U"the")
      unarticled.push_back(U' ');
    else
      unarticled.append(word);
    i = end;
  }
  std::vector<std::u32string> tokens;
  for (size_t i = 0; i < unarticled.size();) {
    if (is_python_space(unarticled[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < unarticled.size() && !is_python_space(unarticled[end])) ++end;
    tokens.emplace_back(unarticled, i, end - i);
    i = end;
  }
  return tokens;
}

// LongBench f1_score over token lists (Counter overlap), in Python's order of operations.
double token_f1(const std::vector<std::u32string>& prediction,
                const std::vector<std::u32string>& reference) {
  std::map<std::u32string_view, int64_t> counts;
  for (const auto& t : reference) ++counts[t];
  int64_t overlap = 0;
  for (const auto& t : prediction)
    if (auto it = counts.find(t); it != counts.end() && it->second > 0) {
      --it->second;
      ++overlap;
    }
  if (overlap == 0) return 0.0;
  const double precision =
      1.0 * static_cast<double>(overlap) / static_cast<double>(prediction.size());
  const double recall = 1.0 * static_cast<double>(overlap) / static_cast<double>(reference.size());
  return (2 * precision * recall) / (precision + recall);
}

void require_references(const std::vector<std::string>& references) {
  if (references.empty()) fail<InputError>("answer scoring: no reference answers to score against");
}

}  // namespace

std::string_view answer_task_name(AnswerTask task) {
  switch (task) {
    case AnswerTask::Niah:
      return "niah";
    case AnswerTask::Qa:
      return "qa";
    case AnswerTask::RulerMatchAll:
      return "string_match_all";
    case AnswerTask::RulerMatchPart:
      return "string_match_part";
    case AnswerTask::None:
      break;
  }
  return "none";
}

std::optional<AnswerTask> parse_answer_task(std::string_view name) {
  if (name == "niah") return AnswerTask::Niah;
  if (name == "qa") return AnswerTask::Qa;
  if (name == "string_match_all") return AnswerTask::RulerMatchAll;
  if (name == "string_match_part") return AnswerTask::RulerMatchPart;
  return std::nullopt;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_python_word(char32_t c) {
  if (c == U'_') return true;
  const auto cp = static_cast<UChar32>(c);
  return (U_GET_GC_MASK(cp) & U_GC_L_MASK) != 0 ||
         u_getIntPropertyValue(cp, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

std::string python_lower(std::string_view text) {
  return encode(lower(text));
}

std::string ruler_postprocess(std::string_view prediction) {
  return encode(ruler_postprocess_u32(prediction));
}

std::vector<bool> ruler_contains(std::string_view prediction,
                                 const std::vector<std::string>& references) {
  const std::u32string haystack = lower(encode(ruler_postprocess_u32(prediction)));
  std::vector<bool> out;
  out.reserve(references.size());
  for (const std::string& ref : references)
    out.push_back(haystack.find(lower(ref)) != std::u32string::npos);
  return out;
}

double ruler_string_match_all(std::string_view prediction,
                              const std::vector<std::string>& references) {
  require_references(references);
  const std::vector<bool> hits = ruler_contains(prediction, references);
  return static_cast<double>(std::count(hits.begin(), hits.end(), true)) /
         static_cast<double>(hits.size());
}

double ruler_string_match_part(std::string_view prediction,
                               const std::vector<std::string>& references) {
  require_references(references);
  const std::vector<bool> hits = ruler_contains(prediction, references);
  return std::find(hits.begin(), hits.end(), true) != hits.end() ? 1.0 : 0.0;
}

std::string normalize_answer(std::string_view text) {
  std::u32string joined;
  for (const std::u32string& token : normalized_tokens(text)) {
    if (!joined.empty()) joined.push_back(U' ');
    joined += token;
  }
  return encode(joined);
}

double qa_f1_score(std::string_view prediction, std::string_view reference) {
  return token_f1(normalized_tokens(prediction), normalized_tokens(reference));
}

bool qa_exact_match(std::string_view prediction, std::string_view reference) {
  return normalized_tokens(prediction) == normalized_tokens(reference);
}

std::string longbench_first_line(std::string_view prediction) {
  // On bytes: '\n' is never part of a multi-byte sequence nor of an invalid subpart.
  const size_t begin = std::min(prediction.find_first_not_of('\n'), prediction.size());
  const size_t end = prediction.find('\n', begin);
  return std::string(prediction.substr(
      begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
}

AnswerScores score_answer(AnswerTask task, std::string_view prediction,
                          const std::vector<std::string>& references) {
  require_references(references);
  if (task == AnswerTask::None) fail("answer scoring: the record has no task (\"niah\", \"qa\" or \"ruler\")");
  AnswerScores s;
  s.task = task;
  s.contains = ruler_contains(prediction, references);
  s.string_match_all = static_cast<double>(std::count(s.contains.begin(), s.contains.end(), true)) /
                       static_cast<double>(s.contains.size());
  s.string_match_part =
      std::find(s.contains.begin(), s.contains.end(), true) != s.contains.end() ? 1.0 : 0.0;
  const std::vector<std::u32string> predicted = normalized_tokens(prediction);
  if (task == AnswerTask::Niah || task == AnswerTask::RulerMatchAll) {
    std::string joined;
    for (size_t i = 0; i < references.size(); ++i) joined += (i == 0 ? "" : ", ") + references[i];
    const std::vector<std::u32string> reference = normalized_tokens(joined);
    s.f1 = token_f1(predicted, reference);
    s.exact_match = predicted == reference;
    s.score = s.string_match_all;
  } else {
    for (const std::string& ref : references) {
      const std::vector<std::u32string> reference = normalized_tokens(ref);
      s.f1 = std::max(s.f1, token_f1(predicted, reference));
      s.exact_match = s.exact_match || predicted == reference;
    }
    s.score = task == AnswerTask::RulerMatchPart ? s.string_match_part : s.f1;
  }
  return s;
}

}  // namespace ckv
