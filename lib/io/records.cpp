#include "io/records.h"

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
  return it->get<std::string>();
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

InputRecord parse_record(std::string_view text, std::string_view source, int64_t line,
                         int64_t index) {
  const std::string where = fmt::format("{}:{}", source, line);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
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
    fail<InputError>("{}: id \"{}\" cannot name an HDF5 group (empty, '/', '.' or '..')", where, r.id);
  auto context = optional_string(j, "context", where);
  if (!context) fail<InputError>("{}: missing \"context\"", where);
  r.context = *context;
  r.question = optional_string(j, "question", where);
  if (r.question && r.question->empty()) r.question.reset();
  r.answer = optional_string(j, "answer", where);
  if (auto unit = optional_string(j, "span_unit", where)) {
    if (*unit == "char") r.span_unit = SpanUnit::Char;
    else if (*unit == "token") r.span_unit = SpanUnit::Token;
    else fail<InputError>("{}: \"span_unit\" must be \"char\" or \"token\", not \"{}\"", where, *unit);
  }
  if (auto it = j.find("spans"); it != j.end()) r.spans = parse_spans(*it, where);
  return r;
}

RecordReader::RecordReader(const std::filesystem::path& path, bool skip_bad)
    : path_(path), in_(path, std::ios::binary), skip_bad_(skip_bad) {
  if (!in_) fail<IoError>("{}: cannot open the input file", path.string());
}

std::optional<InputRecord> RecordReader::next() {
  std::string text;
  while (std::getline(in_, text)) {
    ++line_;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      InputRecord r = parse_record(text, path_.string(), line_, index_);
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
  for (const auto& [name, ranges] : record.spans) {
    for (const SpanRange& r : ranges) {
      SpanRange t = r;
      if (record.span_unit == SpanUnit::Char) {
        const std::string span_where = fmt::format("{}: span \"{}\"", where, name);
        // Tokenise the prefix up to the boundary and compare with the prompt's tokens: where
        // they first differ is the token that straddles the boundary, which a span's start
        // and end both include (the smallest token range covering the characters).
        auto token_at = [&](int64_t ch, bool is_end) {
          const size_t byte = head.size() + utf8_offset(record.context, ch, span_where);
          const std::vector<int32_t> prefix = tokenizer.encode(std::string_view(text).substr(0, byte), add_bos, true);
          size_t same = 0;
          while (same < prefix.size() && same < p.tokens.size() && prefix[same] == p.tokens[same]) ++same;
          if (same == prefix.size()) return static_cast<int64_t>(same);  // a token boundary
          return static_cast<int64_t>(is_end ? same + 1 : same);
        };
        t = {token_at(r.start, false), token_at(r.end, true)};
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
