// ckv eval: answers under eviction with a KV cache, record by record, beside the measured
// perturbation (docs/EVAL.md). Per record: the full cache and every method x budget, decoded
// and scored (output/eval_run.h); HDF5 + CSV + JSON (output/eval_schema.h) with shards,
// --resume and `ckv merge`; a console table of accuracy per method x budget (the paper's
// Figure 2).
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "analysis/cache_eval.h"
#include "common.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/sha256.h"
#include "core/thread_pool.h"
#include "output/batch_output.h"
#include "output/eval_run.h"
#include "output/eval_schema.h"
#include "record_job.h"
#include "selection_options.h"
#include "model/model.h"

namespace ckv::app {
namespace {

struct EvalOptions {
  JobInput input;  // --input (and --chat)
  std::string methods = "snapkv,criticalkv(snapkv),adakv(snapkv),criticalkv(adakv(snapkv))";
  std::string budgets = "0.05,0.1,0.2,0.4";
  std::string compress = "context";
  SelectionParams selection;
  int64_t max_new_tokens = 32, track_steps = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false, no_answer_space = false;
  std::string out = "eval";
  JobFlags job;
};

CacheEvalSettings settings_of(EvalOptions& o) {
  CacheEvalSettings s;
  s.methods = parse_methods(o.methods);
  s.budgets = parse_budget_fractions(o.budgets, "--budgets");
  finish_selection_options(o.selection);
  s.params = o.selection;
  for (const MethodSpec& m : s.methods) require_method_inputs(m, o.selection, "--methods");
  s.compress_prompt = o.compress == "prompt";
  s.selection_file = o.selection.selection_file;
  s.max_new_tokens = o.max_new_tokens;
  s.track_steps = o.track_steps;
  s.stop_strings = o.stop;
  s.ignore_eos = o.ignore_eos;
  check_cache_eval_settings(s);
  return s;
}

nlohmann::json settings_json(const EvalOptions& o, const CacheEvalSettings& s) {
  std::vector<std::string> methods;
  for (const MethodSpec& m : s.methods) methods.push_back(m.name());
  nlohmann::json j = selection_settings(o.selection);
  j.update({{"methods", methods}, {"budgets", s.budgets}, {"compress", o.compress},
            {"max_new_tokens", o.max_new_tokens}, {"track_steps", o.track_steps}, {"stop", o.stop},
            {"ignore_eos", o.ignore_eos},
            {"chat", o.input.prompt.chat}, {"answer_space", !o.no_answer_space}});
  return j;
}

// A record's line(s) for a batch log: its full-cache answer, then each run's.
std::string record_lines(const EvalRecord& r) {
  const auto scored = [&](size_t k) {
    return k < r.scores.size() && r.scores[k] ? fmt::format(" score {:.2f}", r.scores[k]->score) : std::string();
  };
  std::string out = fmt::format("record \"{}\": {} tokens, context {}; full{} {:?}", r.id, r.result.n,
                                r.result.question_start, scored(0), r.result.full.decoded.text);
  for (size_t k = 0; k < r.result.runs.size(); ++k) {
    const CacheEvalRun& run = r.result.runs[k];
    out += fmt::format("\n  {} {:g}: L1 {:.4f} KL {:.4f}{} {:?}", run.method, run.fraction, run.mean_l1, run.first.kl,
                       scored(k + 1), run.decoded.text);
  }
  return out;
}

void run_eval(EvalOptions& o, const GlobalOptions& g) {
  const CacheEvalSettings settings = settings_of(o);
  RecordJob rj(g, o.job, o.input, {o.out + ".h5", o.out + ".csv", o.out + ".json"});
  rj.load();
  const Model& model = rj.model();
  if (!model.tokenizer) fail<InputError>("{}: ckv eval needs a model with a tokenizer", model.source.path.string());
  const int64_t input_records = count_input_records(o.input.jsonl);
  rj.describe_input(o.input.jsonl, sha256_file(o.input.jsonl), input_records);
  const nlohmann::json js = settings_json(o, settings);
  rj.open(kEvalSchema, kEvalSchemaVersion, "", js);
  std::vector<std::string> method_names;
  for (const MethodSpec& m : settings.methods) method_names.push_back(m.name());
  EvalFile file = rj.continuing() ? EvalFile::resume(rj.partial(), rj.provenance().command_line)
                                  : EvalFile::create(rj.partial(), rj.provenance(), js, method_names, settings.budgets,
                                                     model.config);
  ThreadPool pool(g.resolved_threads());
  rj.start_progress("eval");
  const int64_t skipped = rj.guarded([&] {
    const int64_t s = rj.for_each_record(file.complete_records(), nullptr, [&](JobRecord& jr) {
      const EvalRecord rec =
          evaluate_record(rj.forward(), model, *jr.input, jr.prompt, settings, !o.no_answer_space, pool);
      file.write_record(rec);
      rj.written();
      rj.record_done(record_lines(rec));
    });
    rj.finish_progress();
    if (rj.shard().is_whole() && rj.written_count() + s == 0) fail<InputError>("{}: no record to evaluate", o.input.jsonl);
    return s;
  });
  file.close();
  write_eval_summaries(rj.partial(0), rj.partial(1), rj.partial(2));
  rj.commit();
  if (!g.quiet) {
    fmt::print("{}", eval_table(eval_summary(read_eval_rows(o.out + ".h5"))));
    fmt::print("\nwrote {0}.h5, {0}.csv, {0}.json: {1} records evaluated, {2} already complete (shard {3})\n", o.out,
               rj.written_count(), skipped, rj.shard().to_string());
  }
}

}  // namespace

void register_eval(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = add_forward_subcommand(
      app, g, "eval", "Answers under eviction with a KV cache, scored, beside the perturbation");
  cmd->add_option("-i,--input", o->input.jsonl, "Path of a JSONL batch: {id, context, question, answer(s), task} per line")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--methods", o->methods, "Selection methods, a comma list as `ckv bound --methods`")->capture_default_str();
  cmd->add_option("--budgets", o->budgets,
                  "Budgets: fractions of the evictable context in (0, 1), comma separated, each 0.2 or 20% "
                  "(1, the full cache, is always evaluated)")->capture_default_str();
  cmd->add_option("--compress", o->compress,
                  "Evictable entries: context (the question is fed after compression, kvpress's pipeline) or "
                  "prompt (the whole prompt, the question inside the snapkv window)")
      ->check(CLI::IsMember({"context", "prompt"}))->capture_default_str();
  add_selection_options(*cmd, o->selection);
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Greedy tokens per answer at most, a count >= 1")->capture_default_str();
  cmd->add_option("--track-steps", o->track_steps,
                  "N, a count in [0, --max-new-tokens]: follow the perturbation along the answer: the full cache's "
                  "first N answer tokens are teacher-forced over every cache, and each step's per-head L1/L2, "
                  "theta_hat and next-token KL stored (docs/EVAL.md \"Along the answer\"); 0: off")
      ->capture_default_str();
  cmd->add_option("--stop", o->stop, "Stop an answer once it contains this string (repeatable)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Generate past the end-of-sequence token");
  cmd->add_flag("--chat", o->input.prompt.chat, "Wrap each record's context and question in the model's chat template");
  cmd->add_flag("--no-answer-space", o->no_answer_space, "Do not prefix the reference answer with a space for log p");
  cmd->add_option("-o,--out", o->out, "Output prefix: PREFIX.h5, PREFIX.csv, PREFIX.json")->capture_default_str();
  add_job_flags(*cmd, o->job);
  cmd->callback([o, &g] { run_eval(*o, g); });
}

}  // namespace ckv::app
