#include "bound_common.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "analysis/layer_allocation.h"
#include "analysis/mask_plan.h"
#include "analysis/perturbation.h"
#include "model/family.h"
#include "analysis/value_norms.h"
#include "bound_report.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "output/dump_schema.h"
#include "model/rope_freq.h"

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

// A selection file's positions against a record's context [0, c).
void check_selection(const std::string& path, int64_t layer, const std::vector<std::vector<int64_t>>& heads,
                     int64_t c, const std::string& record) {
  for (size_t g = 0; g < heads.size(); ++g)
    for (int64_t i : heads[g])
      if (i >= c)
        fail<InputError>("{}: layer {} KV head {}: position {} outside the context [0, {}) of {}", path, layer, g, i,
                         c, record);
}

bool layer_global(const AnalysisBlock& b) {
  return std::any_of(b.methods.begin(), b.methods.end(), [](const MethodSpec& m) { return m.layer_global(); });
}

// Per block, the pre-pass of its layer-global methods (null for blocks without them).
using Collectors = std::vector<std::unique_ptr<DefensiveCollector>>;

Collectors make_collectors(const Model& model, const std::vector<AnalysisBlock>& blocks, int64_t c, ThreadPool& pool) {
  Collectors out;
  for (const AnalysisBlock& b : blocks)
    out.push_back(layer_global(b) ? std::make_unique<DefensiveCollector>(model.weights, model.config.n_head, c,
                                                                         b.params, &pool)
                                  : nullptr);
  return out;
}

class CollectorFanout : public Recorder {
 public:
  explicit CollectorFanout(Collectors& c) : c_(c) {}
  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override {
    for (auto& c : c_)
      if (c) c->on_qkv(layer, q, k, v);
  }

 private:
  Collectors& c_;
};

class AnalysisRecorder : public Recorder {
 public:
  AnalysisRecorder(const Model& model, const std::vector<AnalysisBlock>& blocks, BoundRecord& rec,
                   ThreadPool& pool, const std::vector<std::map<int64_t, std::vector<std::vector<int64_t>>>>& files,
                   const Collectors* collectors = nullptr)
      : model_(model), blocks_(blocks), rec_(rec), pool_(pool), files_(files), collectors_(collectors),
        inv_freq_(std::make_shared<const std::vector<float>>(
            rope_inv_freq(model.config, model.weights.rope_freq_factors))) {}
  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override {
    const Tensor wo = model_.weights.layers.at(static_cast<size_t>(layer)).wo.to_f32();
    analyze(layer, q, k, v, wo);
  }
  void analyze(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& wo) {
    const ValueNorms nu = value_norms(v, wo, q.dim(0), {}, {.l1 = true, .l2 = true}, &pool_);
    LayerTensors t{&q, &k, &v, &wo, &nu.l1, &nu.l2};
    LayerResult merged;
    for (size_t bi = 0; bi < blocks_.size(); ++bi) {
      const AnalysisBlock& b = blocks_[bi];
      LayerRequest r;
      r.methods = b.methods;
      for (size_t i = 0; i < rec_.budgets.size(); ++i)  // the selection gets the fraction too (Budget)
        r.budgets.push_back(rec_.keep_shares.empty() ? Budget(rec_.budgets[i]) : Budget(rec_.budgets[i], rec_.keep_shares[i]));
      r.params = b.params;
      r.c = rec_.c;
      r.layer = layer;
      r.n_layer = model_.config.n_layer;
      r.eval_rows = rec_.eval_rows;
      r.oracle = b.oracle;
      r.oracle_max_n = b.oracle_max_n;
      r.nu_min = b.nu_min;
      r.rope_inv_freq = inv_freq_;
      r.window = model_.config.window_of(layer);  // a sliding layer: selections among what it holds
      if (auto it = files_[bi].find(layer); it != files_[bi].end()) {
        check_selection(b.selection_file, layer, it->second, rec_.c, fmt::format("record \"{}\"", rec_.id));
        r.file_kept = it->second;
      }
      if (collectors_ && (*collectors_)[bi]) {
        const DefensiveCollector& col = *(*collectors_)[bi];
        r.defensive = col.scores(layer);
        for (const Budget& budget : r.budgets) r.layer_totals[budget] = col.totals(budget).at(layer);
      }
      LayerResult part = analyze_layer(t, r, &pool_);
      if (bi == 0) {
        merged = std::move(part);
        continue;
      }
      merged.n_method += part.n_method;
      merged.metrics.insert(merged.metrics.end(), part.metrics.begin(), part.metrics.end());
      merged.kept_mask.insert(merged.kept_mask.end(), part.kept_mask.begin(), part.kept_mask.end());
      merged.kept_count.insert(merged.kept_count.end(), part.kept_count.begin(), part.kept_count.end());
      merged.oracle_skipped = merged.oracle_skipped || part.oracle_skipped;
    }
    rec_.layer_ids.push_back(layer);
    rec_.layers.push_back(std::move(merged));
  }

 private:
  const Model& model_;
  const std::vector<AnalysisBlock>& blocks_;
  BoundRecord& rec_;
  ThreadPool& pool_;
  const std::vector<std::map<int64_t, std::vector<std::vector<int64_t>>>>& files_;
  const Collectors* collectors_;
  std::shared_ptr<const std::vector<float>> inv_freq_;
};

// A record of a prompt of n tokens whose context ends at context_end, under the protocol
// A record of a prompt of n tokens whose context ends at context_end, under the protocol
// (docs/BOUND.md "Protocol"): with --compress prompt the whole prompt is evictable (c = n),
// else the context; with --eval first-decode the greedy next token `decoded` (>= 0) is
// appended at position n and is the only evaluation query.
BoundRecord prepare(const AnalysisOptions& o, const std::string& id, int64_t n, int64_t context_end,
                    int64_t decoded = -1) {
  BoundRecord rec;
  rec.id = id;
  rec.question_start = context_end;
  rec.c = o.compress == "prompt" ? n : context_end;
  rec.n = decoded >= 0 ? n + 1 : n;
  rec.eval_token = decoded;
  const int64_t c = rec.c;
  const std::string name = fmt::format("record \"{}\"", id);
  if (o.selection.params.window >= c)
    fail<InputError>("{}: --window {} is not shorter than the context of {} tokens", name, o.selection.params.window, c);
  if (o.fractions.empty()) {
    if (o.keep > c) fail<InputError>("{}: --keep {} is larger than the cache of {} evictable entries", name, o.keep, c);
    rec.budgets = {o.keep};
  }
  for (double f : o.fractions) {
    const Budget b = budget_of_fraction(c, f);
    rec.budgets.push_back(b.kept);
    rec.keep_shares.push_back(b.keep_share);
  }
  if (o.eval == "first-decode") rec.eval_rows = {n};
  else if (o.eval == "last") rec.eval_rows = {n - 1};
  else rec.eval_rows = evaluation_rows(context_end, n);
  for (int64_t b : rec.budgets) rec.below_window.push_back(b < o.selection.params.window ? 1 : 0);
  return rec;
}

// Sorted layer indices as --layers writes them: "0-3,10".
std::string index_ranges(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  std::string out;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += fmt::format("{}{}", out.empty() ? "" : ",", j == i ? fmt::format("{}", ids[i]) : fmt::format("{}-{}", ids[i], ids[j]));
    i = j + 1;
  }
  return out;
}

// The greedy next token after the prompt (--eval first-decode): argmax of the last row's
// logits, the lower id on a tie.
int32_t greedy_next_token(Forward& forward, const std::vector<int32_t>& tokens) {
  const ForwardResult res = forward.run(tokens, {});
  const std::span<const float> row = res.logits.span();  // [1, vocab]
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

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
    rj_.load(o_.dump.empty());
    require_default_attention_scale(rj_.model().config, "ckv bound/check");
    const ModelConfig& cf = rj_.model().config;
    layers_ = parse_index_list(o_.layers, cf.n_layer, "--layers");
    for (const AnalysisBlock& b : blocks_) {
      bool old_format = false;
      files_.push_back(read_layer_selection_file(b.selection_file, cf.n_layer, cf.n_kv_head, &old_format));
      if (old_format && !g_.quiet)
        fmt::print(stderr, "ckv: note: {}: the old selection format {{\"<layer>\": [[...]]}} is read for now; the one "
                   "format of bound, mask and eval is {{\"format\": \"ckv.selection\", \"format_version\": 1, "
                   "\"layers\": {{\"<layer>\": {{\"kept\": [[...]]}}}}}} (docs/MASK.md)\n", b.selection_file);
    }
    const int64_t skipped = rj_.guarded([&] {
      const int64_t s = o_.dump.empty() ? run_model() : run_dump();
      if (rj_.shard().is_whole() && rj_.written_count() + s == 0)
        fail<InputError>("{}: no record to analyse", job_.kind);
      return s;
    });
    file_->close();
    write_bound_summaries(rj_.partial(0), rj_.partial(1), rj_.partial(2), o_.out, job_.max_list, g_.quiet);
    rj_.commit();
    if (!g_.quiet)
      fmt::print("\nwrote {0}.h5, {0}.csv, {0}.json: {1} records analysed, {2} already complete (shard {3})\n", o_.out,
                 rj_.written_count(), skipped, rj_.shard().to_string());
  }

 private:
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
    if (!g_.quiet)
      fmt::print(stderr, "record \"{}\": {} tokens, context {}, {} evaluation queries{}\n", rec.id, rec.n,
                 rec.question_start, rec.eval_rows.size(),
                 rec.eval_token >= 0 ? fmt::format(" (first decoded token {})", rec.eval_token) : "");
  }

  int64_t run_model() {
    rj_.describe_input();
    const std::set<std::string> done = open();
    return rj_.for_each_record(
        done, [&] { return prompt_record(o_, rj_.model()); },
        [&](JobRecord& r) { analyse(r.id, r.index, r.prompt.tokens, r.prompt.context_end); });
  }

  void analyse(const std::string& id, int64_t index, const std::vector<int32_t>& prompt, int64_t c) {
    const Model& model = rj_.model();
    Forward& forward = rj_.forward();
    std::vector<int32_t> tokens = prompt;
    int64_t decoded = -1;
    if (o_.eval == "first-decode") {
      if (model.config.context_length > 0 && static_cast<int64_t>(prompt.size()) >= model.config.context_length)
        fail<InputError>("record \"{}\": --eval first-decode: no room for a next token after {} tokens", id,
                         prompt.size());
      decoded = greedy_next_token(forward, prompt);
      tokens.push_back(static_cast<int32_t>(decoded));
    }
    BoundRecord rec = prepare(o_, id, static_cast<int64_t>(prompt.size()), c, decoded);
    rec.index = index;
    Collectors collectors = make_collectors(model, blocks_, rec.c, pool_);
    if (std::any_of(blocks_.begin(), blocks_.end(), layer_global)) {
      // Layer-global methods share the budget among all the model's layers: a pre-pass over
      // the context (its rows are all the scores read) collects every layer's scores.
      CollectorFanout fan(collectors);
      ForwardRequest pre;
      for (int64_t l = 0; l < model.config.n_layer; ++l) pre.record.layers.push_back(l);
      pre.record.qkv = true;
      pre.recorder = &fan;
      forward.run(std::vector<int32_t>(tokens.begin(), tokens.begin() + rec.c), pre);
    }
    AnalysisRecorder rc(model, blocks_, rec, pool_, files_, &collectors);
    ForwardRequest req;
    req.record.layers = layers_;
    req.record.qkv = true;
    req.recorder = &rc;
    forward.run(tokens, req);
    write(rec);
  }

  // The dump's header against the model and the analysis: its model, contents and layers.
  void check_dump(const h5::File& f, const std::vector<int64_t>& dumped) const {
    const Model& model = rj_.model();
    check_dump_schema(f);
    const std::string dump_sha = f.attr_string("model_sha256"), sha = rj_.model_sha256();
    if (dump_sha != sha)
      fail<InputError>("{}: made with a model of sha256 {}..., but --model {} has sha256 {}...", o_.dump,
                       dump_sha.substr(0, 12), model.source.path.string(), sha.substr(0, 12));
    const std::vector<std::string> what = f.attr_strings("what");
    for (const char* need : {"q", "k", "v"})
      if (std::find(what.begin(), what.end(), need) == what.end())
        fail<InputError>("{}: the dump lacks {} (record it with `ckv dump --what q,k,v,...`)", o_.dump, need);
    if (static_cast<int64_t>(f.attr_ints("heads").size()) != model.config.n_head)
      fail<InputError>("{}: the dump holds only some heads; bound needs all (`ckv dump --heads all`)", o_.dump);
    for (int64_t l : layers_)
      if (std::find(dumped.begin(), dumped.end(), l) == dumped.end())
        fail<InputError>("{}: layer {} is not in the dump (`ckv dump --layers ...` records it); the dump holds "
                         "layers {}: give --layers {}", o_.dump, l, index_ranges(dumped), index_ranges(dumped));
  }

  int64_t run_dump() {
    h5::File f = h5::File::open_read(o_.dump);
    const std::vector<int64_t> dumped = f.attr_ints("layers");
    check_dump(f, dumped);
    // The dump's complete records in input order are this run's input 0..k-1.
    const std::vector<std::string> ids = complete_records_in_input_order(f);
    rj_.describe_input(o_.dump, f.has_attr("input_sha256") ? f.attr_string("input_sha256") : "",
                       static_cast<int64_t>(ids.size()));
    const std::set<std::string> done = open();
    int64_t skipped = 0;
    for (size_t index = 0; index < ids.size(); ++index) {
      if (done.count(ids[index])) ++skipped;
      else analyse_dumped(f.open_group("records/" + ids[index]), ids[index], static_cast<int64_t>(index), dumped);
    }
    return skipped;
  }

  void analyse_dumped(const h5::Group& r, const std::string& id, int64_t index, const std::vector<int64_t>& dumped) {
    // Every dataset the analysis indexes is checked against the record's attributes and
    // the model: a hostile or damaged dump must not steer reads out of bounds.
    const Model& model = rj_.model();
    const std::string where = fmt::format("{}: record \"{}\"", o_.dump, id);
    const ModelConfig& cf = model.config;
    const int64_t n = r.attr_int("n_tokens"), c = r.attr_int("context_end");
    if (n < 1 || (cf.context_length > 0 && n > cf.context_length))
      fail<FormatError>("{}: n_tokens {} is outside [1, {}]", where, n, cf.context_length > 0 ? cf.context_length : n);
    if (c < 1 || c > n) fail<FormatError>("{}: context_end {} is outside [1, n_tokens = {}]", where, c, n);
    BoundRecord rec = prepare(o_, id, n, c);
    rec.index = index;
    auto load = [&](int64_t l, const char* name) {
      const int64_t heads = std::string_view(name) == "q" ? cf.n_head : cf.n_kv_head;
      const h5::Dataset ds = r.open_group(fmt::format("layers/{}", l)).open_dataset(name);
      const std::vector<int64_t> want{heads, n, cf.d_head};
      if (ds.shape() != want)
        fail<FormatError>("{}: layer {} {} has shape [{}], expected [{}] from n_tokens and the model", where, l, name,
                          fmt::join(ds.shape(), ", "), fmt::join(want, ", "));
      return Tensor(ds.shape(), ds.read<float>());
    };
    Collectors collectors = make_collectors(model, blocks_, rec.c, pool_);
    if (std::any_of(blocks_.begin(), blocks_.end(), layer_global)) {
      // Layer-global methods share the budget among all the model's layers.
      for (int64_t l = 0; l < cf.n_layer; ++l) {
        if (std::find(dumped.begin(), dumped.end(), l) == dumped.end())
          fail<InputError>("{}: layer {} is not in the dump; layer-defensivekv allocates over all layers", o_.dump, l);
        const Tensor q = load(l, "q"), k = load(l, "k"), v = load(l, "v");  // in order: errors name q first
        CollectorFanout(collectors).on_qkv(l, q, k, v);
      }
    }
    AnalysisRecorder rc(model, blocks_, rec, pool_, files_, &collectors);
    for (int64_t l : layers_) {
      const Tensor q = load(l, "q"), k = load(l, "k"), v = load(l, "v");
      rc.analyze(l, q, k, v, model.weights.layers.at(static_cast<size_t>(l)).wo.to_f32());
    }
    write(rec);
  }

  const AnalysisOptions& o_;
  const GlobalOptions& g_;
  const std::vector<AnalysisBlock>& blocks_;
  const BoundJob& job_;
  RecordJob rj_;
  ThreadPool pool_;
  std::vector<int64_t> layers_;
  std::vector<std::map<int64_t, std::vector<std::vector<int64_t>>>> files_;
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
                              "Path of a `ckv dump` file to analyse (needs q,k,v of all heads; --model must be the "
                              "dump's model)");
  for (const char* other : {"--prompt", "--prompt-file", "--tokens"}) dump->excludes(cmd.get_option(other));
  input->excludes(dump);
  cmd.add_option("--budgets", o.budgets,
                 "Budgets: fractions of the evictable context in (0, 1], comma separated, each 0.2 or 20%")
      ->capture_default_str();
  cmd.add_option("--keep", o.keep, "Absolute budget: kept entries per KV head, a count >= 1 (replaces --budgets)")
      ->each([&o](const std::string&) { o.keep_given = true; });
  cmd.add_option("--layers", o.layers, "Layers: all, or a list of indices and ranges (0-3,10)")->capture_default_str();
  add_selection_options(cmd, o.selection, {.alpha = alpha, .selection_file = alpha});
  cmd.add_option("--eval", o.eval,
                 "Evaluation query: question (the question's tokens, or the last token without one), "
                 "last (the prompt's last token) or first-decode (the greedy next token, appended: the paper's)")
      ->check(CLI::IsMember({"question", "last", "first-decode"}))->capture_default_str();
  cmd.add_option("--compress", o.compress,
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
  if (o.keep_given || o.keep != 0) check_keep(o.keep);
  else o.fractions = parse_budget_fractions(o.budgets, "--budgets");
  finish_selection_options(o.selection);
  o.nu_min_reading = parse_nu_min_reading(o.nu_min);
  if (o.compress == "prompt" && o.eval == "question")
    fail<UsageError>("--compress prompt: the question is evictable, so it cannot hold the evaluation queries; "
                     "use --eval first-decode or --eval last");
  if (o.eval == "first-decode" && !o.dump.empty())
    fail<UsageError>("--eval first-decode: a dump holds no next token; run the model (--input, --prompt, --tokens)");
}

nlohmann::json analysis_settings(const AnalysisOptions& o) {
  nlohmann::json s = selection_settings(o.selection);
  s.update({{"budgets", o.budgets}, {"keep", o.keep}, {"eval", o.eval}, {"compress", o.compress}, {"nu_min", o.nu_min}});
  return s;
}

void run_bound_job(const AnalysisOptions& o, const GlobalOptions& g, const std::vector<AnalysisBlock>& blocks,
                   const BoundJob& job) {
  BoundRun(o, g, blocks, job).run();
}

}  // namespace ckv::app
