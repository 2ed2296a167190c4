#include "output/eval_schema.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "output/provenance.h"
#include "output/batch_output.h"
#include "output/describe.h"

namespace ckv {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// "full cache" or "snapkv 20%": what a run group's number stands for.
std::string run_label(const CacheEvalRun& run, size_t k) {
  return k == 0 ? std::string("full cache") : fmt::format("{} {:g}%", run.method, 100 * run.fraction);
}

nlohmann::json scores_json(const AnswerScores& s) {
  return {{"task", std::string(answer_task_name(s.task))},
          {"contains", s.contains},
          {"string_match_all", s.string_match_all},
          {"string_match_part", s.string_match_part},
          {"f1", s.f1},
          {"exact_match", s.exact_match},
          {"score", s.score}};
}

AnswerScores scores_from_json(const nlohmann::json& j) {
  AnswerScores s;
  s.task = parse_answer_task(j.at("task").get<std::string>()).value_or(AnswerTask::None);
  s.contains = j.at("contains").get<std::vector<bool>>();
  s.string_match_all = j.at("string_match_all").get<double>();
  s.string_match_part = j.at("string_match_part").get<double>();
  s.f1 = j.at("f1").get<double>();
  s.exact_match = j.at("exact_match").get<bool>();
  s.score = j.at("score").get<double>();
  return s;
}

// Along the answer (--track-steps): per step, layer and query head, of a compressed run.
void write_steps(h5::Group& g, const CacheEvalRun& run, int64_t n_layer, int64_t n_head) {
  const auto steps = static_cast<int64_t>(run.step_next.size());
  if (steps == 0) return;
  const std::vector<int64_t> shape{steps, n_layer, n_head};
  const std::vector<std::string> dims{"step", "layer", "head"};
  put_described(
      g, "step_l1", h5::DType::F32, shape, run.step_l1, dims,
      "L1 norm of the change of each head's output at the query of answer step s (the full cache's "
      "s-th answer "
      "token, teacher-forced at position n + s - 1), this run's kept set against the full cache");
  put_described(g, "step_l2", h5::DType::F32, shape, run.step_l2, dims,
                "L2 norm of the same change");
  put_described(g, "step_theta_hat", h5::DType::F32, shape, run.step_theta_hat, dims,
                "the bound theta_hat (L1, docs/MATH.md §3) of the same kept set at the same query");
  put_described(g, "step_theta_hat_l2", h5::DType::F32, shape, run.step_theta_hat_l2, dims,
                "the bound theta_hat of the L2 norm at the same query");
  std::vector<double> kl;
  std::vector<int32_t> agree;
  for (const NextToken& t : run.step_next) {
    kl.push_back(t.kl);
    agree.push_back(t.top1_agree ? 1 : 0);
  }
  put_described(g, "step_kl", h5::DType::F64, {steps}, kl, {"step"},
                "KL(full || this run) of the next-token distribution at answer step s, both caches "
                "fed the same tokens",
                "nats");
  put_described(g, "step_top1_agree", h5::DType::I32, {steps}, agree, {"step"},
                "1 where this run's most likely next token at step s is the full cache's");
}

void write_run(h5::Group& runs, size_t k, const CacheEvalRun& run, const std::optional<AnswerScores>& scores,
               const std::vector<std::string>& token_text, int64_t n_layer, int64_t n_head, int64_t n_kv_head) {
  h5::Group g = runs.create_group(std::to_string(k));
  g.set_attr_string("method", run.method);
  g.set_attr_double("fraction", run.fraction);
  g.set_attr_int("budget", run.budget);
  g.set_attr_int("kept_entries", run.kept_entries);
  g.set_attr_int("first_row", run.first_row);
  g.set_attr_double("kl", run.first.kl);
  g.set_attr_bool("top1_agree", run.first.top1_agree);
  g.set_attr_int("top1_full", run.first.top1_full);
  g.set_attr_int("top1_run", run.first.top1_masked);
  g.set_attr_double("mean_l1", run.mean_l1);
  g.set_attr_double("mean_l2", run.mean_l2);
  g.set_attr_double("logp_answer", run.logp_answer.value_or(kNaN));
  g.set_attr_string("text", run.decoded.text);
  g.set_attr_string("stop", run.decoded.stop);
  if (scores) g.set_attr_json("scores", scores_json(*scores));
  g.set_attr_string("label", run_label(run, k));
  h5::Dataset tokens = put_described(
      g, "tokens", h5::DType::I32, {static_cast<int64_t>(run.decoded.tokens.size())},
      run.decoded.tokens, {"token"},
      "token ids decoded greedily under this run's cache (attribute `text`: them as text)");
  set_token_text(tokens, token_text);
  put_described(g, "kept", h5::DType::I64, {n_layer, n_kv_head}, run.kept_per_head,
                {"layer", "kv_head"}, "entries kept in each layer's KV-head cache", "entries");
  std::vector<float> l1 = run.l1, l2 = run.l2;
  if (l1.empty()) l1.assign(static_cast<size_t>(n_layer * n_head), 0.0f);  // the full cache: nothing evicted
  if (l2.empty()) l2.assign(static_cast<size_t>(n_layer * n_head), 0.0f);
  put_described(g, "l1", h5::DType::F32, {n_layer, n_head}, l1, {"layer", "head"},
                "L1 norm of the change of each head's output at the first decoded row, this cache "
                "against the full one "
                "(0 for the full cache)");
  put_described(g, "l2", h5::DType::F32, {n_layer, n_head}, l2, {"layer", "head"},
                "L2 norm of the same change");
  write_steps(g, run, n_layer, n_head);
}

[[noreturn]] void bad(const h5::Object& o, const std::string& what) {
  fail<FormatError>("{}: {}: {}", o.file_name(), o.path(), what);
}

void need(const h5::Object& o, const char* attr) {
  if (!o.has_attr(attr)) bad(o, fmt::format("attribute \"{}\" missing", attr));
}

void need_dataset(const h5::Group& g, const char* name, h5::DType type, const std::vector<int64_t>& shape) {
  if (!g.is_dataset(name)) bad(g, fmt::format("dataset \"{}\" missing", name));
  const h5::Dataset d = g.open_dataset(name);
  if (d.dtype() != type) bad(d, "element type is not what this schema stores");
  const std::vector<int64_t> s = d.shape();
  bool ok = s.size() == shape.size();
  for (size_t i = 0; ok && i < s.size(); ++i) ok = shape[i] < 0 || s[i] == shape[i];
  if (!ok) bad(d, fmt::format("shape [{}] is not the schema's", fmt::join(s, ", ")));
}

// The runs of a record in the order they were written (0 = full, 1, 2, ...).
std::vector<std::string> eval_run_names(const h5::Group& record) {
  std::vector<std::string> names = record.open_group("runs").children();
  for (const std::string& n : names)
    if (n.empty() || n.size() > 6 || !std::all_of(n.begin(), n.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      bad(record, fmt::format("run \"{}\" is not a run number", n));
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  return names;
}

}  // namespace

EvalFile EvalFile::create(const std::filesystem::path& path, const Provenance& provenance,
                          const nlohmann::json& settings, const std::vector<std::string>& methods,
                          const std::vector<double>& budgets, const ModelConfig& config) {
  h5::File file = h5::File::create(path);
  file.set_attr_string("schema", kEvalSchema);
  file.set_attr_int("schema_version", kEvalSchemaVersion);
  provenance.write_attrs(file);
  file.set_attr_json("settings", settings);
  file.set_attr_strings("methods", methods);
  file.set_attr_doubles("budget_fractions", budgets);
  file.set_attr_int("n_layer", config.n_layer);
  file.set_attr_int("n_head", config.n_head);
  file.set_attr_int("n_kv_head", config.n_kv_head);
  return EvalFile(std::move(file));
}

EvalFile EvalFile::resume(const std::filesystem::path& path, const std::string& resumed_by) {
  h5::File file = h5::File::open_rw(path);
  check_eval_schema(file);
  note_resumed(file, resumed_by);
  return EvalFile(std::move(file));
}

std::set<std::string> EvalFile::complete_records() const { return complete_record_ids(file_); }

void EvalFile::write_record(const EvalRecord& r) {
  const int64_t n_layer = file_.attr_int("n_layer"), n_head = file_.attr_int("n_head"),
                n_kv_head = file_.attr_int("n_kv_head");
  h5::Group g = begin_record_group(file_, r.id, r.index);
  g.set_attr_int("n_tokens", r.result.n);
  g.set_attr_int("context_end", r.result.c);
  g.set_attr_int("question_start", r.result.question_start);
  g.set_attr_int("first_token", r.result.first_token);
  g.set_attr_string("task", std::string(answer_task_name(r.task)));
  g.set_attr_json("answers", r.answers);
  h5::Dataset tokens = put_described(
      g, "tokens", h5::DType::I32, {static_cast<int64_t>(r.prompt.size())}, r.prompt, {"pos"},
      "token ids of the prompt (context, then question); attribute token_text: them as text");
  set_token_text(tokens, r.prompt_text);
  put_described(g, "answer_ids", h5::DType::I32, {static_cast<int64_t>(r.answer_ids.size())},
                r.answer_ids, {"token"},
                "token ids of the reference answer, whose log-probability each run reports");
  if (!r.result.step_tokens.empty()) {
    h5::Dataset steps = put_described(
        g, "step_tokens", h5::DType::I32, {static_cast<int64_t>(r.result.step_tokens.size())},
        r.result.step_tokens, {"step"},
        "the full cache's greedy answer tokens that --track-steps feeds to every cache, step s "
        "at position n + s - 1; each compressed run's step_* datasets follow them");
    if (r.decoded_text) set_token_text(steps, r.decoded_text(r.result.step_tokens));
  }
  h5::Group runs = g.create_group("runs");
  describe(runs, "one group per run, numbered in the order run: 0 the full cache, then method x budget; each "
                 "group's attribute `label` names it, the record's `run_labels` lists them in order");
  std::vector<std::string> labels{run_label(r.result.full, 0)};
  const auto texts = [&](const CacheEvalRun& run) {
    return r.decoded_text ? r.decoded_text(run.decoded.tokens) : std::vector<std::string>{};
  };
  write_run(runs, 0, r.result.full, r.scores.empty() ? std::nullopt : r.scores[0], texts(r.result.full), n_layer,
            n_head, n_kv_head);
  for (size_t k = 0; k < r.result.runs.size(); ++k) {
    write_run(runs, k + 1, r.result.runs[k], k + 1 < r.scores.size() ? r.scores[k + 1] : std::nullopt,
              texts(r.result.runs[k]), n_layer, n_head, n_kv_head);
    labels.push_back(run_label(r.result.runs[k], k + 1));
  }
  g.set_attr_strings("run_labels", labels);
  finish_record_group(file_, g);
}

void check_eval_schema(const h5::File& file) { check_schema(file, kEvalSchema, kEvalSchemaVersion, "ckv eval output"); }

void check_eval_record(const h5::Group& r, int64_t n_layer, int64_t n_head, int64_t n_kv_head) {
  for (const char* a : {"n_tokens", "context_end", "question_start", "first_token", "task", "answers"}) need(r, a);
  const int64_t n = r.attr_int("n_tokens"), c = r.attr_int("context_end"), question = r.attr_int("question_start");
  if (n < 1 || c < 1 || c > n) bad(r, fmt::format("n_tokens {} and context_end {} are inconsistent", n, c));
  // The context ends where the question starts (context_end, or the whole prompt with --compress prompt).
  if (question < 1 || question > n || (c != question && c != n))
    bad(r, fmt::format("question_start {} is outside the record's {} tokens or disagrees with context_end {}",
                       question, n, c));
  if (r.attr_int("first_token") < -1) bad(r, fmt::format("first_token {} is not a token id", r.attr_int("first_token")));
  need_dataset(r, "tokens", h5::DType::I32, {n});
  need_dataset(r, "answer_ids", h5::DType::I32, {-1});
  if (!parse_answer_task(r.attr_string("task")) && r.attr_string("task") != "none")
    bad(r, fmt::format("task \"{}\" unknown", r.attr_string("task")));
  if (!r.attr_json("answers").is_array()) bad(r, "attribute \"answers\" is not a list");
  int64_t steps = 0;  // --track-steps
  if (r.is_dataset("step_tokens")) {
    need_dataset(r, "step_tokens", h5::DType::I32, {-1});
    steps = r.open_dataset("step_tokens").shape().at(0);
  }
  if (!r.is_group("runs")) bad(r, "group \"runs\" missing");
  const std::vector<std::string> names = eval_run_names(r);
  if (names.empty() || names.front() != "0") bad(r, "run 0 (the full cache) missing");
  for (const std::string& name : names) {
    const h5::Group g = r.open_group("runs/" + name);
    for (const char* a : {"method", "fraction", "budget", "kept_entries", "first_row", "kl", "top1_agree", "mean_l1",
                          "mean_l2", "logp_answer", "text", "stop"})
      need(g, a);
    g.attr_string("method");
    g.attr_string("text");
    g.attr_double("kl");
    const double fraction = g.attr_double("fraction");
    if (!(fraction > 0 && fraction <= 1)) bad(g, fmt::format("fraction {} is outside (0, 1]", fraction));
    const int64_t budget = g.attr_int("budget"), kept = g.attr_int("kept_entries"), row = g.attr_int("first_row");
    if (budget < 0 || budget > c) bad(g, fmt::format("budget {} is outside [0, {}]", budget, c));
    if (kept < 0 || kept > c * n_layer * n_kv_head)
      bad(g, fmt::format("kept_entries {} is outside [0, {}]", kept, c * n_layer * n_kv_head));
    if (row < 0 || row > n) bad(g, fmt::format("first_row {} is outside [0, {}]", row, n));
    g.attr_bool("top1_agree");
    if (g.has_attr("scores")) scores_from_json(g.attr_json("scores"));
    need_dataset(g, "tokens", h5::DType::I32, {-1});
    need_dataset(g, "kept", h5::DType::I64, {n_layer, n_kv_head});
    for (const int64_t k : g.open_dataset("kept").read<int64_t>())
      if (k < 0 || k > c) bad(g, fmt::format("dataset \"kept\" holds {}, outside [0, {}]", k, c));
    need_dataset(g, "l1", h5::DType::F32, {n_layer, n_head});
    need_dataset(g, "l2", h5::DType::F32, {n_layer, n_head});
    if (steps > 0 && name != "0") {
      for (const char* d : {"step_l1", "step_l2", "step_theta_hat", "step_theta_hat_l2"})
        need_dataset(g, d, h5::DType::F32, {steps, n_layer, n_head});
      need_dataset(g, "step_kl", h5::DType::F64, {steps});
      need_dataset(g, "step_top1_agree", h5::DType::I32, {steps});
    }
  }
}

namespace {

// Each step's mean over layers and heads of a run's step_* datasets (--track-steps).
void read_steps(const h5::Group& g, EvalRow& row) {
  const auto per_step = [&](const char* name) {
    const std::vector<float> x = g.open_dataset(name).read<float>();
    const int64_t steps = g.open_dataset(name).shape().at(0);
    std::vector<double> mean(static_cast<size_t>(steps), 0.0);
    const size_t each = steps > 0 ? x.size() / static_cast<size_t>(steps) : 0;
    for (size_t s = 0; s < mean.size(); ++s) {
      for (size_t i = 0; i < each; ++i) mean[s] += x[s * each + i];
      mean[s] /= static_cast<double>(std::max<size_t>(each, 1));
    }
    return mean;
  };
  row.step_l1 = per_step("step_l1");
  row.step_l2 = per_step("step_l2");
  row.step_theta_hat = per_step("step_theta_hat");
  row.step_kl = g.open_dataset("step_kl").read<double>();
  const std::vector<int32_t> agree = g.open_dataset("step_top1_agree").read<int32_t>();
  row.step_top1_agree.assign(agree.begin(), agree.end());
}

}  // namespace

std::vector<EvalRow> read_eval_rows(const std::filesystem::path& eval_h5) {
  const h5::File f = h5::File::open_read(eval_h5);
  check_eval_schema(f);
  std::vector<EvalRow> rows;
  for (const std::string& id : complete_records_in_input_order(f)) {
    const h5::Group r = f.open_group("records/" + id);
    const int64_t index = r.attr_int("index");
    const std::string task = r.attr_string("task");
    std::optional<double> logp_full;
    for (const std::string& name : eval_run_names(r)) {
      const h5::Group g = r.open_group("runs/" + name);
      EvalRow row;
      row.record = id;
      row.index = index;
      row.task = task;
      row.method = g.attr_string("method");
      row.fraction = g.attr_double("fraction");
      row.budget = g.attr_int("budget");
      row.kept_entries = g.attr_int("kept_entries");
      row.first_row = g.attr_int("first_row");
      row.kl = g.attr_double("kl");
      row.top1_agree = g.attr_bool("top1_agree");
      row.mean_l1 = g.attr_double("mean_l1");
      row.mean_l2 = g.attr_double("mean_l2");
      const double lp = g.attr_double("logp_answer");
      if (!std::isnan(lp)) row.logp_answer = lp;
      if (name == "0") logp_full = row.logp_answer;
      row.logp_answer_full = logp_full;
      row.text = g.attr_string("text");
      row.stop = g.attr_string("stop");
      row.tokens = g.open_dataset("tokens").shape().at(0);
      if (g.is_dataset("step_kl")) read_steps(g, row);
      if (g.has_attr("scores")) row.scores = scores_from_json(g.attr_json("scores"));
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  const size_t n = x.size();
  if (n != y.size() || n < 3) return kNaN;
  const auto ranks = [n](const std::vector<double>& v) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j + 1 < n && v[order[j + 1]] == v[order[i]]) ++j;
      const double avg = (static_cast<double>(i + j) / 2.0) + 1.0;  // ties: the mean rank
      for (size_t k = i; k <= j; ++k) r[order[k]] = avg;
      i = j + 1;
    }
    return r;
  };
  const std::vector<double> rx = ranks(x), ry = ranks(y);
  const double mx = std::accumulate(rx.begin(), rx.end(), 0.0) / static_cast<double>(n);
  const double my = std::accumulate(ry.begin(), ry.end(), 0.0) / static_cast<double>(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxy += (rx[i] - mx) * (ry[i] - my);
    sxx += (rx[i] - mx) * (rx[i] - mx);
    syy += (ry[i] - my) * (ry[i] - my);
  }
  if (sxx == 0 || syy == 0) return kNaN;
  return sxy / std::sqrt(sxx * syy);
}

namespace {
nlohmann::json finite_or_null(double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); }
}  // namespace

nlohmann::ordered_json eval_summary(const std::vector<EvalRow>& rows) {
  struct Acc {
    int64_t runs = 0, scored = 0, exact = 0, agree = 0, with_logp = 0;
    double score = 0, f1 = 0, kl = 0, l1 = 0, l2 = 0, dlogp = 0, kept = 0;
    std::vector<double> l1s, dlogps;  // per record: mean L1 and the change of log p(answer)
    // Along the answer, per step: sums over records and how many records reach the step.
    std::vector<double> step_l1, step_l2, step_theta_hat, step_kl, step_agree;
    std::vector<int64_t> step_records;
  };
  // Keys in first-seen order: methods as given, budgets as given.
  std::vector<std::string> methods;
  std::map<std::string, std::vector<double>> budgets;
  std::map<std::pair<std::string, double>, Acc> acc;
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> pairs;  // method -> (L1, delta logp)
  for (const EvalRow& r : rows) {
    const double f = r.method == "full" ? 1.0 : r.fraction;
    if (std::find(methods.begin(), methods.end(), r.method) == methods.end()) methods.push_back(r.method);
    auto& bl = budgets[r.method];
    if (std::find(bl.begin(), bl.end(), f) == bl.end() && !(std::isnan(f) && !bl.empty())) bl.push_back(f);
    Acc& a = acc[{r.method, std::isnan(f) ? -1.0 : f}];
    ++a.runs;
    a.kl += r.kl;
    a.agree += r.top1_agree;
    a.l1 += r.mean_l1;
    a.l2 += r.mean_l2;
    a.kept += static_cast<double>(r.kept_entries);
    if (r.scores) {
      ++a.scored;
      a.score += r.scores->score;
      a.f1 += r.scores->f1;
      a.exact += r.scores->exact_match;
    }
    for (size_t t = 0; t < r.step_kl.size(); ++t) {
      if (a.step_records.size() <= t)
        for (auto* v : {&a.step_l1, &a.step_l2, &a.step_theta_hat, &a.step_kl, &a.step_agree}) v->push_back(0.0);
      if (a.step_records.size() <= t) a.step_records.push_back(0);
      ++a.step_records[t];
      a.step_l1[t] += r.step_l1[t];
      a.step_l2[t] += r.step_l2[t];
      a.step_theta_hat[t] += r.step_theta_hat[t];
      a.step_kl[t] += r.step_kl[t];
      a.step_agree[t] += r.step_top1_agree[t];
    }
    if (r.logp_answer && r.logp_answer_full) {
      ++a.with_logp;
      a.dlogp += *r.logp_answer - *r.logp_answer_full;
      a.l1s.push_back(r.mean_l1);
      a.dlogps.push_back(*r.logp_answer - *r.logp_answer_full);
      if (r.method != "full") {
        pairs[r.method].first.push_back(r.mean_l1);
        pairs[r.method].second.push_back(*r.logp_answer - *r.logp_answer_full);
      }
    }
  }
  nlohmann::ordered_json out;
  nlohmann::ordered_json table = nlohmann::ordered_json::array();
  const auto mean = [](double s, int64_t n) -> nlohmann::json { return n > 0 ? nlohmann::json(s / static_cast<double>(n)) : nlohmann::json(nullptr); };
  for (const std::string& m : methods)
    for (double f : budgets[m]) {
      const Acc& a = acc[{m, std::isnan(f) ? -1.0 : f}];
      table.push_back({{"method", m},
                       {"fraction", std::isnan(f) ? nlohmann::json(nullptr) : nlohmann::json(f)},
                       {"runs", a.runs},
                       {"scored", a.scored},
                       {"accuracy", mean(a.score, a.scored)},
                       {"exact_match", mean(static_cast<double>(a.exact), a.scored)},
                       {"f1", mean(a.f1, a.scored)},
                       {"kl_first", mean(a.kl, a.runs)},
                       {"top1_agree", mean(static_cast<double>(a.agree), a.runs)},
                       {"mean_l1", mean(a.l1, a.runs)},
                       {"mean_l2", mean(a.l2, a.runs)},
                       {"delta_logp_answer", mean(a.dlogp, a.with_logp)},
                       {"spearman_l1_vs_delta_logp", finite_or_null(spearman(a.l1s, a.dlogps))},
                       {"kept_entries", mean(a.kept, a.runs)}});
      if (!a.step_records.empty()) {
        const auto per_step = [&](const std::vector<double>& sum) {
          nlohmann::json v = nlohmann::json::array();
          for (size_t t = 0; t < sum.size(); ++t) v.push_back(sum[t] / static_cast<double>(a.step_records[t]));
          return v;
        };
        table.back()["along_answer"] = {{"records", a.step_records},
                                        {"mean_l1", per_step(a.step_l1)},
                                        {"mean_l2", per_step(a.step_l2)},
                                        {"mean_theta_hat", per_step(a.step_theta_hat)},
                                        {"kl", per_step(a.step_kl)},
                                        {"top1_agree", per_step(a.step_agree)}};
      }
    }
  out["by_method_budget"] = table;
  nlohmann::ordered_json corr = nlohmann::ordered_json::object();
  std::vector<double> all_x, all_y;
  for (const auto& [m, p] : pairs) {
    corr[m] = {{"pairs", p.first.size()}, {"spearman_l1_vs_delta_logp", finite_or_null(spearman(p.first, p.second))}};
    all_x.insert(all_x.end(), p.first.begin(), p.first.end());
    all_y.insert(all_y.end(), p.second.begin(), p.second.end());
  }
  corr["all"] = {{"pairs", all_x.size()}, {"spearman_l1_vs_delta_logp", finite_or_null(spearman(all_x, all_y))}};
  out["correlation"] = corr;
  return out;
}

namespace {

std::string csv_quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += "\"\"";
    else out += ch;
  }
  return out + "\"";
}

std::string num(const std::optional<double>& v) { return v ? fmt::format("{:.9g}", *v) : ""; }

}  // namespace

void write_eval_csv(std::ostream& out, const std::vector<EvalRow>& rows) {
  out << "record,index,task,method,fraction,budget,kept_entries,score,string_match_all,string_match_part,"
         "exact_match,f1,contains,logp_answer,logp_answer_full,kl_first,top1_agree,first_row,mean_l1,mean_l2,"
         "tokens,stop,text\n";
  for (const EvalRow& r : rows) {
    std::string contains;
    if (r.scores)
      for (bool b : r.scores->contains) contains += b ? '1' : '0';
    out << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.9g},{},{},{:.9g},{:.9g},{},{},{}\n",
                       csv_quote(r.record), r.index, r.task, csv_quote(r.method),
                       std::isnan(r.fraction) ? std::string() : fmt::format("{:g}", r.fraction), r.budget,
                       r.kept_entries, r.scores ? num(r.scores->score) : "",
                       r.scores ? num(r.scores->string_match_all) : "", r.scores ? num(r.scores->string_match_part) : "",
                       r.scores ? (r.scores->exact_match ? "1" : "0") : "", r.scores ? num(r.scores->f1) : "", contains,
                       num(r.logp_answer), num(r.logp_answer_full), r.kl, r.top1_agree ? 1 : 0, r.first_row, r.mean_l1,
                       r.mean_l2, r.tokens, r.stop, csv_quote(r.text));
  }
}

void write_eval_summaries(const std::filesystem::path& eval_h5, const std::filesystem::path& csv,
                          const std::filesystem::path& json) {
  const std::vector<EvalRow> rows = read_eval_rows(eval_h5);
  {
    std::ofstream out(csv, std::ios::binary | std::ios::trunc);
    if (!out) fail<IoError>("{}: cannot write", csv.string());
    write_eval_csv(out, rows);
    out.close();
    if (!out) fail<IoError>("{}: write failed", csv.string());
  }
  nlohmann::ordered_json j;
  {
    const h5::File f = h5::File::open_read(eval_h5);
    j["provenance"] = attrs_as_json(f, {"settings"});
    j["settings"] = f.attr_json("settings");
  }
  j["records"] = std::count_if(rows.begin(), rows.end(), [](const EvalRow& r) { return r.method == "full"; });
  const nlohmann::ordered_json s = eval_summary(rows);
  j["by_method_budget"] = s["by_method_budget"];
  j["correlation"] = s["correlation"];
  std::ofstream out(json, std::ios::binary | std::ios::trunc);
  if (!out) fail<IoError>("{}: cannot write", json.string());
  out << j.dump(2) << "\n";
  out.close();
  if (!out) fail<IoError>("{}: write failed", json.string());
}

std::string eval_table(const nlohmann::ordered_json& summary) {
  std::vector<std::string> methods;
  std::vector<double> fractions;
  std::map<std::pair<std::string, double>, std::string> cell;
  std::string full = "-";
  for (const auto& row : summary.at("by_method_budget")) {
    const std::string m = row.at("method").get<std::string>();
    const double f = row.at("fraction").is_null() ? -1.0 : row.at("fraction").get<double>();
    const std::string v = row.at("accuracy").is_null() ? "-" : fmt::format("{:.3f}", row.at("accuracy").get<double>());
    if (m == "full") {
      full = v;
      continue;
    }
    if (std::find(methods.begin(), methods.end(), m) == methods.end()) methods.push_back(m);
    if (std::find(fractions.begin(), fractions.end(), f) == fractions.end()) fractions.push_back(f);
    cell[{m, f}] = v;
  }
  std::sort(fractions.begin(), fractions.end());
  size_t width = 6;
  for (const std::string& m : methods) width = std::max(width, m.size());
  std::string out = fmt::format("accuracy (full cache {})\n{:<{}}", full, "method", width);
  for (double f : fractions) out += f < 0 ? fmt::format("  {:>7}", "file") : fmt::format("  {:>6.0f}%", 100 * f);
  out += "\n";
  for (const std::string& m : methods) {
    out += fmt::format("{:<{}}", m, width);
    for (double f : fractions) out += fmt::format("  {:>7}", cell.count({m, f}) ? cell[{m, f}] : "");
    out += "\n";
  }
  return out;
}

}  // namespace ckv
