// RULER's task table, the fitting of each record to the target length, and the record's JSONL.
#include "data/ruler.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/records.h"
#include "data/ruler_task.h"
#include "model/tokenizer.h"

namespace ckv {

const char* const kRulerNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

std::string_view ruler_metric_name(RulerMetric metric) {
  return metric == RulerMetric::StringMatchAll ? "string_match_all" : "string_match_part";
}

const std::vector<RulerTask>& ruler_tasks() {
  // Budgets: scripts/data/synthetic/constants.py "tokens_to_generate"; metrics:
  // scripts/eval/synthetic/constants.py.
  using M = RulerMetric;
  static const std::vector<RulerTask> tasks{
      {"niah_single_1", "niah", 128, M::StringMatchAll},
      {"niah_single_2", "niah", 128, M::StringMatchAll},
      {"niah_single_3", "niah", 128, M::StringMatchAll},
      {"niah_multikey_1", "niah", 128, M::StringMatchAll},
      {"niah_multikey_2", "niah", 128, M::StringMatchAll},
      {"niah_multikey_3", "niah", 128, M::StringMatchAll},
      {"niah_multivalue", "niah", 128, M::StringMatchAll},
      {"niah_multiquery", "niah", 128, M::StringMatchAll},
      {"vt", "variable_tracking", 30, M::StringMatchAll},
      {"cwe", "common_words_extraction", 120, M::StringMatchAll},
      {"fwe", "freq_words_extraction", 50, M::StringMatchAll},
      {"qa_1", "qa", 32, M::StringMatchPart},
      {"qa_2", "qa", 32, M::StringMatchPart},
  };
  return tasks;
}

const RulerTask* find_ruler_task(std::string_view name) {
  for (const RulerTask& t : ruler_tasks())
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

const RulerTask& task_or_throw(std::string_view name) {
  if (const RulerTask* t = find_ruler_task(name)) return *t;
  std::string names;
  for (const RulerTask& t : ruler_tasks())
    names += (names.empty() ? "" : ", ") + std::string(t.name);
  fail<InputError>("ckv ruler: unknown task \"{}\" (RULER's tasks: {}, or all)", name, names);
}

int64_t prompt_tokens(const Tokenizer& tok, const RulerPrompt& p) {
  // As `ckv dump` / `ckv eval` see the record without --chat (lib/data/records.h).
  return static_cast<int64_t>(tok.encode(p.context, true, true).size() +
                              tok.encode(p.question, false, true).size());
}

// A per-task salt, so that the tasks of one seed draw different streams.
uint64_t task_salt(const RulerTask& task) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
  for (const char c : task.name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

std::unique_ptr<RulerTaskGenerator> make_generator(const RulerTask& task, int64_t length,
                                                   uint64_t seed, const Tokenizer& tok) {
  if (task.family == "niah") return make_niah_generator(task);
  if (task.family == "variable_tracking") return make_vt_generator(tok, seed);
  if (task.family == "common_words_extraction") return make_cwe_generator(length);
  if (task.family == "freq_words_extraction") return make_fwe_generator(length);
  return make_qa_generator(task);
}

}  // namespace

RulerGenerator::RulerGenerator(std::string_view task, int64_t length, uint64_t seed,
                               const Tokenizer& tokenizer)
    : task_(&task_or_throw(task)),
      length_(length),
      seed_(seed),
      tokenizer_(tokenizer),
      impl_(make_generator(*task_, length, seed, tokenizer)) {
  const int64_t limit = length_ - task_->tokens_to_generate;
  // The probe: a record stream no record uses, as RULER searches once per task.
  const uint64_t probe = splitmix64(seed_ ^ task_salt(*task_) ^ 0x70726f6265ull);
  const int64_t smallest = prompt_tokens(tokenizer_, impl_->build(0, probe, impl_->min_size()));
  if (smallest > limit)
    fail<InputError>(
        "ckv ruler: --length {} is too short for {}: its prompt takes {} tokens with the smallest "
        "haystack, plus {} tokens of generation budget",
        length_, task_->name, smallest, task_->tokens_to_generate);
  size_ = largest_fitting(impl_->min_size(), [&](int64_t n) {
    return prompt_tokens(tokenizer_, impl_->build(0, probe, n)) <= limit;
  });
  // Tokens per haystack unit, for the records' steps.
  if (size_ > impl_->min_size())
    tokens_per_unit_ = std::max(
        1e-3,
        static_cast<double>(prompt_tokens(tokenizer_, impl_->build(0, probe, size_)) - smallest) /
            static_cast<double>(size_ - impl_->min_size()));
}

RulerGenerator::~RulerGenerator() = default;

RulerRecord RulerGenerator::record(int64_t index) const {
  const int64_t limit = length_ - task_->tokens_to_generate;
  const uint64_t stream = record_seed(seed_ ^ task_salt(*task_), index);
  // From the task's size: down while the record does not fit, up while the next size does,
  // each step the units its token excess or room is worth (at least one), so a record
  // usually takes two tokenisations.
  int64_t n = size_;
  RulerPrompt p = impl_->build(index, stream, n);
  int64_t tokens = prompt_tokens(tokenizer_, p);
  auto units = [&](double tokens_off) {
    return std::max<int64_t>(1, static_cast<int64_t>(tokens_off / tokens_per_unit_));
  };
  while (tokens > limit && n > impl_->min_size()) {
    n = std::max(impl_->min_size(),
                 n - units(static_cast<double>(tokens - limit) + tokens_per_unit_ - 1e-9));
    p = impl_->build(index, stream, n);
    tokens = prompt_tokens(tokenizer_, p);
  }
  if (tokens > limit)
    fail<InputError>(
        "ckv ruler: --length {} is too short for {} record {}: {} tokens with the smallest "
        "haystack, "
        "plus {} tokens of generation budget",
        length_, task_->name, index, tokens, task_->tokens_to_generate);
  for (int64_t step = units(static_cast<double>(limit - tokens));;) {
    RulerPrompt bigger = impl_->build(index, stream, n + step);
    const int64_t t = prompt_tokens(tokenizer_, bigger);
    if (t <= limit) {
      p = std::move(bigger);
      tokens = t;
      n += step;
      step = units(static_cast<double>(limit - tokens));
    } else if (step > 1) {
      step = 1;  // the estimate overshot: the next size alone decides
    } else {
      break;
    }
  }
  RulerRecord r;
  r.id = fmt::format("{}_{:06}", task_->name, index);
  r.context = std::move(p.context);
  r.question = std::move(p.question);
  r.answers = std::move(p.answers);
  r.spans = std::move(p.spans);
  r.n_tokens = tokens;
  r.haystack = n;
  r.task = task_;
  r.length = length_;
  r.seed = seed_;
  r.settings = impl_->settings();
  return r;
}

std::string RulerRecord::to_jsonl() const {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["context"] = context;
  j["question"] = question;
  std::string joined;
  for (const std::string& a : answers) joined += (joined.empty() ? "" : ", ") + a;
  j["answer"] = joined;
  j["answers"] = answers;
  j["task"] = "ruler";
  j["metric"] = ruler_metric_name(task->metric);
  j["spans"] = spans_to_json(spans);
  j["span_unit"] = "char";
  nlohmann::ordered_json r;
  r["task"] = task->name;
  r["family"] = task->family;
  r["length"] = length;
  r["n_tokens"] = n_tokens;
  r["tokens_to_generate"] = task->tokens_to_generate;
  r["seed"] = seed;
  r["haystack_size"] = haystack;
  for (const auto& [key, value] : settings.items()) r[key] = value;
  j["ruler"] = r;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
}

}  // namespace ckv
