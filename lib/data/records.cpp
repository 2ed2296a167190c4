#include "core/input_file.h"
#include "data/records.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/h5.h"
#include "model/tokenizer.h"

namespace ckv {

namespace {

using nlohmann::json;

std::optional<std::string> optional_string(const json& j, const char* key, std::string_view where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail<InputError>("{}: \"{}\" must be a string", where, key);
  std::string text = it->get<std::string>();
  check_text_field(text, where, key);
  return text;
}

std::vector<std::string> parse_answers(const json& j, std::string_view where) {
  std::vector<std::string> answers;
  if (!j.is_array()) fail<InputError>("{}: \"answers\" must be a list of strings", where);
  if (j.empty()) fail<InputError>("{}: \"answers\" is an empty list (leave it out when there is no answer)", where);
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string()) fail<InputError>("{}: \"answers\"[{}] must be a string, not {}", where, i, j[i].dump());
    std::string text = j[i].get<std::string>();
    if (text.empty()) fail<InputError>("{}: \"answers\"[{}] is empty", where, i);
    check_text_field(text, where, "answers");
    answers.push_back(std::move(text));
  }
  return answers;
}

// "task", or the default the header comment gives; needs r.answers parsed.
AnswerTask parse_task(const json& j, const InputRecord& r, std::string_view where) {
  auto it = j.find("task");
  if (it == j.end() || it->is_null()) {
    if (r.answers.empty()) return AnswerTask::None;
    if (auto niah = j.find("niah"); niah != j.end() && niah->is_object()) return AnswerTask::Niah;
    return AnswerTask::Qa;
  }
  constexpr const char* kRuler = "(or \"ruler\" with a \"metric\")";
  if (!it->is_string())
    fail<InputError>("{}: \"task\" must be \"niah\" or \"qa\", not {} {}", where, it->dump(), kRuler);
  const std::string name = it->get<std::string>();
  std::optional<AnswerTask> task;
  if (name == "niah" || name == "qa") task = parse_answer_task(name);
  if (name == "ruler") {
    // `ckv ruler` records: the metric RULER scores the task with.
    auto metric = j.find("metric");
    if (metric == j.end() || !metric->is_string())
      fail<InputError>("{}: \"task\" \"ruler\" needs \"metric\": \"string_match_all\" or \"string_match_part\"", where);
    const std::string m = metric->get<std::string>();
    if (m == "string_match_all" || m == "string_match_part") task = parse_answer_task(m);
    else fail<InputError>("{}: \"metric\" must be \"string_match_all\" or \"string_match_part\", not \"{}\"", where, m);
  }
  if (!task) fail<InputError>("{}: \"task\" must be \"niah\" or \"qa\", not \"{}\" {}", where, name, kRuler);
  if (r.answers.empty())
    fail<InputError>("{}: \"task\" \"{}\" needs a reference answer (\"answers\" or \"answer\")", where, name);
  return *task;
}

NamedSpans parse_spans(const json& j, std::string_view where) {
  NamedSpans spans;
  if (j.is_null()) return spans;
  if (!j.is_object()) fail<InputError>("{}: \"spans\" must be an object {{name: [[start, end], ...]}}", where);
  for (const auto& [name, list] : j.items()) {
    if (!list.is_array()) fail<InputError>("{}: span \"{}\" must be a list of [start, end]", where, name);
    std::vector<SpanRange>& out = spans[name];
    for (const json& pair : list) {
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() ||
          !pair[1].is_number_integer())
        fail<InputError>("{}: span \"{}\": {} is not [start, end] integers", where, name, pair.dump());
      SpanRange r{pair[0].get<int64_t>(), pair[1].get<int64_t>()};
      if (r.start < 0 || r.end <= r.start)
        fail<InputError>("{}: span \"{}\": [{}, {}] is empty or negative", where, name, r.start, r.end);
      out.push_back(r);
    }
  }
  return spans;
}

}  // namespace

void check_text_field(std::string_view text, std::string_view where, std::string_view field) {
  if (const size_t at = text.find('\0'); at != std::string_view::npos)
    fail<InputError>("{}: \"{}\" contains a NUL character (at byte {}), which its HDF5 string attribute "
                     "cannot hold", where, field, at);
}

InputRecord parse_record(std::string_view text, std::string_view source, int64_t line,
                         int64_t index) {
  const std::string where = fmt::format("{}:{}", source, line);
  refuse_nul_in_json(text, where);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for numbers beyond double (1e400).
    fail<InputError>("{}: not valid JSON ({})", where, e.what());
  }
  if (!j.is_object()) fail<InputError>("{}: a record must be a JSON object", where);
  InputRecord r;
  r.index = index;
  r.line = line;
  if (auto it = j.find("id"); it == j.end() || it->is_null()) {
    r.id = std::to_string(index);
  } else if (it->is_string()) {
    r.id = it->get<std::string>();
  } else if (it->is_number_integer()) {
    r.id = std::to_string(it->get<int64_t>());
  } else {
    fail<InputError>("{}: \"id\" must be a string or an integer", where);
  }
  if (!h5::is_valid_link_name(r.id))
    fail<InputError>("{}: id \"{}\" cannot name an HDF5 group (empty, '.', '..', or containing '/' or NUL)",
                     where, r.id);
  auto context = optional_string(j, "context", where);
  if (!context) fail<InputError>("{}: missing \"context\"", where);
  r.context = *context;
  r.question = optional_string(j, "question", where);
  if (r.question && r.question->empty()) r.question.reset();
  r.answer = optional_string(j, "answer", where);
  if (auto it = j.find("answers"); it != j.end() && !it->is_null()) r.answers = parse_answers(*it, where);
  else if (r.answer && !r.answer->empty()) r.answers = {*r.answer};
  r.task = parse_task(j, r, where);
  if (auto unit = optional_string(j, "span_unit", where)) {
    if (*unit == "char") r.span_unit = SpanUnit::Char;
    else if (*unit == "token") r.span_unit = SpanUnit::Token;
    else fail<InputError>("{}: \"span_unit\" must be \"char\" or \"token\", not \"{}\"", where, *unit);
  }
  if (auto it = j.find("spans"); it != j.end()) r.spans = parse_spans(*it, where);
  return r;
}

RecordReader::RecordReader(const std::filesystem::path& path, bool skip_bad)
    : path_(path), skip_bad_(skip_bad) {
  require_regular_file(path, "the input file");
  in_.open(path, std::ios::binary);
  if (!in_) fail<IoError>("{}: cannot open the input file", path.string());
}

std::optional<InputRecord> RecordReader::next() {
  std::string text;
  while (std::getline(in_, text)) {
    ++line_;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      InputRecord r = parse_record(text, path_.string(), line_, index_);
      // Ids name the records' groups: two records must never share one.
      if (const auto [it, fresh] = id_lines_.emplace(r.id, line_); !fresh)
        fail<InputError>("{}:{}: record id \"{}\" appears twice (first on line {})", path_.string(), line_, r.id,
                         it->second);
      ++index_;
      return r;
    } catch (const InputError& e) {
      if (!skip_bad_) throw;
      skipped_.push_back(e.what());
    }
  }
  if (in_.bad()) fail<IoError>("{}: read error after line {}", path_.string(), line_);
  return std::nullopt;
}

nlohmann::ordered_json spans_to_json(const NamedSpans& spans) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto& [name, list] : spans) {
    nlohmann::ordered_json arr = nlohmann::ordered_json::array();
    for (const SpanRange& s : list) arr.push_back({s.start, s.end});
    out[name] = arr;
  }
  return out;
}

size_t utf8_offset(std::string_view text, int64_t index, std::string_view what) {
  size_t pos = 0;
  for (int64_t i = 0; i < index; ++i) {
    if (pos >= text.size())
      fail<InputError>("{}: character {} is past the end of the text ({} characters)", what, index, i);
    const auto lead = static_cast<unsigned char>(text[pos]);
    pos += lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  }
  return std::min(pos, text.size());
}

namespace {

// Byte offset of each code point of `text`, and the size at the end ([code points + 1]).
std::vector<size_t> code_point_offsets(std::string_view text) {
  std::vector<size_t> out;
  out.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    out.push_back(pos);
    const auto lead = static_cast<unsigned char>(text[pos]);
    pos += lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  }
  out.push_back(text.size());
  return out;
}

// The byte range [begin, end) of every token of `tokens` in `text` (both increasing), when
// the tokens spell the text exactly: a BOS the encoder added spells nothing, a SentencePiece
// prefix space may be absent from the text. nullopt when they do not (a normalizer changed
// the text, or bytes without a token were dropped).
struct TokenBytes {
  std::vector<size_t> begin, end;
};

std::optional<TokenBytes> token_bytes(const std::vector<int32_t>& tokens, std::string_view text,
                                      const Tokenizer& tokenizer, bool add_bos) {
  TokenBytes out;
  out.begin.reserve(tokens.size());
  out.end.reserve(tokens.size());
  const size_t n_bos = add_bos ? tokenizer.encode("", true, true).size() : 0;
  size_t pos = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string piece = i < n_bos ? std::string() : tokenizer.token_text(tokens[i]);
    if (text.compare(pos, piece.size(), piece) != 0 && !piece.empty() && piece[0] == ' ' &&
        text.compare(pos, piece.size() - 1, std::string_view(piece).substr(1)) == 0)
      piece.erase(0, 1);  // a prefix space the tokenizer added
    else if (text.compare(pos, piece.size(), piece) != 0)
      return std::nullopt;
    out.begin.push_back(pos);
    pos += piece.size();
    out.end.push_back(pos);
  }
  if (pos != text.size()) return std::nullopt;
  return out;
}

// The fallback for tokenizers whose tokens do not spell the text: tokenise the prefix up to
// byte `byte` and compare with the prompt's tokens; where they first differ is the token
// that straddles the boundary, which a span's start and end both include. One tokenisation
// per boundary.
int64_t prefix_token_boundary(std::string_view text, size_t byte, bool is_end, const std::vector<int32_t>& tokens,
                              const Tokenizer& tokenizer, bool add_bos) {
  const std::vector<int32_t> prefix = tokenizer.encode(text.substr(0, byte), add_bos, true);
  size_t same = 0;
  while (same < prefix.size() && same < tokens.size() && prefix[same] == tokens[same]) ++same;
  if (same == prefix.size()) return static_cast<int64_t>(same);  // a token boundary
  return static_cast<int64_t>(is_end ? same + 1 : same);
}

}  // namespace

std::vector<int32_t> answer_token_ids(const InputRecord& record, const Tokenizer& tokenizer, bool leading_space) {
  std::string text = record.answer.value_or(record.answers.empty() ? std::string() : record.answers.front());
  if (text.empty()) return {};
  if (leading_space && !std::isspace(static_cast<unsigned char>(text.front()))) text = " " + text;
  return tokenizer.encode(text, false);
}

RecordPrompt tokenize_record(const InputRecord& record, const Tokenizer& tokenizer, bool chat) {
  const std::string where = record.line > 0 ? fmt::format("record \"{}\" (line {})", record.id, record.line)
                                            : fmt::format("record \"{}\"", record.id);
  if (record.context.empty()) fail<InputError>("{}: the context is empty", where);
  const std::string question = record.question.value_or("");
  // `head` is the text before the context, `body_end` the byte where the context ends.
  std::string text, head;
  bool add_bos = true;
  if (chat) {
    text = tokenizer.apply_chat_template({{"user", record.context + question}}, true);
    const size_t at = text.find(record.context + question);
    if (at == std::string::npos)
      fail<InputError>("{}: the chat template does not contain the message verbatim", where);
    head = text.substr(0, at);
    add_bos = false;  // the rendering carries its own special tokens
  } else {
    text = record.context + question;
  }
  const size_t context_end_byte = head.size() + record.context.size();
  RecordPrompt p;
  p.tokens = tokenizer.encode(std::string_view(text).substr(0, context_end_byte), add_bos, true);
  p.context_end = static_cast<int64_t>(p.tokens.size());
  if (context_end_byte < text.size()) {
    std::vector<int32_t> rest = tokenizer.encode(std::string_view(text).substr(context_end_byte), false, true);
    p.tokens.insert(p.tokens.end(), rest.begin(), rest.end());
  }
  const auto seq = static_cast<int64_t>(p.tokens.size());
  bool has_char_spans = false;
  for (const auto& [name, ranges] : record.spans) has_char_spans = has_char_spans || !ranges.empty();
  has_char_spans = has_char_spans && record.span_unit == SpanUnit::Char;
  // Character spans: the byte offset of every code point of the context (one pass), and the
  // byte range of every prompt token, so each boundary is two binary searches.
  std::vector<size_t> cp_byte;
  std::optional<TokenBytes> bytes;
  if (has_char_spans) {
    cp_byte = code_point_offsets(record.context);
    bytes = token_bytes(p.tokens, text, tokenizer, add_bos);
  }
  for (const auto& [name, ranges] : record.spans) {
    for (const SpanRange& r : ranges) {
      SpanRange t = r;
      if (record.span_unit == SpanUnit::Char) {
        const std::string span_where = fmt::format("{}: span \"{}\"", where, name);
        const auto n_cp = static_cast<int64_t>(cp_byte.size()) - 1;
        for (int64_t ch : {r.start, r.end})
          if (ch > n_cp)
            fail<InputError>("{}: character {} is past the end of the text ({} characters)", span_where, ch, n_cp);
        const size_t b_start = head.size() + cp_byte[static_cast<size_t>(r.start)];
        const size_t b_end = head.size() + cp_byte[static_cast<size_t>(r.end)];
        if (bytes) {
          // The smallest token range covering the characters (HF's char_to_token): the first
          // token ending after the start, through the last token beginning before the end.
          t.start = std::upper_bound(bytes->end.begin(), bytes->end.end(), b_start) - bytes->end.begin();
          t.end = std::lower_bound(bytes->begin.begin(), bytes->begin.end(), b_end) - bytes->begin.begin();
        } else {
          t = {prefix_token_boundary(text, b_start, false, p.tokens, tokenizer, add_bos),
               prefix_token_boundary(text, b_end, true, p.tokens, tokenizer, add_bos)};
        }
        if (t.end <= t.start) t.end = t.start + 1;  // a span inside one token keeps that token
      } else if (r.end > seq) {
        fail<InputError>("{}: span \"{}\" [{}, {}) is past the end of the prompt ({} tokens)", where,
                         name, r.start, r.end, seq);
      }
      p.token_spans[name].push_back(t);
    }
  }
  return p;
}

}  // namespace ckv
