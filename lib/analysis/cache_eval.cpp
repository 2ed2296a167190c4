#include "analysis/cache_eval.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "analysis/bound_layer.h"
#include "analysis/layer_allocation.h"
#include "analysis/mask_metrics.h"
#include "analysis/perturbation.h"
#include "analysis/value_norms.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/rope_freq.h"
#include "model/tokenizer.h"

namespace ckv {

namespace {

using Kind = MethodSpec::Kind;

bool ranks_by_question(const MethodSpec& m) { return m.has(kReadsQuestion); }

bool needs_nu(const std::vector<MethodSpec>& methods) {
  return std::any_of(methods.begin(), methods.end(), [](const MethodSpec& m) { return m.any_has(kNeedsNu); });
}

// One selection to evaluate: a method at a budget (or a selection file), and what it evicts.
struct Planned {
  MethodSpec method;
  double fraction = 1;
  Budget budget;  // kept per KV head, with the fraction's keep share (selection.h)
  EvictionPlan plan;
  // [n_layer * n_kv_head] the selection's stage-1 (or top) set, for theta_hat along the
  // answer; empty for a selection file (its kept set stands in: theta_hat = theta there).
  std::vector<std::vector<int64_t>> stage1;
};

// The kept evictable positions (< c) of one layer and KV head of a plan.
std::vector<int64_t> kept_positions(const Planned& p, int64_t layer, int64_t kv_head, int64_t c) {
  std::vector<int64_t> keep;
  const std::vector<int64_t>& ev = p.plan.at(layer, kv_head);
  size_t j = 0;
  for (int64_t i = 0; i < c; ++i) {
    if (j < ev.size() && ev[j] == i) ++j;
    else keep.push_back(i);
  }
  return keep;
}

// Copies rows [0, count) of every KV head of a layer of the cache into [n_kv_head, count, d_head].
void cache_rows(const KvCache& cache, int64_t layer, int64_t count, Tensor& k, Tensor& v) {
  const int64_t g_count = cache.n_kv_head(), d = cache.d_head();
  k = Tensor({g_count, count, d});
  v = Tensor({g_count, count, d});
  for (int64_t g = 0; g < g_count; ++g) {
    if (cache.size(layer, g) < count || cache.positions(layer, g)[static_cast<size_t>(count - 1)] != count - 1)
      fail<InputError>("cache eval: layer {} KV head {} does not hold positions [0, {})", layer, g, count);
    std::copy_n(cache.keys(layer, g).data(), count * d, k.data() + g * count * d);
    std::copy_n(cache.values(layer, g).data(), count * d, v.data() + g * count * d);
  }
}

// The selections of one layer for `plans` (all of one pass) from the layer's Q/K/V: the
// scores once (selection_inputs), then each method at its budget.
class LayerSelector {
 public:
  LayerSelector(const Model& model, std::vector<Planned*> plans, int64_t c, std::vector<int64_t> eval_rows,
                const SelectionParams& params, std::map<Budget, std::map<int64_t, int64_t>> totals, ThreadPool& pool)
      : model_(model), plans_(std::move(plans)), c_(c), eval_rows_(std::move(eval_rows)), params_(params),
        totals_(std::move(totals)), pool_(pool) {
    for (const Planned* p : plans_)
      if (std::none_of(methods_.begin(), methods_.end(), [&](const MethodSpec& m) { return m.name() == p->method.name(); }))
        methods_.push_back(p->method);
    for (const Planned* p : plans_)
      if (std::find(budgets_.begin(), budgets_.end(), p->budget) == budgets_.end()) budgets_.push_back(p->budget);
  }

  // q: [n_head, >= max(eval_rows)+1, d_head], k, v: [n_kv_head, >= c, d_head].
  void select_layer(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) {
    if (plans_.empty()) return;
    const ModelConfig& cf = model_.config;
    const Tensor wo = model_.weights.layers[static_cast<size_t>(layer)].wo.to_f32();  // [d_model, n_head*d_head]
    const ValueNorms nu = needs_nu(methods_)
                              ? value_norms(v, wo, cf.n_head, {}, {.l1 = true, .l2 = false}, &pool_)
                              : ValueNorms{.l1 = Tensor({cf.n_head, k.dim(1)}), .l2 = {}};
    const LayerTensors t{.q = &q, .k = &k, .v = &v, .wo = &wo, .nu_l1 = &nu.l1, .nu_l2 = nullptr};
    LayerRequest lr;
    lr.methods = methods_;
    lr.budgets = budgets_;
    lr.params = params_;
    lr.c = c_;
    lr.eval_rows = eval_rows_;
    lr.layer = layer;
    lr.n_layer = cf.n_layer;
    // expectedattention undoes the queries' rotation: the frequencies this layer rotated by
    lr.rope_inv_freq = std::make_shared<const std::vector<float>>(
        layer_rope_inv_freq(cf, model_.weights.rope_freq_factors, layer, k.dim(1)));
    lr.window = cf.window_of(layer);
    lr.first_reader = c_;  // the question's first token, or the first decoded one
    for (const auto& [budget, per_layer] : totals_) lr.layer_totals[budget] = per_layer.at(layer);
    std::vector<Selection> all = layer_selections(t, lr, &pool_);  // [method * budget]
    for (Planned* p : plans_) {
      const auto m = std::find_if(methods_.begin(), methods_.end(),
                                  [&](const MethodSpec& x) { return x.name() == p->method.name(); }) - methods_.begin();
      const auto b = std::find(budgets_.begin(), budgets_.end(), p->budget) - budgets_.begin();
      Selection sel = std::move(all[static_cast<size_t>(m) * budgets_.size() + static_cast<size_t>(b)]);
      p->stage1.resize(static_cast<size_t>(cf.n_layer * cf.n_kv_head));
      for (int64_t g = 0; g < cf.n_kv_head; ++g) {
        p->plan.at(layer, g) = complement(sel.kept[static_cast<size_t>(g)], c_);
        p->stage1[static_cast<size_t>(layer * cf.n_kv_head + g)] = std::move(sel.stage1[static_cast<size_t>(g)]);
      }
    }
  }

 private:
  const Model& model_;
  std::vector<Planned*> plans_;
  std::vector<MethodSpec> methods_;
  std::vector<Budget> budgets_;
  int64_t c_;
  std::vector<int64_t> eval_rows_;
  const SelectionParams& params_;
  std::map<Budget, std::map<int64_t, int64_t>> totals_;
  ThreadPool& pool_;
};

// Hands each layer's Q/K/V of the context prefill to the selector.
class SelectingRecorder : public Recorder {
 public:
  explicit SelectingRecorder(LayerSelector& selector) : selector_(selector) {}
  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override {
    selector_.select_layer(layer, q, k, v);
  }

 private:
  LayerSelector& selector_;
};

// The actual perturbation L1/L2 (docs/MATH.md §3) of every plan at the first decoded token, one
// layer at a time: its query row over the full cache [0, n] (n the token's position).
class FirstTokenProbe {
 public:
  FirstTokenProbe(const Model& model, const std::vector<Planned>& plans, int64_t c, int64_t n, ThreadPool& pool)
      : model_(model), plans_(plans), c_(c), n_(n), pool_(pool) {
    const ModelConfig& cf = model.config;
    l1.assign(plans.size(), std::vector<float>(static_cast<size_t>(cf.n_layer * cf.n_head), 0.0f));
    l2 = l1;
  }

  // q: [n_head, 1, d_head] of the token at position n; cache holds [0, n] in every head.
  void measure(int64_t layer, const Tensor& q, const KvCache& cache) {
    const ModelConfig& cf = model_.config;
    const int64_t group = cf.n_head / cf.n_kv_head, d = cf.d_head, len = n_ + 1;
    const int64_t window = cf.window_of(layer);  // a sliding layer's query sees (n - W, n]
    const Tensor wo = model_.weights.layers[static_cast<size_t>(layer)].wo.to_f32();
    // Kept evictable positions per plan and KV head (< c; entries >= c are never evicted).
    std::vector<std::vector<std::vector<int64_t>>> kept(plans_.size());
    for (size_t p = 0; p < plans_.size(); ++p)
      for (int64_t g = 0; g < cf.n_kv_head; ++g) kept[p].push_back(kept_positions(plans_[p], layer, g, c_));
    const std::vector<float> zeros(static_cast<size_t>(len), 0.0f);  // nu: L1/L2 do not read it
    pool_.parallel_for(cf.n_head, [&](int64_t h) {
      const int64_t g = h / group;
      if (cache.size(layer, g) != len || cache.positions(layer, g).back() != n_)
        fail<InputError>("cache eval: the probe needs the full cache [0, {}]", n_);
      const MatrixD qd = Eigen::Map<const RowMatrix>(q.data() + h * d, 1, d).cast<double>();
      const MatrixD kd = Eigen::Map<const RowMatrix>(cache.keys(layer, g).data(), len, d).cast<double>();
      const std::vector<int64_t> pos{n_};
      const MatrixD attn = attention_rows(qd, kd, pos, window);  // [1, len]
      HeadTensors ht;
      ht.v = cache.values(layer, g).data();
      ht.wo = wo.data();
      ht.d_head = d;
      ht.d_model = cf.d_model;
      ht.n_head = cf.n_head;
      ht.head = h;
      ht.nu_l1 = zeros;
      ht.nu_l2 = zeros;
      const HeadEval e(ht, attn, pos, c_, NuMinReading::All, window);
      std::vector<MetricRow> rows(plans_.size());
      std::vector<HeadSelection> todo;
      for (size_t p = 0; p < plans_.size(); ++p)
        todo.push_back({kept[p][static_cast<size_t>(g)], kept[p][static_cast<size_t>(g)],
                        std::span<MetricRow>(&rows[p], 1)});
      e.metrics(todo);
      for (size_t p = 0; p < plans_.size(); ++p) {
        l1[p][static_cast<size_t>(layer * cf.n_head + h)] = static_cast<float>(rows[p][kL1]);
        l2[p][static_cast<size_t>(layer * cf.n_head + h)] = static_cast<float>(rows[p][kL2]);
      }
    });
  }

  std::vector<std::vector<float>> l1, l2;  // [plan][n_layer * n_head]

 private:
  const Model& model_;
  const std::vector<Planned>& plans_;
  int64_t c_, n_;
  ThreadPool& pool_;
};

// Along the answer (track_steps): the actual perturbation and theta_hat (docs/MATH.md §3) of
// every plan at each teacher-forced step's query over the full cache, one layer at a time:
// the steps' query rows at positions [n, n + steps) over the cache [0, n + steps).
class StepProbe {
 public:
  StepProbe(const Model& model, const std::vector<Planned>& plans, int64_t c, int64_t n, int64_t steps, ThreadPool& pool)
      : model_(model), plans_(plans), c_(c), n_(n), steps_(steps), pool_(pool) {
    const ModelConfig& cf = model.config;
    const auto size = static_cast<size_t>(steps * cf.n_layer * cf.n_head);
    l1.assign(plans.size(), std::vector<float>(size, 0.0f));
    l2 = theta_hat = theta_hat_l2 = l1;
  }

  // q: [n_head, steps, d_head] of the steps' tokens; cache holds [0, n + steps) in every head.
  void measure(int64_t layer, const Tensor& q, const KvCache& cache) {
    const ModelConfig& cf = model_.config;
    const int64_t group = cf.n_head / cf.n_kv_head, d = cf.d_head, len = n_ + steps_;
    const int64_t window = cf.window_of(layer);
    const Tensor wo = model_.weights.layers[static_cast<size_t>(layer)].wo.to_f32();
    Tensor k, v;
    cache_rows(cache, layer, len, k, v);
    const ValueNorms nu = value_norms(v, wo, cf.n_head, {}, {.l1 = true, .l2 = true}, &pool_);
    std::vector<std::vector<std::vector<int64_t>>> kept(plans_.size()), stage1(plans_.size());
    for (size_t p = 0; p < plans_.size(); ++p)
      for (int64_t g = 0; g < cf.n_kv_head; ++g) {
        kept[p].push_back(kept_positions(plans_[p], layer, g, c_));
        const std::vector<std::vector<int64_t>>& s1 = plans_[p].stage1;
        stage1[p].push_back(s1.empty() ? kept[p].back() : s1[static_cast<size_t>(layer * cf.n_kv_head + g)]);
      }
    std::vector<int64_t> pos(static_cast<size_t>(steps_));
    std::iota(pos.begin(), pos.end(), n_);
    pool_.parallel_for(cf.n_head, [&](int64_t h) {
      const int64_t g = h / group;
      const MatrixD qd = Eigen::Map<const RowMatrix>(q.data() + h * steps_ * d, steps_, d).cast<double>();
      const MatrixD kd = Eigen::Map<const RowMatrix>(k.data() + g * len * d, len, d).cast<double>();
      const MatrixD attn = attention_rows(qd, kd, pos, window);  // [steps, len]
      HeadTensors ht;
      ht.v = v.data() + g * len * d;
      ht.wo = wo.data();
      ht.d_head = d;
      ht.d_model = cf.d_model;
      ht.n_head = cf.n_head;
      ht.head = h;
      ht.nu_l1 = std::span<const float>(nu.l1.data() + h * len, static_cast<size_t>(len));
      ht.nu_l2 = std::span<const float>(nu.l2.data() + h * len, static_cast<size_t>(len));
      const HeadEval e(ht, attn, pos, c_, NuMinReading::All, window);
      std::vector<MetricRow> rows(plans_.size() * static_cast<size_t>(steps_));
      std::vector<HeadSelection> todo;
      for (size_t p = 0; p < plans_.size(); ++p)
        todo.push_back({kept[p][static_cast<size_t>(g)], stage1[p][static_cast<size_t>(g)],
                        std::span<MetricRow>(rows).subspan(p * static_cast<size_t>(steps_), static_cast<size_t>(steps_))});
      e.metrics(todo);
      for (size_t p = 0; p < plans_.size(); ++p)
        for (int64_t s = 0; s < steps_; ++s) {
          const MetricRow& m = rows[p * static_cast<size_t>(steps_) + static_cast<size_t>(s)];
          const auto at = static_cast<size_t>((s * cf.n_layer + layer) * cf.n_head + h);
          l1[p][at] = static_cast<float>(m[kL1]);
          l2[p][at] = static_cast<float>(m[kL2]);
          theta_hat[p][at] = static_cast<float>(m[kThetaHat]);
          theta_hat_l2[p][at] = static_cast<float>(m[kThetaHatL2]);
        }
    });
  }

  std::vector<std::vector<float>> l1, l2, theta_hat, theta_hat_l2;  // [plan][steps * n_layer * n_head]

 private:
  const Model& model_;
  const std::vector<Planned>& plans_;
  int64_t c_, n_, steps_;
  ThreadPool& pool_;
};

double mean_of(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += v;
  return x.empty() ? 0.0 : s / static_cast<double>(x.size());
}

}  // namespace

void check_cache_eval_settings(const CacheEvalSettings& s) {
  if (s.methods.empty()) fail<UsageError>("--methods: give at least one method");
  for (const MethodSpec& m : s.methods) {
    const Kind leaf = m.leaf().kind;
    if (leaf == Kind::Oracle)
      fail<UsageError>("--methods {}: the oracle needs the evaluation queries' outputs, not available while decoding", m.name());
    if (leaf == Kind::File && s.selection_file.empty()) fail<UsageError>("--methods file needs --selection-file");
    if (leaf == Kind::DuoAttention && !s.params.duo_pattern) fail<UsageError>("--methods duoattention needs --duo-pattern");
    if (ranks_by_question(m) && s.compress_prompt)
      fail<UsageError>("--methods {}: ranks by the question's queries, which --compress prompt makes evictable; use --compress context", m.name());
  }
  if (s.budgets.empty()) fail<UsageError>("--budgets: give at least one budget");
  for (double f : s.budgets)
    if (!(f > 0 && f < 1)) fail<UsageError>("--budgets {}: a fraction in (0, 1) (1 keeps everything: that is the full cache, always evaluated)", f);
  if (s.max_new_tokens < 1) fail<UsageError>("--max-new-tokens {}: at least 1", s.max_new_tokens);
  if (s.track_steps < 0 || s.track_steps > s.max_new_tokens)
    fail<UsageError>("--track-steps {}: a number of answer tokens in [0, --max-new-tokens {}]", s.track_steps,
                     s.max_new_tokens);
}

CacheEvalResult evaluate_with_cache(Forward& fwd, const Model& model, const CacheEvalInput& input,
                                    const CacheEvalSettings& s, ThreadPool& pool) {
  const ModelConfig& cf = model.config;
  const auto n = static_cast<int64_t>(input.prompt.size());
  const std::string who = fmt::format("record \"{}\"", input.id);
  if (!s.compress_prompt && input.context_end >= n)
    fail<InputError>("{}: no question after the context (c = {} of {} tokens): with --compress context the "
                     "question is what reads the compressed cache", who, input.context_end, n);
  if (input.context_end <= 0 && !s.compress_prompt) fail<InputError>("{}: empty context", who);
  const int64_t c = s.compress_prompt ? n : input.context_end;
  if (s.params.window >= c)
    fail<InputError>("{}: --window {} is not shorter than the {} evictable tokens", who, s.params.window, c);

  CacheEvalResult result;
  result.n = n;
  result.c = c;
  result.question_start = input.context_end;

  // The selections: each method at each budget; the file method once.
  std::vector<Planned> plans;
  for (const MethodSpec& m : s.methods) {
    if (m.leaf().kind == Kind::File) {
      std::vector<int64_t> layers(static_cast<size_t>(cf.n_layer)), heads(static_cast<size_t>(cf.n_kv_head));
      std::iota(layers.begin(), layers.end(), 0);
      std::iota(heads.begin(), heads.end(), 0);
      Planned p{.method = m, .fraction = std::numeric_limits<double>::quiet_NaN(), .budget = 0,
                .plan = plan_from_selection_file(s.selection_file, c, n, layers, heads, cf.n_layer, cf.n_kv_head),
                .stage1 = {}};
      p.budget = Budget(c - p.plan.total_evicted() / (cf.n_layer * cf.n_kv_head));
      plans.push_back(std::move(p));
      continue;
    }
    for (double f : s.budgets) {
      const Budget b = budget_of_fraction(c, f);
      if (b.kept >= c) fail<InputError>("{}: budget {} keeps all {} evictable entries", who, f, c);
      plans.push_back({.method = m, .fraction = f, .budget = b, .plan = EvictionPlan::none(cf.n_layer, cf.n_kv_head, c, n),
                       .stage1 = {}});
    }
  }

  // Layer-global allocations (layer-defensivekv) need every layer's scores first: a pre-pass
  // over the evictable rows.
  std::map<Budget, std::map<int64_t, int64_t>> totals;  // budget -> layer -> kept over its KV heads
  if (std::any_of(plans.begin(), plans.end(), [](const Planned& p) { return p.method.layer_global(); })) {
    DefensiveCollector col(model.weights, cf.n_head, c, s.params, &pool);
    ForwardRequest pre;
    pre.record.qkv = true;
    pre.recorder = &col;
    fwd.run(std::span(input.prompt).first(static_cast<size_t>(c)), pre);
    for (const Planned& p : plans)
      if (p.method.layer_global()) totals[p.budget] = col.totals(p.budget);
  }

  // 1. Prefill the evictable rows into the cache; the methods that rank by them select here.
  std::vector<Planned*> in_prefill, in_question;
  for (Planned& p : plans) {
    if (p.method.leaf().kind == Kind::File) continue;
    (ranks_by_question(p.method) ? in_question : in_prefill).push_back(&p);
  }
  LayerSelector prefill_selector(model, in_prefill, c, {c - 1}, s.params, totals, pool);
  SelectingRecorder recorder(prefill_selector);
  KvCache context(cf);
  ForwardRequest prefill;
  prefill.cache = &context;
  if (!in_prefill.empty()) {
    prefill.record.qkv = true;
    prefill.recorder = &recorder;
  }
  const ForwardResult prefill_out = fwd.run(std::span(input.prompt).first(static_cast<size_t>(c)), prefill);
  const std::span<const int32_t> question = std::span(input.prompt).subspan(static_cast<size_t>(c));

  // The attn method selects inside its own question pass, layer by layer before attention.
  for (Planned* p : in_question) {
    std::vector<int64_t> rows(static_cast<size_t>(n - c));
    std::iota(rows.begin(), rows.end(), c);
    LayerSelector sel(model, {p}, c, rows, s.params, totals, pool);
    KvCache copy = context;
    CachedRequest req;
    req.before_attention = [&](int64_t layer, const Tensor& q_new, const Tensor&, const Tensor&, KvCache& cache) {
      Tensor q({cf.n_head, n, cf.d_head}), k, v;  // rows < c of q are not read
      for (int64_t h = 0; h < cf.n_head; ++h)
        std::copy_n(q_new.data() + h * (n - c) * cf.d_head, (n - c) * cf.d_head, q.data() + (h * n + c) * cf.d_head);
      cache_rows(cache, layer, n, k, v);
      sel.select_layer(layer, q, k, v);
      for (int64_t g = 0; g < cf.n_kv_head; ++g) cache.evict(layer, g, p->plan.at(layer, g));
    };
    fwd.run_cached(question, copy, req);
  }

  const int32_t eos = model.tokenizer && !s.ignore_eos ? model.tokenizer->eos_id() : -1;
  const auto vocab = static_cast<size_t>(cf.vocab);
  // Feeds the question (with --compress context) and the answer, then decodes: one run.
  // `first_logits` gets the logits of the first row that reads the cache's evictions.
  const auto run_over = [&](KvCache& cache, CacheEvalRun& run, std::vector<float>& first_logits,
                            const CachedRequest& probe) {
    std::vector<float> last;  // [vocab] the prompt's last row
    if (s.compress_prompt) {
      last.assign(prefill_out.logits.span().begin(), prefill_out.logits.span().end());
    } else {
      const ForwardResult q_out = fwd.run_cached(question, cache);
      last.assign(q_out.logits.span().begin(), q_out.logits.span().end());
    }
    if (!input.answer_ids.empty()) {
      double logp = log_prob(last, input.answer_ids[0]);
      if (input.answer_ids.size() > 1) {
        CachedRequest forced;
        forced.logit_rows.resize(input.answer_ids.size() - 1);
        std::iota(forced.logit_rows.begin(), forced.logit_rows.end(), 0);
        const ForwardResult a = fwd.run_cached(std::span(input.answer_ids).first(input.answer_ids.size() - 1), cache, forced);
        for (size_t t = 1; t < input.answer_ids.size(); ++t)
          logp += log_prob(a.logits.span().subspan((t - 1) * vocab, vocab), input.answer_ids[t]);
        cache.truncate(n);
      }
      run.logp_answer = logp;
    }
    // The full cache's first token at position n, fed over this cache: the probe's query, and
    // with --compress prompt the first row that reads the evictions.
    if (result.first_token < 0) result.first_token = greedy_token(last);  // the full cache runs first
    if (s.compress_prompt || probe.before_attention) {
      const std::vector<int32_t> one{result.first_token};
      const ForwardResult step = fwd.run_cached(one, cache, probe);
      if (s.compress_prompt) first_logits.assign(step.logits.span().begin(), step.logits.span().end());
      cache.truncate(n);
    }
    if (!s.compress_prompt) first_logits = last;
    run.first_row = s.compress_prompt ? n : n - 1;
    DecodeOptions opts;
    opts.max_new_tokens = s.max_new_tokens;
    opts.eos_id = eos;
    opts.stop_strings = s.stop_strings;
    opts.tokenizer = model.tokenizer.get();
    run.decoded = greedy_decode(fwd, cache, last, opts);
  };

  // 2. The full cache, with the probe at the first decoded token.
  std::vector<float> full_first;
  CachedRequest forced_steps;  // step 4: every row's logits
  ForwardResult full_steps;    // [steps, vocab] the full cache's along the answer
  {
    FirstTokenProbe probe(model, plans, c, n, pool);
    CachedRequest req;
    req.before_attention = [&](int64_t layer, const Tensor& q, const Tensor&, const Tensor&, KvCache& cache) {
      probe.measure(layer, q, cache);
    };
    CacheEvalRun& full = result.full;
    full.method = "full";
    full.budget = c;
    // What each layer holds for the first reader at c: all of [0, c), or on a sliding layer
    // only its window's part (the entries a compressed cache's selections choose among).
    full.kept_per_head.clear();
    for (int64_t l = 0; l < cf.n_layer; ++l) {
      LayerRequest held;
      held.c = c;
      held.window = cf.window_of(l);
      held.first_reader = c;
      const int64_t kept = c - held_start(held);
      full.kept_per_head.insert(full.kept_per_head.end(), static_cast<size_t>(cf.n_kv_head), kept);
      full.kept_entries += kept * cf.n_kv_head;
    }
    KvCache cache = context;
    run_over(cache, full, full_first, req);
    if (s.track_steps > 0) {
      const size_t steps = std::min(static_cast<size_t>(s.track_steps), full.decoded.tokens.size());
      result.step_tokens.assign(full.decoded.tokens.begin(), full.decoded.tokens.begin() + static_cast<ptrdiff_t>(steps));
      forced_steps.logit_rows.resize(steps);
      std::iota(forced_steps.logit_rows.begin(), forced_steps.logit_rows.end(), 0);
    }
    full.first = next_token(full_first, full_first);
    full.first_logits = full_first;
    full.plan = EvictionPlan::none(cf.n_layer, cf.n_kv_head, c, n);
    for (size_t p = 0; p < plans.size(); ++p) {
      CacheEvalRun run;
      run.method = plans[p].method.name();
      run.fraction = plans[p].fraction;
      run.budget = plans[p].budget.kept;
      run.l1 = std::move(probe.l1[p]);
      run.l2 = std::move(probe.l2[p]);
      run.mean_l1 = mean_of(run.l1);
      run.mean_l2 = mean_of(run.l2);
      result.runs.push_back(std::move(run));
    }
    // 4. Along the answer: the full cache's answer teacher-forced over the full cache, the
    // probe at every step (and below over each compressed cache).
    if (!result.step_tokens.empty()) {
      StepProbe step_probe(model, plans, c, n, static_cast<int64_t>(result.step_tokens.size()), pool);
      CachedRequest step_req = forced_steps;
      step_req.before_attention = [&](int64_t layer, const Tensor& q, const Tensor&, const Tensor&, KvCache& kv) {
        step_probe.measure(layer, q, kv);
      };
      cache.truncate(n);
      full_steps = fwd.run_cached(result.step_tokens, cache, step_req);
      for (size_t p = 0; p < plans.size(); ++p) {
        CacheEvalRun& run = result.runs[p];
        run.step_l1 = std::move(step_probe.l1[p]);
        run.step_l2 = std::move(step_probe.l2[p]);
        run.step_theta_hat = std::move(step_probe.theta_hat[p]);
        run.step_theta_hat_l2 = std::move(step_probe.theta_hat_l2[p]);
      }
    }
  }

  // 3. Each selection over its compressed cache.
  for (size_t p = 0; p < plans.size(); ++p) {
    CacheEvalRun& run = result.runs[p];
    KvCache cache = context;
    run.kept_per_head.assign(static_cast<size_t>(cf.n_layer * cf.n_kv_head), 0);
    for (int64_t l = 0; l < cf.n_layer; ++l)
      for (int64_t g = 0; g < cf.n_kv_head; ++g) {
        cache.evict(l, g, plans[p].plan.at(l, g));
        run.kept_per_head[static_cast<size_t>(l * cf.n_kv_head + g)] = cache.size(l, g);
        run.kept_entries += cache.size(l, g);
      }
    run_over(cache, run, run.first_logits, {});
    run.first = next_token(full_first, run.first_logits);
    run.plan = plans[p].plan;
    if (!result.step_tokens.empty()) {
      cache.truncate(n);
      const ForwardResult forced = fwd.run_cached(result.step_tokens, cache, forced_steps);
      for (size_t t = 0; t < result.step_tokens.size(); ++t)
        run.step_next.push_back(next_token(full_steps.logits.span().subspan(t * vocab, vocab),
                                           forced.logits.span().subspan(t * vocab, vocab)));
    }
  }
  return result;
}

}  // namespace ckv
