// ckv mask: propagated eviction by -inf logit masking (docs/MATH.md §2, §6; docs/MASK.md): the
// flags, the built-in example and the outputs; each record's runs are lib/output/mask_run.h's.
#include <cmath>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>

#include "analysis/mask_plan.h"
#include "common.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "data/records.h"
#include "flag_rules.h"
#include "model/family.h"
#include "output/mask_report.h"
#include "output/mask_run.h"
#include "output/mask_schema.h"
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
  MaskRunOptions run;        // the eviction and what is measured
  bool keep_given = false;   // --keep was on the command line (--keep 0 is refused, not ignored)
  SelectionParams selection;  // into run.params and run.selection_file (a target here)
  std::string out = "mask.h5", csv;
  JobFlags job;
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
  const int sources =
      !o.run.spans.empty() + !o.run.span_name.empty() + !o.selection.selection_file.empty() + !o.run.method.empty();
  if (sources != 1)
    fail<UsageError>("mask: give exactly one of --spans, --span-name, --selection-file, --method");
  const bool budget_given = !o.run.budget.empty() || o.keep_given;
  if (!o.run.budget.empty() && o.keep_given) fail<UsageError>("mask: give --budget FRACTION or --keep N, not both");
  if (o.run.method.empty() != !budget_given) fail<UsageError>("mask: --method goes with --budget FRACTION or --keep N");
  if (!o.run.compare.empty() && o.run.method.empty())
    fail<UsageError>("mask: --compare needs --method (it runs at the same --budget)");
  if (!o.run.spans.empty()) parse_spans(o.run.spans, "--spans");
  if (!(std::isfinite(o.run.match_tol) && o.run.match_tol >= 0))
    fail<UsageError>("--match-tol {}: must be a finite number >= 0", o.run.match_tol);
  finish_selection_options(o.selection);
  o.run.params = o.selection;
  o.run.selection_file = o.selection.selection_file;
  if (o.run.method.empty()) return;
  if (!o.run.budget.empty()) parse_budget_fraction(o.run.budget, "--budget");
  else check_keep(o.run.keep);
  for (const std::string* m : {&o.run.method, &o.run.compare})
    if (!m->empty())
      require_method_inputs(MethodSpec::parse(*m), o.selection, m == &o.run.method ? "--method" : "--compare");
}

nlohmann::json mask_settings(const MaskOptions& o) {
  nlohmann::json s = selection_settings(o.selection);
  const MaskRunOptions& r = o.run;
  s.update({{"spans", r.spans}, {"span_name", r.span_name}, {"method", r.method}, {"compare", r.compare},
            {"budget", r.budget}, {"keep", r.keep}, {"layers", r.layers}, {"heads", r.heads}, {"placebo", r.placebo},
            {"match_tol", r.match_tol}, {"seed", r.seed}, {"generate", r.generate},
            {"verify_physical", r.verify_physical}});
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
  // The budget as a number beside the settings' text (0.2 or 20%), for readers (issue 30).
  if (!o.run.budget.empty()) rj.provenance().set("budget_fraction", parse_budget_fraction(o.run.budget, "--budget"));
  const Provenance& prov = rj.provenance();
  MaskFile file = rj.continuing() ? MaskFile::resume(rj.partial(), prov.command_line)
                                  : MaskFile::create(rj.partial(), prov, settings);
  ThreadPool pool(g.resolved_threads());
  MaskRunner job(o.run, rj.model(), rj.forward(), pool);
  rj.start_progress("mask");
  const int64_t skipped = rj.guarded([&] {
    return rj.for_each_record(file.complete_records(), [&] { return prompt_record(o, rj.model()); }, [&](JobRecord& r) {
      const MaskRecord rec = job.run({.id = r.id, .index = r.index, .prompt = std::move(r.prompt.tokens),
                                      .c = r.prompt.context_end, .answer = r.answer,
                                      .spans = std::move(r.prompt.token_spans)});
      if (rec.placebo.contains("note"))
        rj.note(fmt::format("ckv mask: note: record \"{}\": {}", rec.id, rec.placebo["note"].get<std::string>()));
      file.write_record(rec);
      rj.written();
      rj.record_done(fmt::format("record \"{}\": {} tokens, context {}, {} runs", rec.id, rec.prompt_len, rec.c,
                                 rec.runs.size()),
                     mask_summary(rec, o.run.verify_physical));
    });
  });
  rj.finish_progress();
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
    rj.note(fmt::format("ckv mask: note: {} of {} placebo spans found within --match-tol {} (each record's attribute \"placebo\" "
                        "says how many it has); a larger --match-tol widens the match", found, asked, o.run.match_tol));
  if (!g.quiet && (skipped > 0 || !rj.shard().is_whole()))
    fmt::print("{}: {} records written, {} already complete (shard {})\n", o.out, rj.written_count(), skipped,
               rj.shard().to_string());
}

}  // namespace

void register_mask(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<MaskOptions>();
  CLI::App* cmd = add_forward_subcommand(
      app, g, "mask", "Propagated eviction by -inf logit masking, with placebo spans");
  add_prompt_options(*cmd, o->input.prompt);
  add_jsonl_option(*cmd, o->input, "Path of a JSONL batch: {id, context, question, answer, spans} per line");
  cmd->add_option("--question", o->input.question, "Question text after --prompt (positions >= c)");
  cmd->add_option("--answer", o->input.answer, "Gold answer text: its log-probability is reported");
  cmd->add_option("--context-end", o->context_end, "With --tokens: the context end c, a token position");
  cmd->add_option("--spans", o->run.spans, "Evict token spans of the context: a list of half-open start-end ranges (120-140,300-310)");
  cmd->add_option("--span-name", o->run.span_name, "Evict the record's span of this name (needle)");
  cmd->add_option("--method", o->run.method, "Evict by a selection method run in the pass: one of " + known_methods() +
                  " but file and oracle (--selection-file evicts a file's selection)");
  cmd->add_option("--compare", o->run.compare, "With --method: also evict by this method at the same --budget (a run "
                  "named 'compare') and print both per-layer perturbations side by side, e.g. --method snapkv "
                  "--compare 'criticalkv(snapkv)' (the paper's Figure 5)");
  cmd->add_option("--budget", o->run.budget, "With --method: kept entries per KV head as a fraction of the context in (0, 1) "
                  "(1 would evict nothing), 0.2 or 20%, as `ckv bound --budgets`");
  cmd->add_option("--keep", o->run.keep, "With --method: kept entries per KV head as a count >= 1 (instead of --budget)")
      ->each([o](const std::string&) { o->keep_given = true; });
  add_selection_options(*cmd, o->selection);
  cmd->add_option("--layers", o->run.layers, "Layers to mask: all, or a list of indices and ranges (0-3,10)")->capture_default_str();
  cmd->add_option("--heads", o->run.heads, "KV heads to mask: all, or a list of indices and ranges")->capture_default_str();
  cmd->add_option("--placebo", o->run.placebo, "Control spans matched on length and Delta_theta, a count")
      ->check(at_least(0))->capture_default_str();
  cmd->add_option("--match-tol", o->run.match_tol, "Accepted |Delta_theta ratio - 1| of a placebo, a number >= 0")
      ->capture_default_str();
  cmd->add_option("--seed", o->run.seed, "Placebo seed (same spans on every machine)")->capture_default_str();
  cmd->add_option("--generate", o->run.generate, "Greedy continuation of N tokens under the eviction, a count >= 0")
      ->check(at_least(0))->capture_default_str();
  cmd->add_flag("--verify-physical", o->run.verify_physical,
                "Recompute every evaluation row over physically reduced K/V and report the largest difference");
  cmd->add_flag("--no-answer-space", o->run.no_answer_space, "Do not prefix the answer with a space before tokenising");
  cmd->add_option("-o,--out", o->out, "Output HDF5 file")->capture_default_str();
  cmd->add_option("--csv", o->csv, "Path of a tidy CSV of every measurement");
  add_job_flags(*cmd, o->job);
  cmd->callback([o, &g] { run_mask(*o, g); });
}

}  // namespace ckv::app
