#pragma once
// RULER's 13 synthetic tasks (github.com/NVIDIA/RULER, scripts/synthetic.yaml and
// scripts/data/synthetic/*.py; docs/RULER.md), generated for any model's tokenizer: each
// record's haystack is the largest for which prompt + the task's generation budget fits the
// target length, as RULER's binary search over the haystack size. What RULER ships and ckv
// cannot (Paul Graham's essays, wonderwords' word lists, SQuAD, HotpotQA, nltk's sentence
// splitter) is replaced by data the repository ships, named in every record ("stand_in").
//
// Deterministic for a seed on every machine (data/needles.h): record i of a task depends on
// (task, length, seed, i) and the tokenizer only.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spans.h"

namespace ckv {

class Tokenizer;

// RULER's metrics (scripts/eval/synthetic/constants.py), scored by lib/data/answer_score.h.
enum class RulerMetric { StringMatchAll, StringMatchPart };
std::string_view ruler_metric_name(RulerMetric metric);

struct RulerTask {
  std::string_view name;    // "niah_single_1", ..., "qa_2"
  std::string_view family;  // RULER's script: "niah", "variable_tracking",
                            // "common_words_extraction", "freq_words_extraction", "qa"
  int64_t tokens_to_generate = 0;
  RulerMetric metric = RulerMetric::StringMatchAll;
};

// The 13 tasks in RULER's order (synthetic.yaml).
const std::vector<RulerTask>& ruler_tasks();
// nullptr when `name` is not one of them.
const RulerTask* find_ruler_task(std::string_view name);

struct RulerRecord {
  std::string id;  // "<task>_<index:06>"
  std::string context;
  std::string question;  // RULER's query and answer prefix: the prompt ends with the prefix
  std::vector<std::string> answers;  // RULER's "outputs"
  NamedSpans spans;                  // code points of context: "needle" (evidence), and per task
                                     // "other_needle" / "example"
  int64_t n_tokens = 0;          // context (with BOS) + question tokens, as `ckv dump` counts them
  int64_t haystack = 0;          // the haystack size used, in the task's unit
  std::string to_jsonl() const;  // one JSONL line (no newline); docs/RULER.md "Record"

  const RulerTask* task = nullptr;
  int64_t length = 0;
  uint64_t seed = 0;
  nlohmann::ordered_json settings;  // the task's own "ruler" fields (haystack, stand_in, ...)
};

class RulerTaskGenerator;

// One task at one length for one tokenizer. The constructor finds the task's haystack size
// (one probe record) and throws InputError when even the smallest haystack does not fit
// (`length` too short for the task) or `task` is not a RULER task.
class RulerGenerator {
 public:
  RulerGenerator(std::string_view task, int64_t length, uint64_t seed, const Tokenizer& tokenizer);
  ~RulerGenerator();
  RulerGenerator(const RulerGenerator&) = delete;
  RulerGenerator& operator=(const RulerGenerator&) = delete;

  const RulerTask& task() const { return *task_; }
  // Record `index`: its haystack walks from the task's size to the largest that fits.
  RulerRecord record(int64_t index) const;

 private:
  const RulerTask* task_;
  int64_t length_;
  uint64_t seed_;
  const Tokenizer& tokenizer_;
  std::unique_ptr<RulerTaskGenerator> impl_;
  int64_t size_ = 0;
  double tokens_per_unit_ = 1;
};

}  // namespace ckv
