#include "bound_common.h"

#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/mask_plan.h"
#include "analysis/perturbation.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/family.h"
#include "output/batch_output.h"
#include "output/bound_report.h"
#include "output/dump_schema.h"

namespace ckv::app {
namespace {

// The built-in example: a context long enough for the paper's 32-token window, and a
// question, so the evaluation queries are the question's tokens.
constexpr const char* kBuiltinContext =
    "The harbour town of Vell sits at the mouth of a slow brown river. Its fishermen leave "
    "before dawn and return at noon, when the market opens under the old stone arches. The "
    "baker on the square sells rye bread with caraway, and the ferry to the island of Ost "
    "leaves every hour from the northern pier. In winter the ferry stops running and the "
    "islanders cross the frozen strait on foot, guided by a line of red flags that the "
    "harbour master sets out each December. The town library keeps a logbook of every ship "
    "that has called at Vell since 1820; the oldest entry records a schooner named Marten "
    "carrying salt and iron nails. The harbour master this year is Ilse Varga, who also "
    "repairs nets in the evenings. The lighthouse on the southern cape was painted green in "
    "1931 and has been green ever since. ";
constexpr const char* kBuiltinQuestion = "Question: What colour is the lighthouse? Answer:";

// The one prompt record (id "0"): the built-in example or a text with a question, tokenised
// as a JSONL record is; else the prompt's tokens, the question starting at --context-end.
JobRecord prompt_record(const AnalysisOptions& o, const Model& model) {
  const PromptOptions& in = o.input.prompt;
  const bool text = in.tokens_file.empty();
  const bool builtin = text && in.prompt.empty() && in.prompt_file.empty();
  JobRecord r;
  r.id = "0";
  if (text && (builtin || !o.input.question.empty())) {
    if (!model.tokenizer) fail<InputError>("{}: text prompts need a model with a tokenizer", model.source.path.string());
    InputRecord ir;
    ir.id = "0";
    ir.context = builtin ? kBuiltinContext : in.prompt_file.empty() ? in.prompt : read_text_file(in.prompt_file);
    ir.question = builtin ? kBuiltinQuestion : o.input.question;
    r.prompt = tokenize_record(ir, *model.tokenizer, in.chat);
    return r;
  }
  r.prompt.tokens = prompt_tokens(in, model, kBuiltinContext);
  const auto n = static_cast<int64_t>(r.prompt.tokens.size());
  if (o.context_end == 0 || o.context_end > n)
    fail<InputError>("--context-end {}: outside [1, {}] (the prompt's tokens)", o.context_end, n);
  r.prompt.context_end = o.context_end > 0 ? o.context_end : n;
  return r;
}

// A bound or check job: the records of a model run or of a dump into one bound file.
class BoundRun {
 public:
  BoundRun(const AnalysisOptions& o, const GlobalOptions& g, const std::vector<AnalysisBlock>& blocks,
           const BoundJob& job)
      : o_(o), g_(g), blocks_(blocks), job_(job),
        rj_(g, o.job, o.input, {o.out + ".h5", o.out + ".csv", o.out + ".json"}), pool_(g.resolved_threads()) {}

  void run() {
    load();
    require_default_attention_scale(rj_.model().config, "ckv bound/check");
    const ModelConfig& cf = rj_.model().config;
    std::vector<int64_t> layers = parse_index_list(o_.layers, cf.n_layer, "--layers");
    std::vector<LayerSelection> files;
    for (const AnalysisBlock& b : blocks_) {
      bool old_format = false;
      files.push_back(read_layer_selection_file(b.selection_file, cf.n_layer, cf.n_kv_head, &old_format));
      if (old_format && !g_.quiet)
        fmt::print(stderr, "ckv: note: {}: the old selection format {{\"<layer>\": [[...]]}} is read for now; the one "
                   "format of bound, mask and eval is {{\"format\": \"ckv.selection\", \"format_version\": 1, "
                   "\"layers\": {{\"<layer>\": {{\"kept\": [[...]]}}}}}} (docs/MASK.md)\n", b.selection_file);
    }
    analysis_.emplace(rj_.model(), blocks_, o_.protocol, std::move(layers), std::move(files), pool_);
    const int64_t skipped = rj_.guarded([&] {
      const int64_t s = o_.dump.empty() ? run_model() : run_dump();
      if (rj_.shard().is_whole() && rj_.written_count() + s == 0)
        fail<InputError>("{}: no record to analyse", job_.kind);
      return s;
    });
    file_->close();
    const std::string summary =
        write_bound_summaries(rj_.partial(0), rj_.partial(1), rj_.partial(2), o_.out, job_.max_list);
    if (!g_.quiet) fmt::print("{}", summary);
    rj_.commit();
    if (!g_.quiet)
      fmt::print("\nwrote {0}.h5, {0}.csv, {0}.json: {1} records analysed, {2} already complete (shard {3})\n", o_.out,
                 rj_.written_count(), skipped, rj_.shard().to_string());
  }

 private:
  // The model: --model's; with --dump and no --model, the one the dump carries when it holds
  // W_O (`ckv dump --what ...,wo`, or ckv.hf's bridge from any HF model), else the default.
  void load() {
    if (!o_.dump.empty() && g_.model.empty()) {
      const h5::File f = h5::File::open_read(o_.dump);
      check_dump_schema(f);
      if (std::optional<Model> m = model_from_dump(f, o_.dump)) {
        if (!g_.quiet)
          fmt::print(stderr, "ckv: note: {}: analysed with the model the dump carries (its config and W_O); "
                     "--model would name another\n", o_.dump);
        rj_.load_from_dump(std::move(*m), f.attr_string("model_sha256"));
        return;
      }
    }
    rj_.load(o_.dump.empty());
  }

  // Opens the outputs once the provenance is complete; returns the ids already complete.
  std::set<std::string> open() {
    rj_.open(kBoundSchema, kBoundSchemaVersion, job_.kind, job_.settings);
    const Provenance& p = rj_.provenance();
    file_.emplace(rj_.continuing() ? BoundFile::resume(rj_.partial(), p.command_line)
                                   : BoundFile::create(rj_.partial(), p, job_.kind, job_.labels, job_.settings));
    return file_->complete_records();
  }

  void write(const BoundRecord& rec) {
    file_->write_record(rec);
    rj_.written();
    rj_.record_done(fmt::format("record \"{}\": {} tokens, context {}, {} evaluation queries{}", rec.id, rec.n,
                                rec.question_start, rec.eval_rows.size(),
                                rec.eval_token >= 0 ? fmt::format(" (first decoded token {})", rec.eval_token) : ""));
  }

  int64_t run_model() {
    rj_.describe_input();
    const std::set<std::string> done = open();
    rj_.start_progress(job_.kind);
    const int64_t skipped = rj_.for_each_record(
        done, [&] { return prompt_record(o_, rj_.model()); },
        [&](JobRecord& r) {
          write(analysis_->analyse(rj_.forward(), r.id, r.index, r.prompt.tokens, r.prompt.context_end));
        });
    rj_.finish_progress();
    return skipped;
  }

  int64_t run_dump() {
    h5::File f = h5::File::open_read(o_.dump);
    const std::vector<int64_t> dumped = f.attr_ints("layers");
    analysis_->check_dump(f, o_.dump, rj_.model_sha256(), dumped);
    // The dump's complete records in input order are this run's input 0..k-1.
    const std::vector<std::string> ids = complete_records_in_input_order(f);
    rj_.describe_input(o_.dump, f.has_attr("input_sha256") ? f.attr_string("input_sha256") : "",
                       static_cast<int64_t>(ids.size()));
    const std::set<std::string> done = open();
    rj_.start_progress(job_.kind);
    int64_t skipped = 0;
    for (size_t index = 0; index < ids.size(); ++index) {
      if (done.count(ids[index])) ++skipped;
      else
        write(analysis_->analyse_dumped(f.open_group("records/" + ids[index]), o_.dump, ids[index],
                                        static_cast<int64_t>(index), dumped));
    }
    rj_.finish_progress();
    return skipped;
  }

  const AnalysisOptions& o_;
  const GlobalOptions& g_;
  const std::vector<AnalysisBlock>& blocks_;
  const BoundJob& job_;
  RecordJob rj_;
  ThreadPool pool_;
  std::optional<BoundAnalysis> analysis_;
  std::optional<BoundFile> file_;
};

}  // namespace

void add_analysis_options(CLI::App& cmd, AnalysisOptions& o, bool alpha) {
  add_prompt_options(cmd, o.input.prompt);
  cmd.add_option("--question", o.input.question,
                 "Question text appended to --prompt/--prompt-file (its tokens are the evaluation queries)");
  cmd.add_option("--context-end", o.context_end, "With --tokens: positions >= C are the question (default: none)")
      ->needs(cmd.get_option("--tokens"));
  auto* input = add_jsonl_option(cmd, o.input, "Path of a JSONL batch: {id, context, question} per line");
  auto* dump = cmd.add_option("--dump", o.dump,
                              "Path of a `ckv dump` file to analyse (needs q,k,v of all heads). Without --model, a "
                              "dump that holds W_O (--what ...,wo) is analysed with its own config and W_O; else "
                              "--model must be the dump's model");
  for (const char* other : {"--prompt", "--prompt-file", "--tokens"}) dump->excludes(cmd.get_option(other));
  input->excludes(dump);
  cmd.add_option("--budgets", o.budgets,
                 "Budgets: fractions of the evictable context in (0, 1], comma separated, each 0.2 or 20%")
      ->capture_default_str();
  cmd.add_option("--keep", o.protocol.keep, "Absolute budget: kept entries per KV head, a count >= 1 (replaces --budgets)")
      ->each([&o](const std::string&) { o.keep_given = true; });
  cmd.add_option("--layers", o.layers, "Layers: all, or a list of indices and ranges (0-3,10)")->capture_default_str();
  if (alpha) add_selection_options(cmd, o.selection);
  else add_selection_options(cmd, o.selection, {"alpha", "selection_file"});
  cmd.add_option("--eval", o.protocol.eval,
                 "Evaluation query: question (the question's tokens, or the last token without one), "
                 "last (the prompt's last token) or first-decode (the greedy next token, appended: the paper's)")
      ->check(CLI::IsMember({"question", "last", "first-decode"}))->capture_default_str();
  cmd.add_option("--compress", o.protocol.compress,
                 "Evictable entries: context (the question is never evicted, kvpress's pipeline) or prompt "
                 "(the whole prompt, the question inside the snapkv window: the paper's code)")
      ->check(CLI::IsMember({"context", "prompt"}))->capture_default_str();
  cmd.add_option("--nu-min", o.nu_min,
                 "theta_rel's nu_min over: all keys (Theorem C.1, a bound), no-sink (all but position 0), "
                 "stage2 (the stage-2 candidates; not a bound) or stage2-partial (stage 2 relaxed only, a bound)")
      ->check(CLI::IsMember({"all", "no-sink", "stage2", "stage2-partial"}))->capture_default_str();
  cmd.add_option("-o,--out", o.out, "Output prefix: PREFIX.h5, PREFIX.csv, PREFIX.json")->capture_default_str();
  add_job_flags(cmd, o.job);
}

void finish_options(AnalysisOptions& o) {
  BoundProtocol& p = o.protocol;
  if (o.keep_given || p.keep != 0) check_keep(p.keep);
  else p.fractions = parse_budget_fractions(o.budgets, "--budgets");
  finish_selection_options(o.selection);
  o.nu_min_reading = parse_nu_min_reading(o.nu_min);
  p.window = o.selection.window;
  if (p.compress == "prompt" && p.eval == "question")
    fail<UsageError>("--compress prompt: the question is evictable, so it cannot hold the evaluation queries; "
                     "use --eval first-decode or --eval last");
  if (p.eval == "first-decode" && !o.dump.empty())
    fail<UsageError>("--eval first-decode: a dump holds no next token; run the model (--input, --prompt, --tokens)");
}

nlohmann::json analysis_settings(const AnalysisOptions& o) {
  nlohmann::json s = selection_settings(o.selection);
  const BoundProtocol& p = o.protocol;
  s.update({{"budgets", o.budgets}, {"keep", p.keep}, {"eval", p.eval}, {"compress", p.compress}, {"nu_min", o.nu_min}});
  return s;
}

void run_bound_job(const AnalysisOptions& o, const GlobalOptions& g, const std::vector<AnalysisBlock>& blocks,
                   const BoundJob& job) {
  BoundRun(o, g, blocks, job).run();
}

}  // namespace ckv::app
