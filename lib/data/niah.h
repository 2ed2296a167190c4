#pragma once
// RULER-style needle-in-a-haystack prompts (docs/NIAH.md), fitted to a target length in
// tokens of a given tokenizer, with the needle spans (evidence) and length-matched
// distractor spans recorded in the JSONL format that `ckv dump --input` reads
// (lib/data/records.h; spans in code points of "context").
//
// Deterministic for a seed on every machine: the only randomness is std::mt19937_64 (its
// output sequence is fixed by the C++ standard) mapped to ranges by the functions of
// data/needles.h (shared with `ckv ruler`), never by std::*_distribution (whose algorithms differ between standard
// libraries); nothing is iterated in hash order.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/records.h"

namespace ckv {

class Tokenizer;

enum class NiahValueKind { Numbers, Uuids };

struct NiahOptions {
  int64_t length = 4096;   // target prompt length in tokens (context with BOS + question)
  int64_t count = 1;       // records
  uint64_t seed = 0;
  int64_t keys = 1;        // distinct keys inserted (RULER num_needle_k); at least `queries`
  int64_t values = 1;      // values per key (multi-value)
  int64_t queries = 1;     // keys asked about (multi-query)
  NiahValueKind value_kind = NiahValueKind::Numbers;
  std::vector<double> depths{};  // grid in [0, 1]: record r puts its first needle at depths[r % size];
                               // empty: every needle at a random depth
  int64_t distractors = 1;     // length-matched haystack spans per evidence needle
  double tolerance = 0.01;     // allowed |tokens - length| / length
  std::string haystack_name = "noise";
  std::string id_prefix = "niah";
};

// The built-in noise haystack sentence group, repeated.
extern const char* const kNiahNoise;

struct NiahRecord {
  std::string id;
  std::string context;
  std::string question;
  std::vector<std::string> answers;  // values of the asked keys, in insertion order
  NamedSpans spans;                  // code points of context: "needle", "distractor", "other_needle"
  std::vector<double> depths;        // of each evidence needle: its start / haystack length (chars)
  int64_t n_tokens = 0;              // context (with BOS) + question tokens
  int64_t context_tokens = 0;

  // One JSONL line (no newline): id, context, question, answer (answers joined by ", "),
  // answers, task "niah" (RULER scoring in `ckv eval`), spans, span_unit "char", and a
  // "niah" object with the generation settings.
  std::string to_jsonl(const NiahOptions& options) const;
};

// Record `index` of the set (independent of the others: its random stream is seeded from
// (seed, index)). `haystack` is the haystack text (whitespace-separated words; it is
// repeated when too short). Throws InputError when the target cannot be met within the
// tolerance (too short for the template and needles).
NiahRecord make_niah_record(const NiahOptions& options, const Tokenizer& tokenizer,
                            const std::string& haystack, int64_t index);

}  // namespace ckv
