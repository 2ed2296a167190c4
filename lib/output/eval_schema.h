#pragma once
// Outputs of `ckv eval` (schema "ckv.eval" version 3, docs/EVAL.md): an HDF5 file written
// record by record (batch_output.h: shards, --resume, `ckv merge`), and the tidy CSV (one
// row per record x run) and JSON summary (accuracy per method x budget, the rank
// correlation of perturbation and answer quality) regenerated from it, so a resumed run and
// a merge of shards give the side files of one uninterrupted run.
//
//   /                       attrs: batch root (batch_output.h), settings (JSON), methods,
//                           budget_fractions, n_layer, n_head, n_kv_head
//   /records/<id>           attrs: index, complete, n_tokens, context_end, question_start, first_token,
//                           task, answers (JSON list), run_labels; datasets tokens [n] i32
//                           (attr token_text), answer_ids [m] i32
//   /records/<id>/runs/<k>  k = 0 the full cache, then methods x budgets (methods outer);
//                           attrs: label, method, fraction, budget, kept_entries, first_row, kl,
//                           top1_agree, top1_full, top1_run, mean_l1, mean_l2, logp_answer
//                           (NaN without an answer), text, stop, scores (JSON, when the
//                           record has a task); datasets tokens [t] i32, kept [n_layer,
//                           n_kv_head] i64, l1 / l2 [n_layer, n_head] f32
//   with --track-steps S (docs/EVAL.md "Along the answer"): the record's dataset step_tokens [S]
//   i32, and every run k >= 1 step_l1 / step_l2 / step_theta_hat / step_theta_hat_l2
//   [S, n_layer, n_head] f32, step_kl [S] f64, step_top1_agree [S] i32
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/answer_score.h"
#include "analysis/cache_eval.h"
#include "io/h5.h"

namespace ckv {

struct Provenance;

inline constexpr const char* kEvalSchema = "ckv.eval";
// 2: the record's `c` and `prompt` became `context_end` and `tokens` (the names of the other
// schemas); 3: its `n` became `n_tokens` and the root's `budgets` `budget_fractions` (one
// vocabulary with bound, mask and dump). Older files are refused by ckv (rerun `ckv eval`)
// and read by the Python reader (python/ckv/reader.py).
inline constexpr int64_t kEvalSchemaVersion = 3;

struct EvalRecord {
  std::string id;
  int64_t index = 0;
  AnswerTask task = AnswerTask::None;
  std::vector<std::string> answers;
  std::vector<int32_t> prompt, answer_ids;
  std::vector<std::string> prompt_text;  // [prompt] or empty: each prompt token as text (token_texts)
  // Each decoded token as text (token_texts over the model's tokenizer); unset: no text stored.
  std::function<std::vector<std::string>(const std::vector<int32_t>&)> decoded_text;
  CacheEvalResult result;
  // [1 + runs] the full cache's scores, then each run's (set when task is not None).
  std::vector<std::optional<AnswerScores>> scores;
};

class EvalFile {
 public:
  static EvalFile create(const std::filesystem::path& path, const Provenance& provenance,
                         const nlohmann::json& settings, const std::vector<std::string>& methods,
                         const std::vector<double>& budgets, const ModelConfig& config);
  // Reopens an interrupted file (check_resumable_output first) and notes the resume.
  static EvalFile resume(const std::filesystem::path& path, const std::string& resumed_by);
  std::set<std::string> complete_records() const;
  void write_record(const EvalRecord& record);
  void close() { file_.close(); }

 private:
  explicit EvalFile(h5::File file) : file_(std::move(file)) {}
  h5::File file_;
};

// Throws FormatError unless the file is a ckv.eval of kEvalSchemaVersion.
void check_eval_schema(const h5::File& file);
// Checks a complete record group of an eval file as a reader needs it (validate.h).
void check_eval_record(const h5::Group& record, int64_t n_layer, int64_t n_head, int64_t n_kv_head);

// One run of one record as the summaries read it back.
struct EvalRow {
  std::string record, task, method, stop, text;
  int64_t index = 0, budget = 0, kept_entries = 0, tokens = 0, first_row = 0;
  double fraction = 1, kl = 0, mean_l1 = 0, mean_l2 = 0;
  bool top1_agree = true;
  std::optional<double> logp_answer, logp_answer_full;
  std::optional<AnswerScores> scores;
  // Along the answer (--track-steps), per step: the mean over layers and heads of step_l1,
  // step_l2, step_theta_hat, and step_kl, step_top1_agree; empty without it.
  std::vector<double> step_l1, step_l2, step_theta_hat, step_kl, step_top1_agree;
};

// Every run of every complete record, in input order (full first in each record).
std::vector<EvalRow> read_eval_rows(const std::filesystem::path& eval_h5);

// Spearman's rank correlation (average ranks for ties); NaN for fewer than 3 pairs or a
// constant side.
double spearman(const std::vector<double>& x, const std::vector<double>& y);

// The summary of rows: accuracy (the task's headline score), exact match, F1, KL, mean L1/L2,
// log p change and the Spearman correlation of mean L1 with the change in log p(answer)
// against the full cache over the records, per method x budget; and per method the same
// correlation over its records x budgets (which the budget dominates).
nlohmann::ordered_json eval_summary(const std::vector<EvalRow>& rows);
// The tidy CSV of rows (header included).
void write_eval_csv(std::ostream& out, const std::vector<EvalRow>& rows);
// The CSV and JSON summary of a complete eval file (atomic writes are the caller's).
void write_eval_summaries(const std::filesystem::path& eval_h5, const std::filesystem::path& csv,
                          const std::filesystem::path& json);
// The console table: accuracy per method (rows) x budget (columns), the full cache's beside.
std::string eval_table(const nlohmann::ordered_json& summary);

}  // namespace ckv
