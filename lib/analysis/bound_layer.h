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

}  // namespace ckv
