// ckv mask: propagated eviction by -inf logit masking (docs/MATH.md §2, §6; docs/MASK.md). One
// unmasked forward pass and one masked pass per eviction (the target, then each placebo),
// captured at the evaluation rows (the question, positions >= c) and compared layer by
// layer; next-token KL, top-1 agreement, the gold answer's log-probability and a greedy
// continuation under the same eviction at the end.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "analysis/layer_allocation.h"
#include "analysis/mask_metrics.h"
#include "analysis/mask_plan.h"
#include "analysis/placebo.h"
#include "common.h"
#include "flag_rules.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "output/describe.h"
#include "output/dump_schema.h"
#include "output/mask_schema.h"
#include "data/records.h"
#include "model/family.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "mask_report.h"
#include "record_job.h"
#include "selection_options.h"

namespace ckv::app {
namespace {

// The built-in example: evicting " Rome" (--span-name answer_evidence) should hurt.
constexpr const char* kContext =
    "The Eiffel Tower is in Paris. The Colosseum is in Rome. Big Ben is in London.";
constexpr const char* kQuestion = " Question: In which city is the Colosseum? Answer:";
constexpr const char* kAnswer = "Rome";

struct MaskOptions {
  JobInput input;            // the prompt flags, --input, --question, --answer
  int64_t context_end = -1;  // with --tokens
  std::string spans, span_name, method, budget;
  int64_t keep = 0;  // --keep N: kept entries per KV head, instead of --budget
  bool keep_given = false;
  std::string compare;  // --compare: a second method at the same budget, run beside --method
  SelectionOptions selection;  // --selection-file is a target here
  std::string layers = "all", heads = "all";
  int64_t placebo = 0, generate = 0;
  double match_tol = 0.25;
  uint64_t seed = 0;
  bool verify_physical = false, no_answer_space = false;
  std::string out = "mask.h5", csv;
  JobFlags job;
};

struct Prepared {
  std::string id;
  int64_t index = 0;
  std::vector<int32_t> prompt;  // [prompt_len]
  int64_t c = 0;
  std::optional<std::string> answer;
  NamedSpans spans;
};

std::string budget_text(const MaskOptions& o) {
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

class MaskJob {
 public:
  MaskJob(const MaskOptions& o, const Model& model, Forward& fwd, ThreadPool& pool)
      : o_(o), model_(model), fwd_(fwd), pool_(pool) {}

  // Placebo spans asked for and found, over the records run so far.
  std::pair<int64_t, int64_t> placebo_counts() const { return {placebos_requested_, placebos_found_}; }

  MaskRecord run(const Prepared& p) {
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

 private:
  // The target eviction: by --method (selected inside the masked pass; method_ and compare_
  // set for measure), by --selection-file, or by --spans / --span-name.
  MaskRun target_run(const Prepared& p, const MaskRecord& rec, const std::vector<int64_t>& layers,
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
                           .params = o_.selection.params, .c = p.c, .eval_rows = rec.eval_rows, .layers = layers, .kv_heads = kv_heads,
                           .pool = &pool_, .layer_totals = {}};
      if (!o_.compare.empty()) {
        compare_ = method_;
        compare_->method = MethodSpec::parse(o_.compare);
      }
      for (std::optional<MethodMask>* m : {&method_, &compare_})
        if (*m && (*m)->method.layer_global()) (*m)->layer_totals = layer_totals(rec.tokens, p.c, **m);
    } else if (!o_.selection.selection_file.empty()) {
      target.source = "selection-file " + o_.selection.selection_file;
      target.plan = plan_from_selection_file(o_.selection.selection_file, p.c, prompt_len, layers, kv_heads, cf.n_layer, cf.n_kv_head);
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
  std::map<int64_t, int64_t> layer_totals(const std::vector<int32_t>& tokens, int64_t c, const MethodMask& m) {
    DefensiveCollector col(model_.weights, model_.config.n_head, c, m.params, &pool_);
    ForwardRequest pre;
    for (int64_t l = 0; l < model_.config.n_layer; ++l) pre.record.layers.push_back(l);
    pre.record.qkv = true;
    pre.recorder = &col;
    fwd_.run(std::vector<int32_t>(tokens.begin(), tokens.begin() + c), pre);
    return col.totals(m.budget);
  }

  double answer_logp(const ForwardResult& out, const std::vector<int32_t>& answer) const {
    double s = 0;
    const int64_t vocab = model_.config.vocab;
    for (size_t t = 0; t < answer.size(); ++t)
      s += log_prob(out.logits.span().subspan(t * static_cast<size_t>(vocab), static_cast<size_t>(vocab)), answer[t]);
    return s;
  }

  void measure(const MaskRecord& rec, const MaskCapture& full, const ForwardResult& full_out,
               const std::vector<int32_t>& answer_ids, const std::vector<int64_t>& logit_rows, MaskRun& run,
               bool gen) {
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
    run.metrics = compare_runs(full, masked, run.plan, {.sinks = o_.selection.params.sinks});
    const auto vocab = static_cast<size_t>(cf.vocab);
    run.next = next_token(full_out.logits.span().first(vocab), out.logits.span().first(vocab));
    run.logits_last.assign(out.logits.span().begin(), out.logits.span().begin() + static_cast<long>(vocab));
    if (!answer_ids.empty()) run.logp_answer = answer_logp(out, answer_ids);
    if (o_.verify_physical) {
      run.physical_max_diff = masked.physical_max_diff;
      run.physical_max_abs = masked.physical_max_abs;
    }
    if (gen) {
      Prepared p{.id = rec.id, .index = rec.index, .prompt = std::vector<int32_t>(rec.tokens.begin(), rec.tokens.begin() + rec.prompt_len),
                 .c = rec.c, .answer = rec.answer, .spans = {}};
      run.generation = generate(p, run.plan);
    }
  }

  // Greedy continuation: every step recomputes the whole sequence (no KV cache), with the
  // generated rows masked like the question's.
  Generation generate(const Prepared& p, const EvictionPlan& plan) {
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

  void draw_and_run_placebos(MaskRecord& rec, const MaskCapture& full, const ForwardResult& full_out,
                             const std::vector<int32_t>& answer_ids, const std::vector<int64_t>& logit_rows,
                             const std::vector<int64_t>& layers, const std::vector<int64_t>& kv_heads) {
    const MaskRun& target = rec.runs.front();
    if (target.spans.empty())
      fail<InputError>("--placebo: needs a span target (--spans or --span-name), not a selection file");
    int64_t length = 0;
    for (int64_t l = 0; l < target.plan.n_layer && length == 0; ++l)
      for (int64_t g = 0; g < target.plan.n_kv_head && length == 0; ++g)
        length = static_cast<int64_t>(target.plan.at(l, g).size());
    const std::vector<double> w = delta_theta_weights(full, layers, kv_heads);
    const PlaceboResult found = draw_placebos(w, {.length = length, .c = rec.c, .sinks = o_.selection.params.sinks,
                                                  .exclude = target.spans, .target = target.metrics.delta_theta_total,
                                                  .tolerance = o_.match_tol, .count = o_.placebo, .seed = o_.seed});
    rec.placebo = {{"requested", o_.placebo}, {"found", found.spans.size()}, {"candidates", found.candidates},
                   {"searched", found.searched}, {"tolerance", o_.match_tol}, {"seed", o_.seed},
                   {"best_ratio", found.best_ratio}, {"length", length}};
    // Too few within tolerance is a note on the record, not a failed batch: the record keeps
    // the placebos that matched (maybe none) and the console says how to widen the match.
    placebos_requested_ += o_.placebo;
    placebos_found_ += static_cast<int64_t>(found.spans.size());
    if (static_cast<int64_t>(found.spans.size()) < o_.placebo) {
      const std::string note = fmt::format(
          "{} of {} placebo spans of {} tokens found within --match-tol {} of the target's Delta_theta "
          "({} candidates searched, closest ratio {:.3f}); a larger --match-tol or a smaller --placebo "
          "finds more", found.spans.size(), o_.placebo, length, o_.match_tol, found.searched, found.best_ratio);
      rec.placebo["note"] = note;
      fmt::print(stderr, "ckv mask: note: record \"{}\": {}\n", rec.id, note);
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

  const MaskOptions& o_;
  std::optional<MethodMask> method_, compare_;  // --method, --compare
  int64_t placebos_requested_ = 0, placebos_found_ = 0;
  const Model& model_;
  Forward& fwd_;
  ThreadPool& pool_;
};

// The one prompt record (id "0"): the token ids with --context-end, or the text with the
// question and answer (the built-in example: evicting " Rome" should hurt).
JobRecord prompt_record(const MaskOptions& o, const Model& model) {
  const PromptOptions& in = o.input.prompt;
  JobRecord r;
  r.id = "0";
  if (!in.tokens_file.empty()) {
    r.prompt.tokens = prompt_tokens(in, model, kContext);
    if (o.context_end < 0) fail<InputError>("--tokens: give --context-end C (positions >= C are the question)");
    r.prompt.context_end = o.context_end;
    if (!o.input.answer.empty()) r.answer = o.input.answer;
    return r;
  }
  if (!model.tokenizer) fail<InputError>("{}: the model has no tokenizer: use --tokens", model.source.path.string());
  const bool builtin = in.prompt.empty() && in.prompt_file.empty();
  InputRecord ir;
  ir.id = "0";
  ir.context = builtin ? kContext : in.prompt_file.empty() ? in.prompt : read_text_file(in.prompt_file);
  ir.question = !o.input.question.empty() ? o.input.question : builtin ? kQuestion : "";
  if (!o.input.answer.empty() || builtin) ir.answer = !o.input.answer.empty() ? o.input.answer : kAnswer;
  if (builtin) {
    const auto at = static_cast<int64_t>(std::string(kContext).find(" Rome"));
    ir.spans["answer_evidence"] = {{at, at + 5}};
  }
  r.prompt = tokenize_record(ir, *model.tokenizer, in.chat);
  r.answer = ir.answer;
  return r;
}

// The flags' combinations and values, before any work; throws UsageError.
void check_mask_options(MaskOptions& o) {
  const int sources = !o.spans.empty() + !o.span_name.empty() + !o.selection.selection_file.empty() + !o.method.empty();
  if (sources != 1)
    fail<UsageError>("mask: give exactly one of --spans, --span-name, --selection-file, --method");
  const bool budget_given = !o.budget.empty() || o.keep_given;
  if (!o.budget.empty() && o.keep_given) fail<UsageError>("mask: give --budget FRACTION or --keep N, not both");
  if (o.method.empty() != !budget_given) fail<UsageError>("mask: --method goes with --budget FRACTION or --keep N");
  if (!o.compare.empty() && o.method.empty()) fail<UsageError>("mask: --compare needs --method (it runs at the same --budget)");
  if (!o.spans.empty()) parse_spans(o.spans, "--spans");
  if (!(std::isfinite(o.match_tol) && o.match_tol >= 0))
    fail<UsageError>("--match-tol {}: must be a finite number >= 0", o.match_tol);
  finish_selection_options(o.selection);
  if (o.method.empty()) return;
  if (!o.budget.empty()) parse_budget_fraction(o.budget, "--budget");
  else check_keep(o.keep);
  for (const std::string* m : {&o.method, &o.compare})
    if (!m->empty()) require_method_inputs(MethodSpec::parse(*m), o.selection, m == &o.method ? "--method" : "--compare");
}

nlohmann::json mask_settings(const MaskOptions& o) {
  nlohmann::json s = selection_settings(o.selection);
  s.update({{"spans", o.spans}, {"span_name", o.span_name}, {"method", o.method}, {"compare", o.compare},
            {"budget", o.budget}, {"keep", o.keep}, {"layers", o.layers}, {"heads", o.heads}, {"placebo", o.placebo},
            {"match_tol", o.match_tol}, {"seed", o.seed}, {"generate", o.generate},
            {"verify_physical", o.verify_physical}});
  return s;
}

void run_mask(MaskOptions& o, const GlobalOptions& g) {
  check_mask_options(o);
  std::vector<std::filesystem::path> outputs{o.out};
  if (!o.csv.empty()) outputs.emplace_back(o.csv);
  RecordJob rj(g, o.job, o.input, outputs);
  rj.load();
  require_default_attention_scale(rj.model().config, "ckv mask");
  rj.describe_input();
  const nlohmann::json settings = mask_settings(o);
  rj.open(kMaskSchema, kMaskSchemaVersion, "", settings);
  const Provenance& prov = rj.provenance();
  MaskFile file = rj.continuing() ? MaskFile::resume(rj.partial(), prov.command_line)
                                  : MaskFile::create(rj.partial(), prov, settings);
  ThreadPool pool(g.resolved_threads());
  MaskJob job(o, rj.model(), rj.forward(), pool);
  const int64_t skipped = rj.guarded([&] {
    return rj.for_each_record(file.complete_records(), [&] { return prompt_record(o, rj.model()); }, [&](JobRecord& r) {
      const MaskRecord rec = job.run({.id = r.id, .index = r.index, .prompt = std::move(r.prompt.tokens),
                                      .c = r.prompt.context_end, .answer = r.answer,
                                      .spans = std::move(r.prompt.token_spans)});
      file.write_record(rec);
      rj.written();
      if (!g.quiet) print_mask_summary(rec, o.verify_physical);
    });
  });
  file.close();
  if (!o.csv.empty()) {
    // The CSV is regenerated from the whole file, so a resumed run writes every record's rows.
    std::ofstream csv(rj.partial(1), std::ios::binary | std::ios::trunc);
    if (!csv) fail<IoError>("{}: cannot write the CSV", o.csv);
    write_mask_csv_file(rj.partial(), csv);
    csv.close();
    if (!csv) fail<IoError>("{}: write failed", o.csv);
  }
  rj.commit();
  if (const auto [asked, found] = job.placebo_counts(); found < asked)
    fmt::print(stderr, "ckv mask: note: {} of {} placebo spans found within --match-tol {} (each record's "
               "attribute \"placebo\" says how many it has); a larger --match-tol widens the match\n",
               found, asked, o.match_tol);
  if (!g.quiet && (skipped > 0 || !rj.shard().is_whole()))
    fmt::print("{}: {} records written, {} already complete (shard {})\n", o.out, rj.written_count(), skipped,
               rj.shard().to_string());
}

}  // namespace

void register_mask(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<MaskOptions>();
  CLI::App* cmd = app.add_subcommand("mask", "Propagated eviction by -inf logit masking, with placebo spans");
  add_model_options(*cmd, g);
  add_compute_option(*cmd, g);
  add_prompt_options(*cmd, o->input.prompt);
  add_jsonl_option(*cmd, o->input, "Path of a JSONL batch: {id, context, question, answer, spans} per line");
  cmd->add_option("--question", o->input.question, "Question text after --prompt (positions >= c)");
  cmd->add_option("--answer", o->input.answer, "Gold answer text: its log-probability is reported");
  cmd->add_option("--context-end", o->context_end, "With --tokens: the context end c, a token position");
  cmd->add_option("--spans", o->spans, "Evict token spans of the context: a list of half-open start-end ranges (120-140,300-310)");
  cmd->add_option("--span-name", o->span_name, "Evict the record's span of this name (needle)");
  cmd->add_option("--method", o->method, "Evict by a selection method run in the pass: attn, snapkv, h2o, "
                  "streaming, defensivekv, layer-defensivekv, pyramidkv, duoattention, expectedattention, headkv, "
                  "obcache, adakv(X), criticalkv(X)");
  cmd->add_option("--compare", o->compare, "With --method: also evict by this method at the same --budget (a run "
                  "named 'compare') and print both per-layer perturbations side by side, e.g. --method snapkv "
                  "--compare 'criticalkv(snapkv)' (the paper's Figure 5)");
  cmd->add_option("--budget", o->budget, "With --method: kept entries per KV head as a fraction of the context in (0, 1], "
                  "0.2 or 20%, as `ckv bound --budgets`");
  cmd->add_option("--keep", o->keep, "With --method: kept entries per KV head as a count >= 1 (instead of --budget)")
      ->each([o](const std::string&) { o->keep_given = true; });
  add_selection_options(*cmd, o->selection);
  cmd->add_option("--layers", o->layers, "Layers to mask: all, or a list of indices and ranges (0-3,10)")->capture_default_str();
  cmd->add_option("--heads", o->heads, "KV heads to mask: all, or a list of indices and ranges")->capture_default_str();
  cmd->add_option("--placebo", o->placebo, "Control spans matched on length and Delta_theta, a count")
      ->check(at_least(0))->capture_default_str();
  cmd->add_option("--match-tol", o->match_tol, "Accepted |Delta_theta ratio - 1| of a placebo, a number >= 0")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Placebo seed (same spans on every machine)")->capture_default_str();
  cmd->add_option("--generate", o->generate, "Greedy continuation of N tokens under the eviction, a count >= 0")
      ->check(at_least(0))->capture_default_str();
  cmd->add_flag("--verify-physical", o->verify_physical,
                "Recompute every evaluation row over physically reduced K/V and report the largest difference");
  cmd->add_flag("--no-answer-space", o->no_answer_space, "Do not prefix the answer with a space before tokenising");
  cmd->add_option("-o,--out", o->out, "Output HDF5 file")->capture_default_str();
  cmd->add_option("--csv", o->csv, "Path of a tidy CSV of every measurement");
  add_job_flags(*cmd, o->job);
  cmd->callback([o, &g] { run_mask(*o, g); });
}

}  // namespace ckv::app
