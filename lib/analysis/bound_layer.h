#pragma once
// One layer of `ckv bound` / `ckv check`: from the layer's post-RoPE Q/K/V, o_proj and nu,
// the scores of every selection method (docs/MATH.md §4), the selections per KV head at every
// budget, and the perturbation metrics (docs/MATH.md §3) per query head and evaluation query.
// Nothing n x n is built: only the attention rows a method needs (evaluation queries,
// the snapkv window, the h2o rows) are computed, per query head, at most 64 rows (or the
// evaluation queries) per GEMM. The evaluation rows are computed once and shared by the
// selection scores and every method's and budget's metrics (HeadEval).
//
// The evictable entries are the context [0, c); the evaluation queries are positions
// >= c (the question) or, with no question, the last token. The attention of an
// evaluation query is its full causal softmax over [0, p]; the "attn" method ranks by its
// mean over the evaluation queries.
//
// A sliding-window layer (LayerRequest::window = W > 0; docs/MODELS.md "Sliding-window
// attention") holds, for its evaluation queries, only the entries [h, c) with
// h = max(0, p_first - W + 1), p_first the first evaluation query (or
// LayerRequest::first_reader): a query p attends to
// (p - W, p], and the cache drops what no later query sees. Every method selects among the
// held entries only, as on a context of c - h entries (scores, windows and budgets over
// them; streaming's sinks are the first held entries), and a budget of b entries keeps
// min(b, c - h): a layer that already holds no more than b entries loses nothing. The
// attention rows are the window's. Kept masks and positions stay in [0, c), the entries
// before h never kept.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "analysis/perturbation.h"
#include "analysis/selection.h"
#include "core/tensor.h"

namespace ckv {

class ThreadPool;

struct LayerTensors {
  const Tensor* q = nullptr;      // [n_head, seq, d_head] post-RoPE
  const Tensor* k = nullptr;      // [n_kv_head, seq, d_head] post-RoPE
  const Tensor* v = nullptr;      // [n_kv_head, seq, d_head]
  const Tensor* wo = nullptr;     // [d_model, n_head*d_head] o_proj.weight
  const Tensor* nu_l1 = nullptr;  // [n_head, seq]
  const Tensor* nu_l2 = nullptr;  // [n_head, seq]
};

struct LayerRequest {
  std::vector<MethodSpec> methods;
  std::vector<Budget> budgets;     // kept entries per KV head, each in [1, c] (with its keep share)
  SelectionParams params;
  int64_t c = 0;                   // context end
  int64_t layer = 0, n_layer = 0;  // the layer's depth (pyramidkv's budget)
  std::vector<int64_t> eval_rows;  // [n_query] evaluation query positions
  bool oracle = false;             // compute the greedy order when a method needs it
  int64_t oracle_max_n = 1024;     // skip the oracle (NaN metrics) when c is larger
  NuMinReading nu_min = NuMinReading::All;  // theta_rel's nu_min (--nu-min)
  std::vector<std::vector<int64_t>> file_kept;  // [n_kv_head][*] for the "file" method
  // Layer-global methods (MethodSpec::layer_global): budget -> this layer's total kept
  // entries over its KV heads, from a pre-pass over all layers (layer_defensive_totals).
  std::map<Budget, int64_t> layer_totals;
  // The layer's DefensiveKV scores when a pre-pass computed them already (else computed here).
  std::shared_ptr<const DefensiveScores> defensive;
  // The model's RoPE frequencies (rope_inv_freq): expectedattention undoes the queries'
  // rotation and averages it over future positions. Required when a method uses it.
  std::shared_ptr<const std::vector<float>> rope_inv_freq;
  int64_t window = 0;  // the layer's sliding window (ModelConfig::window_of); 0: full attention
  // The first query that reads the compressed cache, whose window decides what a sliding
  // layer holds; -1: the first evaluation query (`ckv eval` sets c: the question's first
  // token or the first decoded one).
  int64_t first_reader = -1;
};

struct LayerResult {
  int64_t n_method = 0, n_budget = 0, n_head = 0, n_query = 0, n_kv_head = 0, c = 0;
  std::vector<MetricRow> metrics;   // [method, budget, head, query]
  std::vector<uint8_t> kept_mask;   // [method, budget, kv_head, c]
  std::vector<int64_t> kept_count;  // [method, budget, kv_head]
  bool oracle_skipped = false;

  const MetricRow& at(int64_t m, int64_t b, int64_t h, int64_t q) const {
    return metrics[static_cast<size_t>(((m * n_budget + b) * n_head + h) * n_query + q)];
  }
};

// The evaluation rows of a prompt of n tokens whose context ends at c.
std::vector<int64_t> evaluation_rows(int64_t c, int64_t n);

// Scores of every leaf method (attn, snapkv, h2o, nu; defensivekv's and expectedattention's
// when request.methods use them) for the layer. Throws InputError when
// the snapkv window is not shorter than the context. With a pool, heads run in parallel.
SelectionInputs selection_inputs(const LayerTensors& t, const LayerRequest& request,
                                 bool need_snapkv, bool need_h2o, ThreadPool* pool = nullptr);

LayerResult analyze_layer(const LayerTensors& t, const LayerRequest& request,
                          ThreadPool* pool = nullptr);

// The first entry a sliding layer still holds for the request's evaluation queries (0 for a
// full-attention layer, or a window that reaches position 0).
int64_t held_start(const LayerRequest& request);

// Every method's selection at every budget, [method * n_budget + budget], as analyze_layer
// makes them (held entries only on a sliding layer), positions in [0, c): what `ckv mask`
// and `ckv eval` evict.
std::vector<Selection> layer_selections(const LayerTensors& t, const LayerRequest& request,
                                        ThreadPool* pool = nullptr);

}  // namespace ckv
