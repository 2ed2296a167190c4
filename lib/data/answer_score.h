#pragma once
// Scores of a generated answer against a record's reference answers, exactly as the
// benchmarks the paper reports define them (checked against plain-Python implementations of
// the official code: tests/reference/make_score_goldens.py, tests/test_answer_score.cpp).
//
// RULER (NIAH), github.com/NVIDIA/RULER at c3f5e3b, scripts/eval/evaluate.py and
// scripts/eval/synthetic/constants.py:
//   postprocess(pred)  = strip; every character U+0000..U+001F becomes "\n"; strip again
//   contains[i]        = references[i].lower() is a substring of postprocess(pred).lower()
//   string_match_all   = mean of contains (RULER's metric for niah tasks)
//   string_match_part  = max of contains (RULER's metric for its qa tasks)
// RULER reports mean over records x 100, rounded to 2 decimals; these are per record, in [0, 1].
//
// LongBench (QA), github.com/THUDM/LongBench at 2e00731, LongBench/metrics.py `qa_f1_score`
// with SQuAD v1.1's `normalize_answer`, and LongBench/eval.py `scorer`:
//   normalize(s) = s.lower(); drop every character of Python's string.punctuation (ASCII
//                  !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~ only: curly quotes, dashes and other
//                  non-ASCII punctuation stay); replace each whole word a / an / the by a
//                  space (re `\b(a|an|the)\b`: a word is a maximal run of Python `\w`
//                  characters, Unicode letters and numerics); split on whitespace and join
//                  with one space
//   f1(pred, ref)  = token F1 of normalize(pred).split() and normalize(ref).split() with
//                    multiset (Counter) overlap; 0 when nothing overlaps (also when both are
//                    empty)
//   exact(pred, ref) = normalize(pred) == normalize(ref) (SQuAD v1.1 `exact_match_score`;
//                      LongBench itself reports only F1)
// With several references each score is the max over them (eval.py `scorer`). LongBench's QA
// datasets score the whole generation; only trec/triviaqa/samsum/lsht first cut it to its
// first line (`longbench_first_line`), which score_answer does not do.
//
// NIAH exact match (ckv's definition; RULER has none): exact(pred, answers joined by ", "),
// i.e. the generation is the record's "answer" and nothing else, up to normalize() (case,
// ASCII punctuation, articles, spacing); multi-value needles must come in the record's
// order. f1 for NIAH is f1(pred, answers joined by ", ").
//
// Text is UTF-8. Python semantics are kept where they matter: lower() is Unicode full case
// mapping (ICU's root locale: "İ" -> "i̇", final sigma), whitespace is Python's str.isspace()
// (NBSP and U+3000 split, ZERO WIDTH SPACE does not), and bytes that are not valid UTF-8 (a
// generation cut inside a character) read as U+FFFD per maximal invalid subpart, as
// bytes.decode("utf-8", errors="replace") and HF's decode give.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckv {

// Which benchmark's scoring a record's answers get (an InputRecord's "task", with its
// "metric" for `ckv ruler` records: docs/RULER.md "Scoring").
//   Niah             RULER string_match_all (`ckv niah` records)
//   Qa               LongBench token F1
//   RulerMatchAll    RULER string_match_all: its niah tasks, vt, cwe, fwe
//   RulerMatchPart   RULER string_match_part: its qa_1, qa_2
enum class AnswerTask { None, Niah, Qa, RulerMatchAll, RulerMatchPart };

// "niah", "qa", "string_match_all", "string_match_part", "none".
std::string_view answer_task_name(AnswerTask task);
// The inverse of answer_task_name (but "none"); nullopt for anything else.
std::optional<AnswerTask> parse_answer_task(std::string_view name);

// Every score of one prediction; all fields are filled for either task.
struct AnswerScores {
  AnswerTask task = AnswerTask::None;
  std::vector<bool> contains;      // [references] RULER: reference i is in the prediction
  double string_match_all = 0.0;   // RULER, mean of contains
  double string_match_part = 0.0;  // RULER, max of contains
  double f1 = 0.0;                 // LongBench token F1: Qa, RulerMatchPart max over references;
                                   // Niah, RulerMatchAll vs the references joined by ", "
  bool exact_match = false;        // likewise
  double score = 0.0;              // the task's headline: Niah and RulerMatchAll string_match_all,
                                   // RulerMatchPart string_match_part, Qa f1
};

// Throws InputError when `references` is empty and Error for AnswerTask::None.
AnswerScores score_answer(AnswerTask task, std::string_view prediction,
                          const std::vector<std::string>& references);

// --- the pieces, each as its source defines it -----------------------------------------

// RULER postprocess_pred (valid UTF-8 out).
std::string ruler_postprocess(std::string_view prediction);
// [references] RULER's per-reference test, on the postprocessed prediction.
std::vector<bool> ruler_contains(std::string_view prediction,
                                 const std::vector<std::string>& references);
// Throw InputError when `references` is empty (RULER divides by zero).
double ruler_string_match_all(std::string_view prediction,
                              const std::vector<std::string>& references);
double ruler_string_match_part(std::string_view prediction,
                               const std::vector<std::string>& references);

// SQuAD v1.1 / LongBench normalize_answer (valid UTF-8 out).
std::string normalize_answer(std::string_view text);
double qa_f1_score(std::string_view prediction, std::string_view reference);
bool qa_exact_match(std::string_view prediction, std::string_view reference);
// LongBench eval.py's cut for few-shot datasets: pred.lstrip("\n").split("\n")[0].
std::string longbench_first_line(std::string_view prediction);

// --- Python str semantics the scorers rely on --------------------------------------------

// str.isspace(): the 29 code points of Python 3's Py_UNICODE_ISSPACE.
bool is_python_space(char32_t c);
// re's \w for str patterns: str.isalnum() (letters L*, any Numeric_Type) or '_'.
bool is_python_word(char32_t c);
// str.lower() of UTF-8 text (invalid bytes read as U+FFFD).
std::string python_lower(std::string_view text);

}  // namespace ckv
