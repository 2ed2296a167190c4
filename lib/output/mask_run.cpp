#include "output/mask_run.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "analysis/layer_allocation.h"
#include "analysis/placebo.h"
#include "core/error.h"
#include "model/tokenizer.h"
#include "output/describe.h"
#include "output/dump_schema.h"

namespace ckv {
namespace {

std::string budget_text(const MaskRunOptions& o) {
  return o.budget.empty() ? fmt::format("keep {}", o.keep) : "budget " + o.budget;
}

bool contains_answer(std::string text, std::string answer) {
  const auto lower = [](std::string& s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  };
  lower(text);
  lower(answer);
  const auto b = answer.find_first_not_of(" \t\n"), e = answer.find_last_not_of(" \t\n");
  return b != std::string::npos && text.find(answer.substr(b, e - b + 1)) != std::string::npos;
}

}  // namespace

MaskRecord MaskRunner::run(const MaskPrompt& p) {
  const ModelConfig& cf = model_.config;
  const auto prompt_len = static_cast<int64_t>(p.prompt.size());
  const std::string who = fmt::format("record \"{}\"", p.id);
  if (p.c >= prompt_len)
    fail<InputError>("{}: no question after the context (c = {} of {} tokens): eviction only "
                     "affects queries at positions >= c", who, p.c, prompt_len);
  MaskRecord rec;
  rec.id = p.id;
  rec.index = p.index;
  rec.c = p.c;
  rec.prompt_len = prompt_len;
  rec.answer = p.answer;
  rec.tokens = p.prompt;
  std::vector<int32_t> answer_ids;
  if (p.answer && model_.tokenizer) {
    const bool space = !o_.no_answer_space && !p.answer->empty() && !std::isspace(static_cast<unsigned char>(p.answer->front()));
    answer_ids = model_.tokenizer->encode((space ? " " : "") + *p.answer, false);
    rec.tokens.insert(rec.tokens.end(), answer_ids.begin(), answer_ids.end());
  }
  rec.token_text = token_texts(model_.tokenizer.get(), rec.tokens);
  for (int64_t i = p.c; i < prompt_len; ++i) rec.eval_rows.push_back(i);
  std::vector<int64_t> logit_rows;
  for (int64_t i = prompt_len - 1; i < static_cast<int64_t>(rec.tokens.size()) - 1 || i == prompt_len - 1; ++i)
    logit_rows.push_back(i);

  // The unmasked run: the reference, nu, sink scores and Delta_theta weights.
  MaskCapture full(cf, model_.weights, rec.eval_rows, p.c, nullptr, {.nu = true, .pool = &pool_});
  ForwardRequest req = full.request();
  req.logit_rows = logit_rows;
  const ForwardResult full_out = fwd_.run(rec.tokens, req);
  rec.sinks = sink_scores(full);
  const auto vocab = static_cast<size_t>(cf.vocab);
  rec.logits_last_full.assign(full_out.logits.span().begin(), full_out.logits.span().begin() + static_cast<long>(vocab));
  if (!answer_ids.empty()) rec.logp_answer_full = answer_logp(full_out, answer_ids);
  if (o_.generate > 0) rec.generation_full = generate(p, EvictionPlan::none(cf.n_layer, cf.n_kv_head, p.c, prompt_len));

  const std::vector<int64_t> layers = parse_index_list(o_.layers, cf.n_layer, "--layers");
  const std::vector<int64_t> kv_heads = parse_index_list(o_.heads, cf.n_kv_head, "--heads");
  MaskRun target = target_run(p, rec, layers, kv_heads);
  measure(rec, full, full_out, answer_ids, logit_rows, target, o_.generate > 0);
  rec.runs.push_back(std::move(target));
  if (compare_) {
    // The paper's Figure 5 pair: the same budget, selected by the second method inside its
    // own masked pass, measured against the same unmasked run.
    MaskRun run;
    run.name = "compare";
    run.source = fmt::format("method {} {}", o_.compare, budget_text(o_));
    run.plan = EvictionPlan::none(cf.n_layer, cf.n_kv_head, p.c, prompt_len);
    measure(rec, full, full_out, answer_ids, logit_rows, run, o_.generate > 0);
    rec.runs.push_back(std::move(run));
  }

  if (o_.placebo > 0) draw_and_run_placebos(rec, full, full_out, answer_ids, logit_rows, layers, kv_heads);
  return rec;
}

MaskRun MaskRunner::target_run(const MaskPrompt& p, const MaskRecord& rec, const std::vector<int64_t>& layers,
                               const std::vector<int64_t>& kv_heads) {
  const ModelConfig& cf = model_.config;
  const int64_t prompt_len = rec.prompt_len;
  const std::string who = fmt::format("record \"{}\"", p.id);
  MaskRun target;
  target.name = "target";
  method_.reset();
  compare_.reset();
  if (!o_.method.empty()) {
    target.source = fmt::format("method {} {}", o_.method, budget_text(o_));
    target.plan = EvictionPlan::none(cf.n_layer, cf.n_kv_head, p.c, prompt_len);
    method_ = MethodMask{.method = MethodSpec::parse(o_.method), .budget = mask_budget(o_.budget, o_.keep, p.c),
                         .params = o_.params, .c = p.c, .eval_rows = rec.eval_rows, .layers = layers, .kv_heads = kv_heads,
                         .pool = &pool_, .layer_totals = {}};
    if (!o_.compare.empty()) {
      compare_ = method_;
      compare_->method = MethodSpec::parse(o_.compare);
    }
    for (std::optional<MethodMask>* m : {&method_, &compare_})
      if (*m && (*m)->method.layer_global()) (*m)->layer_totals = layer_totals(rec.tokens, p.c, **m);
  } else if (!o_.selection_file.empty()) {
    target.source = "selection-file " + o_.selection_file;
    target.plan = plan_from_selection_file(o_.selection_file, p.c, prompt_len, layers, kv_heads, cf.n_layer, cf.n_kv_head);
  } else {
    if (!o_.spans.empty()) {
      target.source = "spans " + o_.spans;
      target.spans = parse_spans(o_.spans, "--spans");
    } else {
      target.source = "span-name " + o_.span_name;
      target.spans = named_spans(p.spans, o_.span_name, who);
    }
    target.plan = plan_from_spans(target.spans, p.c, prompt_len, layers, kv_heads, cf.n_layer, cf.n_kv_head,
                                  o_.spans.empty() ? fmt::format("{} span \"{}\"", who, o_.span_name) : "--spans");
  }
  return target;
}

// A layer-global method's per-layer totals: an unmasked pre-pass over the context (whose
// rows are the same in the masked pass) collects every layer's scores.
std::map<int64_t, int64_t> MaskRunner::layer_totals(const std::vector<int32_t>& tokens, int64_t c,
                                                    const MethodMask& m) {
  DefensiveCollector col(model_.weights, model_.config.n_head, c, m.params, &pool_);
  ForwardRequest pre;
  for (int64_t l = 0; l < model_.config.n_layer; ++l) pre.record.layers.push_back(l);
  pre.record.qkv = true;
  pre.recorder = &col;
  fwd_.run(std::vector<int32_t>(tokens.begin(), tokens.begin() + c), pre);
  return col.totals(m.budget);
}

double MaskRunner::answer_logp(const ForwardResult& out, const std::vector<int32_t>& answer) const {
  double s = 0;
  const int64_t vocab = model_.config.vocab;
  for (size_t t = 0; t < answer.size(); ++t)
    s += log_prob(out.logits.span().subspan(t * static_cast<size_t>(vocab), static_cast<size_t>(vocab)), answer[t]);
  return s;
}

void MaskRunner::measure(const MaskRecord& rec, const MaskCapture& full, const ForwardResult& full_out,
                         const std::vector<int32_t>& answer_ids, const std::vector<int64_t>& logit_rows,
                         MaskRun& run, bool gen) {
  const ModelConfig& cf = model_.config;
  MaskCapture masked(cf, model_.weights, rec.eval_rows, rec.c, &run.plan,
                     {.verify_physical = o_.verify_physical, .pool = &pool_});
  ForwardRequest req = masked.request();
  req.logit_rows = logit_rows;
  req.mask = run.plan.to_mask(static_cast<int64_t>(rec.tokens.size()));
  // A method selects inside the pass, filling run.plan layer by layer before each layer's
  // attention (and so before the capture reads it for that layer).
  if (method_ && run.name == "target") req.layer_mask = method_mask_source(cf, model_.weights, *method_, &run.plan);
  if (compare_ && run.name == "compare") req.layer_mask = method_mask_source(cf, model_.weights, *compare_, &run.plan);
  const ForwardResult out = fwd_.run(rec.tokens, req);
  run.metrics = compare_runs(full, masked, run.plan, {.sinks = o_.params.sinks});
  const auto vocab = static_cast<size_t>(cf.vocab);
  run.next = next_token(full_out.logits.span().first(vocab), out.logits.span().first(vocab));
  run.logits_last.assign(out.logits.span().begin(), out.logits.span().begin() + static_cast<long>(vocab));
  if (!answer_ids.empty()) run.logp_answer = answer_logp(out, answer_ids);
  if (o_.verify_physical) {
    run.physical_max_diff = masked.physical_max_diff;
    run.physical_max_abs = masked.physical_max_abs;
  }
  if (gen) {
    MaskPrompt p{.id = rec.id, .index = rec.index, .prompt = std::vector<int32_t>(rec.tokens.begin(), rec.tokens.begin() + rec.prompt_len),
               .c = rec.c, .answer = rec.answer, .spans = {}};
    run.generation = generate(p, run.plan);
  }
}

// Greedy continuation: every step recomputes the whole sequence (no KV cache), with the
// generated rows masked like the question's.
Generation MaskRunner::generate(const MaskPrompt& p, const EvictionPlan& plan) {
  Generation g;
  std::vector<int32_t> seq = p.prompt;
  const int32_t eos = model_.tokenizer ? model_.tokenizer->eos_id() : -1;
  for (int64_t step = 0; step < o_.generate; ++step) {
    ForwardRequest req;
    req.mask = plan.to_mask(static_cast<int64_t>(seq.size()));
    const ForwardResult out = fwd_.run(seq, req);
    const auto row = out.logits.span();
    const auto next = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    if (next == eos) break;
    g.tokens.push_back(next);
    seq.push_back(next);
  }
  if (model_.tokenizer) g.text = model_.tokenizer->decode(g.tokens);
  if (p.answer) g.has_answer = contains_answer(g.text, *p.answer);
  return g;
}

void MaskRunner::draw_and_run_placebos(MaskRecord& rec, const MaskCapture& full, const ForwardResult& full_out,
                                       const std::vector<int32_t>& answer_ids,
                                       const std::vector<int64_t>& logit_rows, const std::vector<int64_t>& layers,
                                       const std::vector<int64_t>& kv_heads) {
  const MaskRun& target = rec.runs.front();
  if (target.spans.empty())
    fail<InputError>("--placebo: needs a span target (--spans or --span-name), not a selection file");
  int64_t length = 0;
  for (int64_t l = 0; l < target.plan.n_layer && length == 0; ++l)
    for (int64_t g = 0; g < target.plan.n_kv_head && length == 0; ++g)
      length = static_cast<int64_t>(target.plan.at(l, g).size());
  const std::vector<double> w = delta_theta_weights(full, layers, kv_heads);
  const PlaceboResult found = draw_placebos(w, {.length = length, .c = rec.c, .sinks = o_.params.sinks,
                                                .exclude = target.spans, .target = target.metrics.delta_theta_total,
                                                .tolerance = o_.match_tol, .count = o_.placebo, .seed = o_.seed});
  rec.placebo = {{"requested", o_.placebo}, {"found", found.spans.size()}, {"candidates", found.candidates},
                 {"searched", found.searched}, {"tolerance", o_.match_tol}, {"seed", o_.seed},
                 {"best_ratio", found.best_ratio}, {"length", length}};
  // Too few within tolerance is a note on the record, not a failed batch: the record keeps
  // the placebos that matched (maybe none) and the note says how to widen the match.
  placebos_requested_ += o_.placebo;
  placebos_found_ += static_cast<int64_t>(found.spans.size());
  if (static_cast<int64_t>(found.spans.size()) < o_.placebo) {
    const std::string note = fmt::format(
        "{} of {} placebo spans of {} tokens found within --match-tol {} of the target's Delta_theta "
        "({} candidates searched, closest ratio {:.3f}); a larger --match-tol or a smaller --placebo "
        "finds more", found.spans.size(), o_.placebo, length, o_.match_tol, found.searched, found.best_ratio);
    rec.placebo["note"] = note;
  }
  const ModelConfig& cf = model_.config;
  for (size_t k = 0; k < found.spans.size(); ++k) {
    MaskRun run;
    run.name = fmt::format("placebo{}", k);
    run.source = "placebo";
    run.spans = {found.spans[k].span};
    run.ratio = found.spans[k].ratio;
    run.plan = plan_from_spans(run.spans, rec.c, rec.prompt_len, layers, kv_heads, cf.n_layer, cf.n_kv_head, "placebo");
    measure(rec, full, full_out, answer_ids, logit_rows, run, false);
    rec.runs.push_back(std::move(run));
  }
}

}  // namespace ckv
