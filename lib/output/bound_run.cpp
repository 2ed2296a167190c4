#include "output/bound_run.h"

#include <algorithm>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/layer_allocation.h"
#include "analysis/value_norms.h"
#include "core/error.h"
#include "model/rope_freq.h"
#include "output/dump_schema.h"

namespace ckv {
namespace {

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
                   ThreadPool& pool, const std::vector<LayerSelection>& files,
                   const Collectors* collectors = nullptr)
      : model_(model), blocks_(blocks), rec_(rec), pool_(pool), files_(files), collectors_(collectors),
        needs_rope_(std::any_of(blocks.begin(), blocks.end(), [](const AnalysisBlock& b) {
          return std::any_of(b.methods.begin(), b.methods.end(), [](const MethodSpec& m) {
            return m.has(kNeedsRope);
          });
        })) {}
  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override {
    const Tensor wo = model_.weights.layers.at(static_cast<size_t>(layer)).wo.to_f32();
    analyze(layer, q, k, v, wo);
  }
  void analyze(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& wo) {
    const ValueNorms nu = value_norms(v, wo, q.dim(0), {}, {.l1 = true, .l2 = true}, &pool_);
    LayerTensors t{&q, &k, &v, &wo, &nu.l1, &nu.l2};
    // expectedattention undoes the rotation this layer's keys had in this pass.
    std::shared_ptr<const std::vector<float>> inv_freq;
    if (needs_rope_)
      inv_freq = std::make_shared<const std::vector<float>>(
          layer_rope_inv_freq(model_.config, model_.weights.rope_freq_factors, layer, k.dim(1)));
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
      r.rope_inv_freq = inv_freq;
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
  const std::vector<LayerSelection>& files_;
  const Collectors* collectors_;
  bool needs_rope_;  // a block selects with expectedattention
};

// A record of a prompt of n tokens whose context ends at context_end, under the protocol
// (docs/BOUND.md "Protocol"): with --compress prompt the whole prompt is evictable (c = n),
// else the context; with --eval first-decode the greedy next token `decoded` (>= 0) is
// appended at position n and is the only evaluation query.
BoundRecord prepare(const BoundProtocol& o, const std::string& id, int64_t n, int64_t context_end,
                    int64_t decoded = -1) {
  BoundRecord rec;
  rec.id = id;
  rec.question_start = context_end;
  rec.c = o.compress == "prompt" ? n : context_end;
  rec.n = decoded >= 0 ? n + 1 : n;
  rec.eval_token = decoded;
  const int64_t c = rec.c;
  const std::string name = fmt::format("record \"{}\"", id);
  if (o.window >= c)
    fail<InputError>("{}: --window {} is not shorter than the context of {} tokens", name, o.window, c);
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
  for (int64_t b : rec.budgets) rec.below_window.push_back(b < o.window ? 1 : 0);
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

}  // namespace

BoundAnalysis::BoundAnalysis(const Model& model, const std::vector<AnalysisBlock>& blocks, BoundProtocol protocol,
                             std::vector<int64_t> layers, std::vector<LayerSelection> files, ThreadPool& pool)
    : model_(model), blocks_(blocks), protocol_(std::move(protocol)), layers_(std::move(layers)),
      files_(std::move(files)), pool_(pool) {}

BoundRecord BoundAnalysis::analyse(Forward& forward, const std::string& id, int64_t index,
                                   const std::vector<int32_t>& prompt, int64_t c) const {
  const Model& model = model_;
  std::vector<int32_t> tokens = prompt;
  int64_t decoded = -1;
  if (protocol_.eval == "first-decode") {
    if (model.config.context_length > 0 && static_cast<int64_t>(prompt.size()) >= model.config.context_length)
      fail<InputError>("record \"{}\": --eval first-decode: no room for a next token after {} tokens", id,
                       prompt.size());
    decoded = greedy_next_token(forward, prompt);
    tokens.push_back(static_cast<int32_t>(decoded));
  }
  BoundRecord rec = prepare(protocol_, id, static_cast<int64_t>(prompt.size()), c, decoded);
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
  return rec;
}

// The dump's header against the model and the analysis: its model, contents and layers.
void BoundAnalysis::check_dump(const h5::File& f, const std::string& path, const std::string& sha,
                               const std::vector<int64_t>& dumped) const {
  const Model& model = model_;
  check_dump_schema(f);
  const std::string dump_sha = f.attr_string("model_sha256");
  if (dump_sha != sha)
    fail<InputError>("{}: made with a model of sha256 {}..., but --model {} has sha256 {}...", path,
                     dump_sha.substr(0, 12), model.source.path.string(), sha.substr(0, 12));
  const std::vector<std::string> what = f.attr_strings("what");
  for (const char* need : {"q", "k", "v"})
    if (std::find(what.begin(), what.end(), need) == what.end())
      fail<InputError>("{}: the dump lacks {} (record it with `ckv dump --what q,k,v,...`)", path, need);
  if (static_cast<int64_t>(f.attr_ints("heads").size()) != model.config.n_head)
    fail<InputError>("{}: the dump holds only some heads; bound needs all (`ckv dump --heads all`)", path);
  for (int64_t l : layers_)
    if (std::find(dumped.begin(), dumped.end(), l) == dumped.end())
      fail<InputError>("{}: layer {} is not in the dump (`ckv dump --layers ...` records it); the dump holds "
                       "layers {}: give --layers {}", path, l, index_ranges(dumped), index_ranges(dumped));
}

BoundRecord BoundAnalysis::analyse_dumped(const h5::Group& r, const std::string& path, const std::string& id,
                                          int64_t index, const std::vector<int64_t>& dumped) const {
  // Every dataset the analysis indexes is checked against the record's attributes and
  // the model: a hostile or damaged dump must not steer reads out of bounds.
  const Model& model = model_;
  const std::string where = fmt::format("{}: record \"{}\"", path, id);
  const ModelConfig& cf = model.config;
  const int64_t n = r.attr_int("n_tokens"), c = r.attr_int("context_end");
  if (n < 1 || (cf.context_length > 0 && n > cf.context_length))
    fail<FormatError>("{}: n_tokens {} is outside [1, {}]", where, n, cf.context_length > 0 ? cf.context_length : n);
  if (c < 1 || c > n) fail<FormatError>("{}: context_end {} is outside [1, n_tokens = {}]", where, c, n);
  BoundRecord rec = prepare(protocol_, id, n, c);
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
        fail<InputError>("{}: layer {} is not in the dump; layer-defensivekv allocates over all layers", path, l);
      const Tensor q = load(l, "q"), k = load(l, "k"), v = load(l, "v");  // in order: errors name q first
      CollectorFanout(collectors).on_qkv(l, q, k, v);
    }
  }
  AnalysisRecorder rc(model, blocks_, rec, pool_, files_, &collectors);
  for (int64_t l : layers_) {
    const Tensor q = load(l, "q"), k = load(l, "k"), v = load(l, "v");
    rc.analyze(l, q, k, v, model.weights.layers.at(static_cast<size_t>(l)).wo.to_f32());
  }
  return rec;
}

}  // namespace ckv
