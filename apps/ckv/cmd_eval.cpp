// ckv eval: answers under eviction with a KV cache, record by record, beside the measured
// perturbation (docs/EVAL.md). Per record: the full cache and every method x budget
// (analysis/cache_eval.h), each decoded greedily and scored as the record's task defines
// (data/answer_score.h); HDF5 + CSV + JSON (output/eval_schema.h) with shards, --resume and
// `ckv merge`; a console table of accuracy per method x budget (the paper's Figure 2).
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "data/answer_score.h"
#include "analysis/cache_eval.h"
#include "common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/progress.h"
#include "output/provenance.h"
#include "core/sha256.h"
#include "core/shard.h"
#include "core/thread_pool.h"
#include "output/batch_output.h"
#include "output/dump_schema.h"
#include "output/describe.h"
#include "output/eval_schema.h"
#include "method_options.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "prompt_input.h"

namespace ckv::app {
namespace {

struct EvalOptions {
  std::string input;
  std::string methods = "snapkv,criticalkv(snapkv),adakv(snapkv),criticalkv(adakv(snapkv))";
  std::vector<std::string> budgets{"0.05", "0.1", "0.2", "0.4"};
  std::string compress = "context";
  std::string selection_file;
  int64_t window = 32, kernel = 7;
  std::string pool = "max", gqa_reduce = "mean";
  SelectionParams params;
  MethodOptions method_opts;
  int64_t max_new_tokens = 32, track_steps = 0;
  std::vector<std::string> stop;
  bool ignore_eos = false, chat = false, no_answer_space = false;
  std::string out = "eval";
  std::string shard;
  bool force = false, resume = false;
};

CacheEvalSettings settings_of(const EvalOptions& o) {
  CacheEvalSettings s;
  s.methods = parse_methods(o.methods);
  for (const std::string& b : o.budgets) s.budgets.push_back(parse_budget_fraction(b, "--budgets"));
  s.params = o.params;
  s.params.window = o.window;
  s.params.kernel = o.kernel;
  s.params.pool = o.pool == "avg" ? PoolKind::Avg : PoolKind::Max;
  s.params.gqa_reduce = o.gqa_reduce == "max" ? GqaReduce::Max : GqaReduce::Mean;
  finish_method_options(o.method_opts, s.params);
  validate_selection_params(s.params);
  for (const MethodSpec& m : s.methods) require_method_inputs(m, s.params, "--methods");
  s.compress_prompt = o.compress == "prompt";
  s.selection_file = o.selection_file;
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
  return {{"methods", methods},        {"budgets", s.budgets},           {"compress", o.compress},
          {"selection_file", o.selection_file}, {"window", o.window},   {"kernel", o.kernel},
          {"pool", o.pool},            {"gqa_reduce", o.gqa_reduce},     {"sinks", o.params.sinks},
          {"h2o_rows", o.params.h2o_rows}, {"alpha", o.params.alpha},   {"eps", o.params.eps},
          {"alpha_safe", o.params.alpha_safe}, {"defensive_kernel", o.params.defensive_kernel},
          {"defensive_share", o.method_opts.defensive_share}, {"defensive_nu", o.method_opts.defensive_nu},
          {"pyramid_beta", o.params.pyramid_beta}, {"duo_pattern", o.method_opts.duo_pattern},
          {"duo_sink", o.params.duo_sink}, {"duo_recent", o.params.duo_recent},
          {"headkv_profile", o.method_opts.headkv_profile}, {"obcache_score", o.method_opts.obcache_score},
          {"ea_future", o.params.ea_future}, {"ea_sinks", o.params.ea_sinks}, {"ea_epsilon", o.params.ea_epsilon},
          {"ea_covariance", o.params.ea_covariance}, {"ea_vnorm", o.params.ea_vnorm},
          {"headkv_beta", o.params.headkv_beta}, {"headkv_temp", o.params.headkv_temp},
          {"max_new_tokens", o.max_new_tokens}, {"track_steps", o.track_steps}, {"stop", o.stop},     {"ignore_eos", o.ignore_eos},
          {"chat", o.chat},            {"answer_space", !o.no_answer_space}};
}

void print_record(const EvalRecord& r) {
  const auto scored = [&](size_t k) {
    return k < r.scores.size() && r.scores[k] ? fmt::format(" score {:.2f}", r.scores[k]->score) : std::string();
  };
  fmt::print(stderr, "record \"{}\": {} tokens, context {}; full{} {:?}\n", r.id, r.result.n, r.result.question_start,
             scored(0), r.result.full.decoded.text);
  for (size_t k = 0; k < r.result.runs.size(); ++k) {
    const CacheEvalRun& run = r.result.runs[k];
    fmt::print(stderr, "  {} {:g}: L1 {:.4f} KL {:.4f}{} {:?}\n", run.method, run.fraction, run.mean_l1, run.first.kl,
               scored(k + 1), run.decoded.text);
  }
}

void run_eval(const EvalOptions& o, const GlobalOptions& g) {
  namespace fs = std::filesystem;
  const CacheEvalSettings settings = settings_of(o);
  const Shard shard = Shard::resolve(o.shard);
  const fs::path h5_path = o.out + ".h5", csv_path = o.out + ".csv", json_path = o.out + ".json";
  for (const fs::path& p : {h5_path, csv_path, json_path}) AtomicOutput::check(p, {.force = o.force, .resume = o.resume});
  Model model = load_model(g.model_path());
  if (!model.tokenizer) fail<InputError>("{}: ckv eval needs a model with a tokenizer", model.source.path.string());
  const std::string sha = model_sha256(model.source.path);
  // Built before the provenance: its context is the device that runs the pass.
  Forward fwd(model, g.forward_options());
  Provenance prov = g.provenance(fwd.context().device_string());
  prov.set("model_path", model.source.path.string());
  prov.set("model_sha256", sha);
  if (const std::string note = set_sliding_layers(prov, model.config); !note.empty() && !g.quiet)
    fmt::print(stderr, "ckv: note: {}\n", note);
  prov.set("input_file", o.input);
  prov.set("input_sha256", sha256_file(o.input));
  const int64_t input_records = count_input_records(o.input);
  set_shard_provenance(prov, shard, input_records);
  const nlohmann::json js = settings_json(o, settings);
  if (o.resume)
    check_output_to_resume(h5_path, {.schema = kEvalSchema, .schema_version = kEvalSchemaVersion, .kind = "",
                                     .model_sha256 = sha, .input_sha256 = prov.find("input_sha256")->get<std::string>(),
                                     .settings = js, .command_line = prov.command_line, .shard = shard});
  const AtomicOutputOptions opt{.force = o.force, .resume = o.resume};
  AtomicOutput h5_out(h5_path, opt);
  restart_headerless(h5_out);
  AtomicOutput csv_out(csv_path, opt), json_out(json_path, opt);
  std::vector<std::string> method_names;
  for (const MethodSpec& m : settings.methods) method_names.push_back(m.name());
  EvalFile file = h5_out.continuing() ? EvalFile::resume(h5_out.partial_path(), prov.command_line)
                                      : EvalFile::create(h5_out.partial_path(), prov, js, method_names,
                                                         settings.budgets, model.config);
  const std::set<std::string> done = file.complete_records();
  ThreadPool pool(g.resolved_threads());
  int64_t written = 0, skipped = 0;
  Progress progress("eval", shard.is_whole() ? input_records : 0, "records", g.progress_mode());
  try {
    skipped = for_each_input_record(o.input, shard, done, *model.tokenizer, o.chat, [&](const InputRecord& r, RecordPrompt& p) {
      EvalRecord rec;
      rec.id = r.id;
      rec.index = r.index;
      rec.task = r.task;
      rec.answers = r.answers;
      rec.prompt = p.tokens;
      rec.prompt_text = token_texts(model.tokenizer.get(), p.tokens);
      rec.decoded_text = [&](const std::vector<int32_t>& ids) { return token_texts(model.tokenizer.get(), ids); };
      rec.answer_ids = answer_token_ids(r, *model.tokenizer, !o.no_answer_space);
      rec.result = evaluate_with_cache(fwd, model,
                                       {.id = r.id, .prompt = p.tokens, .context_end = p.context_end,
                                        .answer_ids = rec.answer_ids},
                                       settings, pool);
      if (r.task != AnswerTask::None) {
        rec.scores.push_back(score_answer(r.task, rec.result.full.decoded.text, r.answers));
        for (const CacheEvalRun& run : rec.result.runs)
          rec.scores.push_back(score_answer(r.task, run.decoded.text, r.answers));
      }
      file.write_record(rec);
      ++written;
      progress.advance();
      if (!g.quiet && !progress.enabled()) print_record(rec);
    });
    progress.finish();
    if (shard.is_whole() && written + skipped == 0) fail<InputError>("{}: no record to evaluate", o.input);
  } catch (...) {
    if (!h5_out.continuing() && written == 0) {
      file.close();
      fs::remove(h5_out.partial_path());
    }
    throw;
  }
  file.close();
  write_eval_summaries(h5_out.partial_path(), csv_out.partial_path(), json_out.partial_path());
  h5_out.commit();
  csv_out.commit();
  json_out.commit();
  if (!g.quiet) {
    fmt::print("{}", eval_table(eval_summary(read_eval_rows(h5_path))));
    fmt::print("\nwrote {0}.h5, {0}.csv, {0}.json: {1} records evaluated, {2} already complete (shard {3})\n", o.out,
               written, skipped, shard.to_string());
  }
}

}  // namespace

void register_eval(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "Answers under eviction with a KV cache, scored, beside the perturbation");
  add_model_options(*cmd, g);
  add_compute_option(*cmd, g);
  cmd->add_option("-i,--input", o->input, "JSONL batch: {id, context, question, answer(s), task} per line")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--methods", o->methods, "Selection methods, as `ckv bound --methods`")->capture_default_str();
  cmd->add_option("--budgets", o->budgets, "Kept fractions of the evictable entries, in (0, 1)")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--compress", o->compress,
                  "Evictable entries: context (the question is fed after compression, kvpress's pipeline) or "
                  "prompt (the whole prompt, the question inside the snapkv window)")
      ->check(CLI::IsMember({"context", "prompt"}))->capture_default_str();
  cmd->add_option("--selection-file", o->selection_file, "Kept/evicted sets for the 'file' method (docs/MASK.md)");
  cmd->add_option("--window", o->window, "snapkv observation window")->capture_default_str();
  cmd->add_option("--kernel", o->kernel, "snapkv pooling kernel (odd)")->capture_default_str();
  cmd->add_option("--pool", o->pool, "snapkv pooling")->check(CLI::IsMember({"max", "avg"}))->capture_default_str();
  cmd->add_option("--gqa-reduce", o->gqa_reduce, "Reduction of a KV head's query-head scores and nu")
      ->check(CLI::IsMember({"mean", "max"}))->capture_default_str();
  cmd->add_option("--sinks", o->params.sinks, "streaming: sink entries kept at the start")->capture_default_str();
  cmd->add_option("--h2o-rows", o->params.h2o_rows, "h2o: accumulated attention of the last N context queries")
      ->capture_default_str();
  cmd->add_option("--eps", o->params.eps, "criticalkv stage-2 offset")->capture_default_str();
  cmd->add_option("--alpha-safe", o->params.alpha_safe, "adakv: share of the budget every head keeps")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  add_method_options(*cmd, o->method_opts, o->params);
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Greedy tokens per answer at most")->capture_default_str();
  cmd->add_option("--track-steps", o->track_steps,
                  "N: follow the perturbation along the answer: the full cache's first N answer tokens are "
                  "teacher-forced over every cache, and each step's per-head L1/L2, theta_hat and next-token KL "
                  "stored (docs/EVAL.md \"Along the answer\"); 0: off")
      ->capture_default_str();
  cmd->add_option("--stop", o->stop, "Stop an answer once it contains this string (repeatable)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Generate past the end-of-sequence token");
  cmd->add_flag("--chat", o->chat, "Wrap each record's context and question in the model's chat template");
  cmd->add_flag("--no-answer-space", o->no_answer_space, "Do not prefix the reference answer with a space for log p");
  cmd->add_option("-o,--out", o->out, "Output prefix: PREFIX.h5, PREFIX.csv, PREFIX.json")->capture_default_str();
  cmd->add_option("--shard", o->shard,
                  "Only records with index % N == i (i/N) of --input; default: SLURM_ARRAY_TASK_ID/COUNT when set");
  cmd->add_flag("--force", o->force, "Replace existing outputs");
  cmd->add_flag("--resume", o->resume, "Continue an interrupted output, skipping complete records");
  cmd->callback([o, &g] { run_eval(*o, g); });
}

}  // namespace ckv::app
