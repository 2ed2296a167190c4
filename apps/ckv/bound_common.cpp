#include "bound_common.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "analysis/layer_allocation.h"
#include "analysis/mask_plan.h"
#include "analysis/value_norms.h"
#include "bound_report.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/shard.h"
#include "core/thread_pool.h"
#include "output/batch_output.h"
#include "output/dump_schema.h"
#include "data/records.h"
#include "model/family.h"
#include "model/forward.h"
#include "model/model.h"
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

std::vector<double> parse_fractions(const std::string& spec) {
  std::vector<double> out;
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(parse_budget_fraction(item, "--budgets"));
  if (out.empty()) fail<UsageError>("--budgets: no budget given");
  return out;
}

struct RecordInput {
  std::string id;
  std::vector<int32_t> tokens;
  int64_t c = 0;
};

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
  if (o.params.window >= c)
    fail<InputError>("{}: --window {} is not shorter than the context of {} tokens", name, o.params.window, c);
  rec.budgets = resolve_budgets(o, c, name);
  if (o.keep <= 0)
    for (double f : parse_fractions(o.budgets)) rec.keep_shares.push_back(budget_of_fraction(c, f).keep_share);
  if (o.eval == "first-decode") rec.eval_rows = {n};
  else if (o.eval == "last") rec.eval_rows = {n - 1};
  else rec.eval_rows = evaluation_rows(context_end, n);
  for (int64_t b : rec.budgets) rec.below_window.push_back(b < o.params.window ? 1 : 0);
  return rec;
}

// The greedy next token after the prompt (--eval first-decode): argmax of the last row's
// logits, the lower id on a tie.
int32_t greedy_next_token(Forward& forward, const std::vector<int32_t>& tokens) {
  const ForwardResult res = forward.run(tokens, {});
  const std::span<const float> row = res.logits.span();  // [1, vocab]
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

void add_analysis_options(CLI::App& cmd, AnalysisOptions& o) {
  add_prompt_options(cmd, o.input);
  cmd.add_option("--question", o.question, "Question appended to --prompt/--prompt-file (its tokens are the evaluation queries)");
  cmd.add_option("--context-end", o.context_end, "With --tokens: positions >= C are the question (default: none)")
      ->needs(cmd.get_option("--tokens"));
  auto* input = cmd.add_option("-i,--input", o.input_jsonl, "JSONL batch: {id, context, question} per line");
  auto* dump = cmd.add_option("--dump", o.dump, "Analyse a `ckv dump` file (needs q,k,v of all heads; --model must be the dump's model)");
  for (const char* other : {"--prompt", "--prompt-file", "--tokens"}) {
    input->excludes(cmd.get_option(other));
    dump->excludes(cmd.get_option(other));
  }
  input->excludes(dump);
  cmd.add_option("--budgets", o.budgets, "Budgets as fractions of the evictable context, in (0, 1]")->capture_default_str();
  cmd.add_option("--keep", o.keep, "Absolute budget: kept entries per KV head (replaces --budgets)")
      ->each([&o](const std::string&) { o.keep_given = true; });
  cmd.add_option("--layers", o.layers, "Layers: all, or indices and ranges")->capture_default_str();
  cmd.add_option("--window", o.params.window,
                 "snapkv observation window: the last W context queries. The window's entries are "
                 "always kept and count in the budget (as kvpress scores them max+1)")->capture_default_str();
  cmd.add_option("--pool", o.pool, "snapkv pooling: max (paper) or avg (kvpress)")->check(CLI::IsMember({"max", "avg"}))->capture_default_str();
  cmd.add_option("--kernel", o.params.kernel, "snapkv pooling kernel (odd)")->capture_default_str();
  cmd.add_option("--h2o-rows", o.params.h2o_rows, "h2o: accumulated attention of the last N context queries")->capture_default_str();
  cmd.add_option("--sinks", o.params.sinks, "streaming: sink entries kept at the start")->capture_default_str();
  cmd.add_option("--eps", o.params.eps, "criticalkv stage-2 offset")->capture_default_str();
  cmd.add_option("--alpha-safe", o.params.alpha_safe, "adakv: share of the budget every head keeps")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  add_method_options(cmd, o.method, o.params);
  cmd.add_option("--gqa-reduce", o.gqa_reduce, "Reduction of a KV head's query-head scores and nu")->check(CLI::IsMember({"mean", "max"}))->capture_default_str();
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
  cmd.add_option("--shard", o.shard,
                 "Only records with index % N == i (i/N) of --input; default: SLURM_ARRAY_TASK_ID/COUNT when set");
  cmd.add_flag("--force", o.force, "Replace existing outputs");
  cmd.add_flag("--resume", o.resume, "Continue an interrupted output, skipping complete records");
}

void finish_options(AnalysisOptions& o) {
  if (o.keep_given || o.keep != 0) check_keep(o.keep);
  else parse_fractions(o.budgets);
  validate_selection_params(o.params);
  o.params.pool = o.pool == "avg" ? PoolKind::Avg : PoolKind::Max;
  o.params.gqa_reduce = o.gqa_reduce == "max" ? GqaReduce::Max : GqaReduce::Mean;
  finish_method_options(o.method, o.params);
  o.nu_min_reading = parse_nu_min_reading(o.nu_min);
  if (o.compress == "prompt" && o.eval == "question")
    fail<UsageError>("--compress prompt: the question is evictable, so it cannot hold the evaluation queries; "
                     "use --eval first-decode or --eval last");
  if (o.eval == "first-decode" && !o.dump.empty())
    fail<UsageError>("--eval first-decode: a dump holds no next token; run the model (--input, --prompt, --tokens)");
}

nlohmann::json protocol_settings(const AnalysisOptions& o) {
  return {{"eval", o.eval}, {"compress", o.compress}, {"nu_min", o.nu_min}};
}

std::vector<int64_t> resolve_budgets(const AnalysisOptions& o, int64_t c, const std::string& record) {
  if (o.keep > 0) {
    if (o.keep > c) fail<InputError>("{}: --keep {} is larger than the cache of {} evictable entries", record, o.keep, c);
    return {o.keep};
  }
  std::vector<int64_t> out;
  for (double f : parse_fractions(o.budgets)) out.push_back(budget_from_fraction(c, f));
  return out;
}

namespace {

// Where run_analysis puts its records: `open` is called once the model is loaded and the
// provenance is complete, before any record, and returns the ids already complete.
struct AnalysisSink {
  std::function<std::set<std::string>(const Provenance&)> open;
  std::function<void(const BoundRecord&)> write;
};

std::string text_input(const AnalysisOptions& o) {
  if (!o.input.prompt_file.empty() || !o.input.tokens_file.empty())
    return read_text_file(o.input.prompt_file.empty() ? o.input.tokens_file : o.input.prompt_file);
  return o.input.prompt;
}

int64_t run_analysis(const AnalysisOptions& o, const GlobalOptions& g, const std::vector<AnalysisBlock>& blocks,
                     Provenance& prov, const Shard& shard, const AnalysisSink& sink) {
  Model model = load_model(g.model_path());
  const std::string sha = model_sha256(model.source.path);
  prov.set("model_path", model.source.path.string());
  prov.set("model_sha256", sha);
  require_default_attention_scale(model.config, "ckv bound/check");
  if (const std::string note = set_sliding_layers(prov, model.config); !note.empty() && !g.quiet)
    fmt::print(stderr, "ckv: note: {}\n", note);
  const std::vector<int64_t> layers = parse_index_list(o.layers, model.config.n_layer, "--layers");
  std::vector<std::map<int64_t, std::vector<std::vector<int64_t>>>> files;
  for (const AnalysisBlock& b : blocks)
    files.push_back(read_layer_selection_file(b.selection_file, model.config.n_layer, model.config.n_kv_head));
  ThreadPool pool(g.resolved_threads());
  if (!shard.is_whole() && o.input_jsonl.empty())
    fail<UsageError>("--shard {}: sharding needs a JSONL batch (--input)", shard.to_string());
  int64_t skipped = 0;

  if (!o.dump.empty()) {
    h5::File f = h5::File::open_read(o.dump);
    check_dump_schema(f);
    const std::string dump_sha = f.attr_string("model_sha256");
    if (dump_sha != sha)
      fail<InputError>("{}: made with a model of sha256 {}..., but --model {} has sha256 {}...", o.dump,
                       dump_sha.substr(0, 12), model.source.path.string(), sha.substr(0, 12));
    const std::vector<std::string> what = f.attr_strings("what");
    for (const char* need : {"q", "k", "v"})
      if (std::find(what.begin(), what.end(), need) == what.end())
        fail<InputError>("{}: the dump lacks {} (record it with `ckv dump --what q,k,v,...`)", o.dump, need);
    if (static_cast<int64_t>(f.attr_ints("heads").size()) != model.config.n_head)
      fail<InputError>("{}: the dump holds only some heads; bound needs all (`ckv dump --heads all`)", o.dump);
    const std::vector<int64_t> dumped = f.attr_ints("layers");
    for (int64_t l : layers)
      if (std::find(dumped.begin(), dumped.end(), l) == dumped.end())
        fail<InputError>("{}: layer {} is not in the dump (`ckv dump --layers ...`)", o.dump, l);
    // The dump's complete records in input order are this run's input 0..k-1.
    const std::vector<std::string> ids = complete_records_in_input_order(f);
    prov.set("input_file", o.dump);
    prov.set("input_sha256", f.has_attr("input_sha256") ? f.attr_string("input_sha256") : "");
    set_shard_provenance(prov, shard, static_cast<int64_t>(ids.size()));
    const std::set<std::string> done = sink.open(prov);
    for (size_t index = 0; index < ids.size(); ++index) {
      const std::string& id = ids[index];
      if (done.count(id)) {
        ++skipped;
        continue;
      }
      const h5::Group r = f.open_group("records/" + id);
      // Every dataset the analysis indexes is checked against the record's attributes and
      // the model: a hostile or damaged dump must not steer reads out of bounds.
      const std::string where = fmt::format("{}: record \"{}\"", o.dump, id);
      const ModelConfig& cf = model.config;
      const int64_t n = r.attr_int("n_tokens"), c = r.attr_int("context_end");
      if (n < 1 || (cf.context_length > 0 && n > cf.context_length))
        fail<FormatError>("{}: n_tokens {} is outside [1, {}]", where, n, cf.context_length > 0 ? cf.context_length : n);
      if (c < 1 || c > n) fail<FormatError>("{}: context_end {} is outside [1, n_tokens = {}]", where, c, n);
      BoundRecord rec = prepare(o, id, n, c);
      rec.index = static_cast<int64_t>(index);
      auto load = [&](int64_t l, const char* name) {
        const int64_t heads = std::string_view(name) == "q" ? cf.n_head : cf.n_kv_head;
        const h5::Dataset ds = r.open_group(fmt::format("layers/{}", l)).open_dataset(name);
        const std::vector<int64_t> want{heads, n, cf.d_head};
        if (ds.shape() != want)
          fail<FormatError>("{}: layer {} {} has shape [{}], expected [{}] from n_tokens and the model", where, l,
                            name, fmt::join(ds.shape(), ", "), fmt::join(want, ", "));
        return Tensor(ds.shape(), ds.read<float>());
      };
      Collectors collectors = make_collectors(model, blocks, rec.c, pool);
      if (std::any_of(blocks.begin(), blocks.end(), layer_global)) {
        // Layer-global methods share the budget among all the model's layers.
        for (int64_t l = 0; l < model.config.n_layer; ++l) {
          if (std::find(dumped.begin(), dumped.end(), l) == dumped.end())
            fail<InputError>("{}: layer {} is not in the dump; layer-defensivekv allocates over all layers", o.dump, l);
          const Tensor q = load(l, "q"), k = load(l, "k"), v = load(l, "v");  // in order: errors name q first
          CollectorFanout(collectors).on_qkv(l, q, k, v);
        }
      }
      AnalysisRecorder rc(model, blocks, rec, pool, files, &collectors);
      for (int64_t l : layers) {
        const Tensor q = load(l, "q"), k = load(l, "k"), v = load(l, "v");
        rc.analyze(l, q, k, v, model.weights.layers.at(static_cast<size_t>(l)).wo.to_f32());
      }
      sink.write(rec);
    }
    return skipped;
  }

  Forward forward(model, g.forward_options());
  prov.device = forward.context().device_string();
  auto run_one = [&](const std::string& id, int64_t index, const std::vector<int32_t>& prompt, int64_t c) {
    std::vector<int32_t> tokens = prompt;
    int64_t decoded = -1;
    if (o.eval == "first-decode") {
      if (model.config.context_length > 0 && static_cast<int64_t>(prompt.size()) >= model.config.context_length)
        fail<InputError>("record \"{}\": --eval first-decode: no room for a next token after {} tokens", id,
                         prompt.size());
      decoded = greedy_next_token(forward, prompt);
      tokens.push_back(static_cast<int32_t>(decoded));
    }
    BoundRecord rec = prepare(o, id, static_cast<int64_t>(prompt.size()), c, decoded);
    rec.index = index;
    Collectors collectors = make_collectors(model, blocks, rec.c, pool);
    if (std::any_of(blocks.begin(), blocks.end(), layer_global)) {
      // Layer-global methods share the budget among all the model's layers: a pre-pass over
      // the context (its rows are all the scores read) collects every layer's scores.
      CollectorFanout fan(collectors);
      ForwardRequest pre;
      for (int64_t l = 0; l < model.config.n_layer; ++l) pre.record.layers.push_back(l);
      pre.record.qkv = true;
      pre.recorder = &fan;
      forward.run(std::vector<int32_t>(tokens.begin(), tokens.begin() + rec.c), pre);
    }
    AnalysisRecorder rc(model, blocks, rec, pool, files, &collectors);
    ForwardRequest req;
    req.record.layers = layers;
    req.record.qkv = true;
    req.recorder = &rc;
    forward.run(tokens, req);
    sink.write(rec);
  };
  if (!o.input_jsonl.empty()) {
    prov.set("input_file", o.input_jsonl);
    prov.set("input_sha256", sha256_file(o.input_jsonl));
    set_shard_provenance(prov, shard, count_input_records(o.input_jsonl));
    if (!model.tokenizer) fail<InputError>("{}: --input needs a model with a tokenizer", model.source.path.string());
    return for_each_input_record(o.input_jsonl, shard, sink.open(prov), *model.tokenizer, o.input.chat,
                                 [&](const InputRecord& r, RecordPrompt& p) {
                                   run_one(r.id, r.index, p.tokens, p.context_end);
                                 });
  }
  const std::string prompt = text_input(o);
  prov.set("input_file", o.input.prompt_file.empty() ? o.input.tokens_file : o.input.prompt_file);
  prov.set("input_sha256", prompt.empty() ? "" : sha256_hex(prompt + o.question));
  set_shard_provenance(prov, shard, 1);
  if (sink.open(prov).count("0")) return 1;
  const bool text = o.input.tokens_file.empty();
  const bool builtin = text && o.input.prompt.empty() && o.input.prompt_file.empty();
  if (text && (builtin || !o.question.empty())) {
    if (!model.tokenizer) fail<InputError>("{}: text prompts need a model with a tokenizer", model.source.path.string());
    InputRecord r;
    r.id = "0";
    r.context = builtin ? kBuiltinContext : prompt;
    r.question = builtin ? kBuiltinQuestion : o.question;
    RecordPrompt p = tokenize_record(r, *model.tokenizer, o.input.chat);
    run_one("0", 0, p.tokens, p.context_end);
    return 0;
  }
  const std::vector<int32_t> tokens = prompt_tokens(o.input, model, kBuiltinContext);
  const auto n = static_cast<int64_t>(tokens.size());
  if (o.context_end == 0 || o.context_end > n)
    fail<InputError>("--context-end {}: outside [1, {}] (the prompt's tokens)", o.context_end, n);
  run_one("0", 0, tokens, o.context_end > 0 ? o.context_end : n);
  return 0;
}

}  // namespace

void run_bound_job(const AnalysisOptions& o, const GlobalOptions& g, const std::vector<AnalysisBlock>& blocks,
                   const BoundJob& job) {
  namespace fs = std::filesystem;
  const fs::path h5_path = o.out + ".h5", csv_path = o.out + ".csv", json_path = o.out + ".json";
  // Refuse existing outputs before the model load and hashing; the real checks follow.
  for (const fs::path& p : {h5_path, csv_path, json_path}) AtomicOutput::check(p, {.force = o.force, .resume = o.resume});
  const Shard shard = Shard::resolve(o.shard);
  // The device that ran: the CPU for an analysis of a dump (its pool); run_analysis sets
  // its Forward's context's device before any output is opened when it runs the model.
  Provenance prov = g.provenance(std::string(device_name(Device::CPU)));
  std::optional<AtomicOutput> h5_out, csv_out, json_out;
  std::optional<BoundFile> file;
  int64_t written = 0;
  AnalysisSink sink;
  sink.open = [&](const Provenance& p) {
    if (o.resume) {
      auto value = [&](const char* key) { return p.find(key) ? p.find(key)->get<std::string>() : std::string(); };
      check_output_to_resume(h5_path,
                             {.schema = kBoundSchema, .schema_version = kBoundSchemaVersion, .kind = job.kind,
                              .model_sha256 = value("model_sha256"), .input_sha256 = value("input_sha256"),
                              .settings = job.settings, .command_line = p.command_line, .shard = shard});
    }
    const AtomicOutputOptions opt{.force = o.force, .resume = o.resume};
    h5_out.emplace(h5_path, opt);
    restart_headerless(*h5_out);
    csv_out.emplace(csv_path, opt);
    json_out.emplace(json_path, opt);
    file.emplace(h5_out->continuing() ? BoundFile::resume(h5_out->partial_path(), p.command_line)
                                      : BoundFile::create(h5_out->partial_path(), p, job.kind, job.labels, job.settings));
    return file->complete_records();
  };
  sink.write = [&](const BoundRecord& rec) {
    file->write_record(rec);
    ++written;
    if (!g.quiet)
      fmt::print(stderr, "record \"{}\": {} tokens, context {}, {} evaluation queries{}\n", rec.id, rec.n,
                 rec.question_start, rec.eval_rows.size(),
                 rec.eval_token >= 0 ? fmt::format(" (first decoded token {})", rec.eval_token) : "");
  };
  int64_t skipped = 0;
  try {
    skipped = run_analysis(o, g, blocks, prov, shard, sink);
    if (shard.is_whole() && written + skipped == 0) fail<InputError>("{}: no record to analyse", job.kind);
  } catch (...) {
    // A run that created the file and finished no record leaves nothing to resume.
    if (file && !h5_out->continuing() && written == 0) {
      file->close();
      fs::remove(h5_out->partial_path());
    }
    throw;
  }
  file->close();
  write_bound_summaries(h5_out->partial_path(), csv_out->partial_path(), json_out->partial_path(), o.out,
                        job.max_list, g.quiet);
  h5_out->commit();
  csv_out->commit();
  json_out->commit();
  if (!g.quiet)
    fmt::print("\nwrote {0}.h5, {0}.csv, {0}.json: {1} records analysed, {2} already complete (shard {3})\n", o.out,
               written, skipped, shard.to_string());
}

}  // namespace ckv::app
