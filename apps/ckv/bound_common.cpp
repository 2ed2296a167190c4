#include "bound_common.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/value_norms.h"
#include "bound_report.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/shard.h"
#include "core/thread_pool.h"
#include "io/batch_output.h"
#include "io/dump_schema.h"
#include "io/records.h"
#include "model/forward.h"
#include "model/model.h"

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
  for (std::string item; std::getline(ss, item, ',');) {
    double x = 0;
    try {
      size_t used = 0;
      x = std::stod(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      fail<InputError>("--budgets: '{}' is not a number", item);
    }
    if (!(x > 0 && x <= 1)) fail<InputError>("--budgets: {} is outside (0, 1] (a fraction of the evictable context; use --keep N for counts)", item);
    out.push_back(x);
  }
  if (out.empty()) fail<InputError>("--budgets: no budget given");
  return out;
}

struct RecordInput {
  std::string id;
  std::vector<int32_t> tokens;
  int64_t c = 0;
};

// Reads the selection file: {"<layer>": [[kv_head 0 positions], [kv_head 1 ...], ...]}.
std::map<int64_t, std::vector<std::vector<int64_t>>> read_selection_file(const std::string& path) {
  std::map<int64_t, std::vector<std::vector<int64_t>>> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) fail<InputError>("{}: cannot read the selection file", path);
  nlohmann::json j;
  try {
    in >> j;
    for (auto& [layer, heads] : j.items()) out[std::stoll(layer)] = heads.get<std::vector<std::vector<int64_t>>>();
  } catch (const std::exception& e) {
    fail<InputError>("{}: not a selection file {{\"<layer>\": [[positions per KV head]]}}: {}", path, e.what());
  }
  return out;
}

class AnalysisRecorder : public Recorder {
 public:
  AnalysisRecorder(const Model& model, const std::vector<AnalysisBlock>& blocks, BoundRecord& rec,
                   ThreadPool& pool, const std::vector<std::map<int64_t, std::vector<std::vector<int64_t>>>>& files)
      : model_(model), blocks_(blocks), rec_(rec), pool_(pool), files_(files) {}
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
      r.budgets = rec_.budgets;
      r.params = b.params;
      r.c = rec_.c;
      r.eval_rows = rec_.eval_rows;
      r.oracle = b.oracle;
      r.oracle_max_n = b.oracle_max_n;
      if (auto it = files_[bi].find(layer); it != files_[bi].end()) r.file_kept = it->second;
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
};

BoundRecord prepare(const AnalysisOptions& o, const std::string& id, int64_t n, int64_t c) {
  BoundRecord rec;
  rec.id = id;
  rec.n = n;
  rec.c = c;
  const std::string name = fmt::format("record \"{}\"", id);
  if (o.params.window >= c)
    fail<InputError>("{}: --window {} is not shorter than the context of {} tokens", name, o.params.window, c);
  rec.budgets = resolve_budgets(o, c, name);
  rec.eval_rows = evaluation_rows(c, n);
  return rec;
}

}  // namespace

void add_analysis_options(CLI::App& cmd, AnalysisOptions& o) {
  add_prompt_options(cmd, o.input);
  cmd.add_option("--question", o.question, "Question appended to --prompt/--prompt-file (its tokens are the evaluation queries)");
  auto* input = cmd.add_option("-i,--input", o.input_jsonl, "JSONL batch: {id, context, question} per line");
  auto* dump = cmd.add_option("--dump", o.dump, "Analyse a `ckv dump` file (needs q,k,v of all heads; --model must be the dump's model)");
  for (const char* other : {"--prompt", "--prompt-file", "--tokens"}) {
    input->excludes(cmd.get_option(other));
    dump->excludes(cmd.get_option(other));
  }
  input->excludes(dump);
  cmd.add_option("--budgets", o.budgets, "Budgets as fractions of the evictable context, in (0, 1]")->capture_default_str();
  cmd.add_option("--keep", o.keep, "Absolute budget: kept entries per KV head (replaces --budgets)");
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
  cmd.add_option("--gqa-reduce", o.gqa_reduce, "Reduction of a KV head's query-head scores and nu")->check(CLI::IsMember({"mean", "max"}))->capture_default_str();
  cmd.add_option("-o,--out", o.out, "Output prefix: PREFIX.h5, PREFIX.csv, PREFIX.json")->capture_default_str();
  cmd.add_option("--shard", o.shard,
                 "Only records with index % N == i (i/N) of --input; default: SLURM_ARRAY_TASK_ID/COUNT when set");
  cmd.add_flag("--force", o.force, "Replace existing outputs");
  cmd.add_flag("--resume", o.resume, "Continue an interrupted output, skipping complete records");
}

void finish_options(AnalysisOptions& o) {
  if (o.keep < 0) fail<InputError>("--keep {}: must be positive", o.keep);
  if (o.keep == 0) parse_fractions(o.budgets);
  if (o.params.kernel < 1 || o.params.kernel % 2 == 0) fail<InputError>("--kernel {}: must be odd and positive", o.params.kernel);
  if (o.params.window < 1) fail<InputError>("--window {}: must be positive", o.params.window);
  o.params.pool = o.pool == "avg" ? PoolKind::Avg : PoolKind::Max;
  o.params.gqa_reduce = o.gqa_reduce == "max" ? GqaReduce::Max : GqaReduce::Mean;
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
  const std::vector<int64_t> layers = parse_index_list(o.layers, model.config.n_layer, "--layers");
  std::vector<std::map<int64_t, std::vector<std::vector<int64_t>>>> files;
  for (const AnalysisBlock& b : blocks) files.push_back(read_selection_file(b.selection_file));
  ThreadPool pool(g.resolved_threads());
  if (!shard.is_whole() && o.input_jsonl.empty())
    fail<InputError>("--shard {}: sharding needs a JSONL batch (--input)", shard.to_string());
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
      BoundRecord rec = prepare(o, id, r.attr_int("n_tokens"), r.attr_int("context_end"));
      rec.index = static_cast<int64_t>(index);
      AnalysisRecorder rc(model, blocks, rec, pool, files);
      for (int64_t l : layers) {
        const h5::Group lg = r.open_group(fmt::format("layers/{}", l));
        auto load = [&](const char* name) {
          const h5::Dataset ds = lg.open_dataset(name);
          return Tensor(ds.shape(), ds.read<float>());
        };
        rc.analyze(l, load("q"), load("k"), load("v"), model.weights.layers.at(static_cast<size_t>(l)).wo.to_f32());
      }
      sink.write(rec);
    }
    return skipped;
  }

  Forward forward(model, {.threads = g.resolved_threads()});
  auto run_one = [&](const std::string& id, int64_t index, const std::vector<int32_t>& tokens, int64_t c) {
    BoundRecord rec = prepare(o, id, static_cast<int64_t>(tokens.size()), c);
    rec.index = index;
    AnalysisRecorder rc(model, blocks, rec, pool, files);
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
  run_one("0", 0, tokens, static_cast<int64_t>(tokens.size()));
  return 0;
}

}  // namespace

void run_bound_job(const AnalysisOptions& o, const GlobalOptions& g, const std::vector<AnalysisBlock>& blocks,
                   const BoundJob& job) {
  namespace fs = std::filesystem;
  const fs::path h5_path = o.out + ".h5", csv_path = o.out + ".csv", json_path = o.out + ".json";
  // Refuse existing outputs before the model load and hashing; the real checks follow.
  if (!o.force && !o.resume)
    for (const fs::path& p : {h5_path, csv_path, json_path}) AtomicOutput(p, {});
  const Shard shard = Shard::resolve(o.shard);
  Provenance prov = Provenance::capture(g.argc, g.argv, g.resolved_threads(), g.device);
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
      fmt::print(stderr, "record \"{}\": {} tokens, context {}, {} evaluation queries\n", rec.id, rec.n, rec.c,
                 rec.eval_rows.size());
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
                        job.max_list);
  h5_out->commit();
  csv_out->commit();
  json_out->commit();
  if (!g.quiet)
    fmt::print("\nwrote {0}.h5, {0}.csv, {0}.json: {1} records analysed, {2} already complete (shard {3})\n", o.out,
               written, skipped, shard.to_string());
}

}  // namespace ckv::app
