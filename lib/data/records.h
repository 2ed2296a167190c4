#pragma once
// Input records of a batch (`--input FILE.jsonl`): one JSON object per line,
//
//   {"id": "q17", "context": "...", "question": "...", "answer": "...",
//    "spans": {"needle": [[120, 164]], "distractor": [[10, 40], [300, 330]]},
//    "span_unit": "char"}
//
// Only "context" is required. "id" defaults to the record's 0-based index (as a string)
// and must be usable as an HDF5 group name: not empty, "." or "..", no '/' and no NUL; ids
// are refused, never rewritten, and must be unique in the file. No text field may contain
// a NUL (HDF5 string attributes end at one): such a line is refused. A malformed line
// (bad JSON, a number beyond double such as 1e400) is refused naming the file and line. "question" and
// "answer" are strings or absent/null; an empty question means no question.
//
// Answer scoring (`ckv eval`, lib/data/answer_score.h) reads two more fields:
//   "answers": ["8528032", "6369474"]  the reference answers, a non-empty list of non-empty
//              strings; absent/null: the one reference "answer" when that is not empty
//   "task": "niah" | "qa" | "ruler"    RULER scoring (every reference must appear),
//              LongBench scoring (token F1 against the best reference), or RULER's metric
//              named by "metric": "string_match_all" | "string_match_part" (`ckv ruler`
//              writes both, docs/RULER.md); absent/null: "niah"
//              when the record has a "niah" object (`ckv niah` writes one), else "qa" when it
//              has a reference, else none (not scored). A task given explicitly needs a
//              reference.
// "answer" stays what other subcommands use (`ckv mask` teacher-forces it): `ckv niah` writes
// the answers joined by ", " there.
//
// Spans are half-open [start, end) ranges. With "span_unit": "char" (the default) they
// index Unicode code points of "context" (Python's str indices, `s.index(needle)`); they
// are converted to the smallest token range covering those characters (HF's
// char_to_token(start) .. char_to_token(end - 1) + 1), from the byte range each prompt token
// spells: linear in the prompt plus a binary search per boundary. For a tokenizer whose
// tokens do not spell the text (a normalizer rewrote it) each boundary instead tokenises the
// context prefix up to it and takes the token where that tokenisation leaves the prompt's.
// With "span_unit": "token" they are token positions of the whole prompt as dumped
// (BOS and chat-template tokens included) and are used as given.
//
// The prompt is the context followed by the question, each tokenised on its own (the
// context with the model's BOS, the question without), so the boundary c (context_end) is
// exact: positions [0, c) are the context (the evictable entries), [c, n) the question.
// With --chat the user message is context + question rendered by the chat template, split
// at the end of the context; c counts the template's header, and everything after the
// context (question, end-of-turn and generation prompt) is question.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/answer_score.h"
#include "core/spans.h"

namespace ckv {

class Tokenizer;

enum class SpanUnit { Char, Token };

struct InputRecord {
  std::string id;
  int64_t index = 0;  // 0-based position in the batch
  int64_t line = 0;   // 1-based line of the input file; 0 when not from a file
  std::string context;
  std::optional<std::string> question;
  std::optional<std::string> answer;
  std::vector<std::string> answers;  // [references] scored by `ckv eval`; empty: none
  AnswerTask task = AnswerTask::None;
  SpanUnit span_unit = SpanUnit::Char;
  NamedSpans spans;
};

// Refuses (InputError "<where>: "<field>" contains a NUL ...") text with a NUL byte, which
// an HDF5 string attribute would cut.
void check_text_field(std::string_view text, std::string_view where, std::string_view field);

// One JSONL line. Throws InputError "<source>:<line>: <what is wrong>".
InputRecord parse_record(std::string_view text, std::string_view source, int64_t line,
                         int64_t index);

// Streams records from a JSONL file: one line in memory at a time. Blank lines are
// skipped. A malformed line throws InputError naming the file and line, or, with
// skip_bad, is recorded in skipped() and passed over.
class RecordReader {
 public:
  RecordReader(const std::filesystem::path& path, bool skip_bad = false);
  std::optional<InputRecord> next();
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  std::filesystem::path path_;
  std::ifstream in_;
  bool skip_bad_;
  int64_t line_ = 0;
  int64_t index_ = 0;
  std::map<std::string, int64_t> id_lines_;  // id -> the line that used it first
  std::vector<std::string> skipped_;
};

// A record as token ids with its boundary and spans in token positions.
struct RecordPrompt {
  std::vector<int32_t> tokens;  // [seq]
  int64_t context_end = 0;      // c: positions [0, c) are the context
  NamedSpans token_spans;       // spans in token positions of `tokens`
};

// Tokenises a record (see the header comment). Throws InputError naming the record when
// the context is empty, a span lies outside its context or prompt, or the chat template
// does not contain the text verbatim.
RecordPrompt tokenize_record(const InputRecord& record, const Tokenizer& tokenizer, bool chat);

// The reference answer that `ckv eval` teacher-forces for log p(answer): the record's
// "answer", else its first reference, with a space before it (the answer follows "Answer:")
// unless it starts with one or leading_space is false; empty when the record has none.
std::vector<int32_t> answer_token_ids(const InputRecord& record, const Tokenizer& tokenizer, bool leading_space);

// Spans as the records' JSON writes them: {name: [[start, end], ...]} (the writers of
// `ckv niah` and `ckv ruler`).
nlohmann::ordered_json spans_to_json(const NamedSpans& spans);

// Byte offset in a UTF-8 string of code point `index` (index == code point count gives
// the size). Throws InputError when the index is past the end.
size_t utf8_offset(std::string_view text, int64_t index, std::string_view what);

}  // namespace ckv
