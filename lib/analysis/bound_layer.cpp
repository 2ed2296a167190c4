// GCC 12 reports false -Wmaybe-uninitialized inside its AVX-512 intrinsics when inlining
// Eigen products (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "analysis/bound_layer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <span>

#include "analysis/defensivekv.h"
#include "analysis/obcache.h"
#include "analysis/oracle.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace ckv {

namespace {

bool uses(const std::vector<MethodSpec>& methods, MethodSpec::Kind kind) {
  return std::any_of(methods.begin(), methods.end(),
                     [&](const MethodSpec& m) { return m.leaf().kind == kind; });
}

struct Dims {
  int64_t n_head, n_kv_head, seq, d_head, d_model, group;
  int64_t window;  // the layer's sliding window, 0: none
};

Dims dims_of(const LayerTensors& t, int64_t window) {
  Dims d{t.q->dim(0), t.k->dim(0), t.q->dim(1), t.q->dim(2), t.wo->dim(0), 0, window};
  d.group = d.n_head / d.n_kv_head;
  return d;
}

const float* q_row(const LayerTensors& t, const Dims& d, int64_t h, int64_t p) {
  return t.q->data() + (h * d.seq + p) * d.d_head;
}
const float* kv_head(const Tensor& x, const Dims& d, int64_t g) {
  return x.data() + g * d.seq * d.d_head;
}

}  // namespace

std::vector<int64_t> evaluation_rows(int64_t c, int64_t n) {
  std::vector<int64_t> rows;
  for (int64_t p = c; p < n; ++p) rows.push_back(p);
  if (rows.empty()) rows.push_back(n - 1);
  return rows;
}

namespace {

constexpr int64_t kRowChunk = 64;  // attention rows per GEMM for the window and h2o sums

// Keys of KV head g in double, [len, d_head]: shared by the rows of one query head.
MatrixD keys_double(const LayerTensors& t, const Dims& d, int64_t g, int64_t len) {
  return ConstMatrixMap(kv_head(*t.k, d, g), len, d.d_head).cast<double>();
}

// Attention rows of query head h at positions `rows` (attention_rows), [rows, max+1].
MatrixD head_attention(const LayerTensors& t, const Dims& d, const MatrixD& kd, int64_t h,
                       std::span<const int64_t> rows) {
  MatrixD q(static_cast<int64_t>(rows.size()), d.d_head);  // [rows, d_head]
  for (size_t i = 0; i < rows.size(); ++i)
    q.row(static_cast<int64_t>(i)) = ConstMatrixMap(q_row(t, d, h, rows[i]), 1, d.d_head).cast<double>();
  return attention_rows(q, kd, rows, d.window);
}

// Σ over the query rows [first, last) of head h's attention, keys [0, cols).
Eigen::RowVectorXd summed_attention(const LayerTensors& t, const Dims& d, const MatrixD& kd,
                                    int64_t h, int64_t first, int64_t last, int64_t cols) {
  Eigen::RowVectorXd sum = Eigen::RowVectorXd::Zero(cols);
  std::vector<int64_t> rows;
  for (int64_t r0 = first; r0 < last; r0 += kRowChunk) {
    rows.clear();
    for (int64_t p = r0; p < std::min(last, r0 + kRowChunk); ++p) rows.push_back(p);
    const MatrixD a = head_attention(t, d, kd, h, rows);
    const int64_t w = std::min(cols, a.cols());
    sum.head(w) += a.leftCols(w).colwise().sum();
  }
  return sum;
}

void for_each(ThreadPool* pool, int64_t count, const std::function<void(int64_t)>& task) {
  if (pool) pool->parallel_for(count, task);
  else for (int64_t i = 0; i < count; ++i) task(i);
}

// selection_inputs, also handing back each query head's evaluation attention rows
// ([n_head] of [n_query, max(eval_rows)+1]) when `eval` is given.
SelectionInputs layer_inputs(const LayerTensors& t, const LayerRequest& r, bool need_snapkv,
                             bool need_h2o, ThreadPool* pool, std::vector<MatrixD>* eval) {
  const Dims d = dims_of(t, r.window);
  const int64_t c = r.c;
  const int64_t w = r.params.window, prefix = c - w;
  if (need_snapkv && w >= c) fail<InputError>("--window {}: not shorter than the context of {} tokens", w, c);
  if (r.eval_rows.empty()) fail<InputError>("bound: no evaluation query");
  const int64_t len = std::max(c, *std::max_element(r.eval_rows.begin(), r.eval_rows.end()) + 1);
  const auto n_query = static_cast<double>(r.eval_rows.size());
  ScoreMatrix attn(d.n_head, c), nu(d.n_head, c), pooled, acc;
  if (need_snapkv) pooled.resize(d.n_head, prefix);
  if (need_h2o) acc.resize(d.n_head, c);
  const bool need_defensive = !r.defensive && (uses(r.methods, MethodSpec::Kind::DefensiveKV) ||
                                               uses(r.methods, MethodSpec::Kind::LayerDefensiveKV));
  if (need_defensive && w >= c) fail<InputError>("--window {}: not shorter than the context of {} tokens", w, c);
  std::vector<DefensiveHeadFold> folds(need_defensive ? static_cast<size_t>(d.n_head) : 0);
  const bool need_obcache = uses(r.methods, MethodSpec::Kind::OBCache);
  if (need_obcache && w >= c) fail<InputError>("--window {}: not shorter than the context of {} tokens", w, c);
  ScoreMatrix obc;
  if (need_obcache) obc.resize(d.n_head, prefix);
  if (eval) eval->assign(static_cast<size_t>(d.n_head), MatrixD());
  for_each(pool, d.n_head, [&](int64_t h) {
    const MatrixD kd = keys_double(t, d, h / d.group, len);  // [len, d_head]
    MatrixD a = head_attention(t, d, kd, h, r.eval_rows);     // [n_query, max(eval_rows)+1]
    attn.row(h) = a.leftCols(c).colwise().sum() / n_query;
    if (eval) (*eval)[static_cast<size_t>(h)] = std::move(a);
    for (int64_t i = 0; i < c; ++i) nu(h, i) = t.nu_l1->data()[h * d.seq + i];
    // docs/MATH.md §4 snapkv / kvpress SnapKVPress.score: the window's attention over the keys
    // before it, averaged over window rows, pooled.
    if (need_snapkv)
      pooled.row(h) = pool_row(summed_attention(t, d, kd, h, prefix, c, prefix) / static_cast<double>(w),
                               r.params.kernel, r.params.pool);
    // h2o: accumulated attention of the last h2o_rows context queries (as the paper emulates H2O).
    if (need_h2o)
      acc.row(h) = summed_attention(t, d, kd, h, std::max<int64_t>(0, c - r.params.h2o_rows), c, c);
    // obcache.h: the window rows' output-aware saliency, pooled as snapkv's attention.
    if (need_obcache) {
      std::vector<int64_t> rows;
      for (int64_t p = prefix; p < c; ++p) rows.push_back(p);
      const MatrixD window_attn = head_attention(t, d, kd, h, rows);  // [w, c]
      MatrixD q(w, d.d_head);
      for (int64_t i = 0; i < w; ++i) q.row(i) = ConstMatrixMap(q_row(t, d, h, prefix + i), 1, d.d_head).cast<double>();
      const MatrixD logits = q * kd.topRows(prefix).transpose() / std::sqrt(static_cast<double>(d.d_head));
      const MatrixD vd = ConstMatrixMap(kv_head(*t.v, d, h / d.group), c, d.d_head).cast<double>();
      obc.row(h) = pool_row(obcache_window_scores(window_attn, logits, vd, c, r.params.obcache_score),
                            r.params.kernel, r.params.pool);
    }
    // defensivekv.h: the window rows one by one (pooled per row), not their sum.
    if (need_defensive) {
      std::vector<int64_t> rows;
      for (int64_t r0 = prefix; r0 < c; r0 += kRowChunk) {
        rows.clear();
        for (int64_t p = r0; p < std::min(c, r0 + kRowChunk); ++p) rows.push_back(p);
        defensive_fold(head_attention(t, d, kd, h, rows), c, r.params, folds[static_cast<size_t>(h)]);
      }
    }
  });
  SelectionInputs in;
  in.c = c;
  in.n_kv_head = d.n_kv_head;
  in.n_head = d.n_head;
  in.attn = reduce_groups(attn, d.n_kv_head, r.params.gqa_reduce);
  // kvpress CriticalKVPress: the group mean of the query heads' nu (or max on request).
  in.nu = reduce_groups(nu, d.n_kv_head, r.params.gqa_reduce);
  if (need_snapkv) {
    // Group-reduced; the window padded with the layer's maximum + 1.
    const ScoreMatrix reduced = reduce_groups(pooled, d.n_kv_head, r.params.gqa_reduce);
    const double pad = (prefix > 0 ? reduced.maxCoeff() : 0.0) + 1.0;
    in.snapkv = ScoreMatrix::Constant(d.n_kv_head, c, pad);
    in.snapkv.leftCols(prefix) = reduced;
  }
  if (need_h2o) in.h2o = reduce_groups(acc, d.n_kv_head, r.params.gqa_reduce);
  if (need_obcache) {
    const ScoreMatrix reduced = reduce_groups(obc, d.n_kv_head, r.params.gqa_reduce);
    in.obcache = ScoreMatrix::Constant(d.n_kv_head, c, (prefix > 0 ? reduced.maxCoeff() : 0.0) + 1.0);
    in.obcache.leftCols(prefix) = reduced;
  }
  in.file_kept = r.file_kept;
  in.layer = r.layer;
  in.n_layer = r.n_layer;
  // defensivekv's value factor is the group mean of the L1 nu whatever --gqa-reduce says.
  in.defensive = need_defensive ? defensive_combine(folds, nu, d.n_kv_head, c, r.params) : r.defensive;
  in.layer_totals = r.layer_totals;
  // The methods scored from the layer's tensors alone (their LayerScoreFn, layer_scores.h).
  for (const MethodSpec& m : r.methods) {
    const MethodInfo& info = method_info(m.leaf().kind);
    if (info.layer_scores != nullptr && !in.layer_scores.contains(info.kind))
      in.layer_scores[info.kind] = info.layer_scores(t, r, pool);
  }
  return in;
}

// A sliding layer's held part [h, seq) (held_start): copies of its rows from h on, and the
// request in their coordinates (c - h held context entries, evaluation rows - h, budgets
// of at most c - h entries, the selection file's positions - h).
struct HeldPart {
  int64_t start = 0;
  Tensor q, k, v, nu_l1, nu_l2;
  LayerTensors t;
  LayerRequest r;
};

// Rows [start, dim(1)) of every slice x[a] of x [a, seq, ...]: [a, seq - start, ...].
Tensor rows_from(const Tensor& x, int64_t start) {
  std::vector<int64_t> shape = x.shape();
  const int64_t seq = shape[1], inner = x.numel() / (shape[0] * seq);
  shape[1] = seq - start;
  Tensor out(shape);
  for (int64_t a = 0; a < shape[0]; ++a)
    std::copy_n(x.data() + (a * seq + start) * inner, shape[1] * inner, out.data() + a * shape[1] * inner);
  return out;
}

std::unique_ptr<HeldPart> held_part(const LayerTensors& t, const LayerRequest& r) {
  const int64_t h = held_start(r);
  if (h == 0) return nullptr;
  if (h >= r.c)
    fail<InputError>("layer {}: its sliding window of {} keys holds no context entry for the queries that read "
                     "it (the window starts at {}, the context ends at {}); leave the layer out (--layers)",
                     r.layer, r.window, h, r.c);
  for (const MethodSpec& m : r.methods)
    if (m.layer_global())
      fail<InputError>("layer {}: {} shares one budget over all layers, which is not defined with sliding-window "
                       "layers that hold only their window (docs/MODELS.md \"Sliding-window attention\")",
                       r.layer, m.name());
  for (const MethodSpec& m : r.methods)
    if (m.has(kAbsolutePositions))
      fail<InputError>("layer {}: {} reads absolute positions (its sinks, its RoPE angles), which a sliding-window "
                       "layer holding only [{}, {}) no longer has; leave the sliding layers out (--layers)",
                       r.layer, m.leaf().name(), h, r.c);
  auto part = std::make_unique<HeldPart>();
  part->start = h;
  part->q = rows_from(*t.q, h);
  part->k = rows_from(*t.k, h);
  part->v = rows_from(*t.v, h);
  if (t.nu_l1) part->nu_l1 = rows_from(*t.nu_l1, h);
  if (t.nu_l2) part->nu_l2 = rows_from(*t.nu_l2, h);
  part->t = {&part->q, &part->k, &part->v, t.wo, t.nu_l1 ? &part->nu_l1 : nullptr, t.nu_l2 ? &part->nu_l2 : nullptr};
  LayerRequest& pr = part->r;
  pr = r;
  pr.c = r.c - h;
  for (int64_t& p : pr.eval_rows) p -= h;
  if (pr.first_reader >= 0) pr.first_reader -= h;
  for (Budget& b : pr.budgets) b = Budget(std::min(b.kept, pr.c));
  for (std::vector<int64_t>& head : pr.file_kept) {
    std::vector<int64_t> held;
    for (int64_t i : head)
      if (i >= h) held.push_back(i - h);
    head = std::move(held);
  }
  return part;
}

// Positions of a held part's selections back in the layer's [0, c).
void shift(std::vector<Selection>& selections, int64_t start) {
  for (Selection& s : selections)
    for (auto* sets : {&s.kept, &s.stage1})
      for (std::vector<int64_t>& head : *sets)
        for (int64_t& i : head) i += start;
}

// Every (method, budget) selection of the layer from its scores; `skipped` ones (the
// oracle beyond --oracle-max-n) stay empty.
std::vector<Selection> select_all(const SelectionInputs& in, const LayerRequest& r, const std::vector<char>& skipped,
                                  ThreadPool* pool) {
  const auto n_budget = static_cast<int64_t>(r.budgets.size());
  const auto n_sel = static_cast<int64_t>(r.methods.size()) * n_budget;
  std::vector<Selection> selections(static_cast<size_t>(n_sel));
  for_each(pool, n_sel, [&](int64_t mb) {
    if (!skipped.empty() && skipped[static_cast<size_t>(mb)]) return;
    selections[static_cast<size_t>(mb)] = select(r.methods[static_cast<size_t>(mb / n_budget)], in,
                                                 r.budgets[static_cast<size_t>(mb % n_budget)], r.params);
  });
  return selections;
}

bool uses_snapkv_scores(const std::vector<MethodSpec>& methods) {
  return std::any_of(methods.begin(), methods.end(), [](const MethodSpec& m) { return m.uses_snapkv(); });
}

// analyze_layer over a held part's coordinates, widened back to [0, c).
LayerResult widen(LayerResult part, int64_t start, int64_t c) {
  const int64_t held = part.c;
  std::vector<uint8_t> mask(static_cast<size_t>(part.n_method * part.n_budget * part.n_kv_head * c), 0);
  for (int64_t row = 0; row < part.n_method * part.n_budget * part.n_kv_head; ++row)
    std::copy_n(part.kept_mask.begin() + row * held, held, mask.begin() + row * c + start);
  part.kept_mask = std::move(mask);
  part.c = c;
  return part;
}

}  // namespace

int64_t held_start(const LayerRequest& r) {
  if (r.window <= 0 || (r.eval_rows.empty() && r.first_reader < 0)) return 0;
  const int64_t reader =
      r.first_reader >= 0 ? r.first_reader : *std::min_element(r.eval_rows.begin(), r.eval_rows.end());
  return std::min(r.c, window_start(reader, r.window));
}

SelectionInputs selection_inputs(const LayerTensors& t, const LayerRequest& r, bool need_snapkv,
                                 bool need_h2o, ThreadPool* pool) {
  if (held_start(r) > 0)
    fail<InputError>("layer {}: the scores of a sliding-window layer are over its held entries (layer_selections)",
                     r.layer);
  return layer_inputs(t, r, need_snapkv, need_h2o, pool, nullptr);
}

std::vector<Selection> layer_selections(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool) {
  if (const auto part = held_part(t, r)) {
    std::vector<Selection> out = layer_selections(part->t, part->r, pool);
    shift(out, part->start);
    return out;
  }
  const SelectionInputs in =
      layer_inputs(t, r, uses_snapkv_scores(r.methods), uses(r.methods, MethodSpec::Kind::H2O), pool, nullptr);
  return select_all(in, r, {}, pool);
}

LayerResult analyze_layer(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool) {
  if (const auto part = held_part(t, r)) return widen(analyze_layer(part->t, part->r, pool), part->start, r.c);
  const Dims d = dims_of(t, r.window);
  const int64_t c = r.c;
  if (c <= 0 || c > d.seq) fail<InputError>("bound: context end {} outside [1, {}]", c, d.seq);
  std::vector<MatrixD> attn;  // [n_head] of [n_query, max(eval_rows)+1]
  SelectionInputs in = layer_inputs(t, r, uses_snapkv_scores(r.methods), uses(r.methods, MethodSpec::Kind::H2O),
                                    pool, &attn);
  const auto n_query = static_cast<int64_t>(r.eval_rows.size());

  LayerResult out;
  out.n_method = static_cast<int64_t>(r.methods.size());
  out.n_budget = static_cast<int64_t>(r.budgets.size());
  out.n_head = d.n_head;
  out.n_query = n_query;
  out.n_kv_head = d.n_kv_head;
  out.c = c;

  const bool want_oracle = uses(r.methods, MethodSpec::Kind::Oracle);
  if (want_oracle) {
    if (c > r.oracle_max_n) {
      out.oracle_skipped = true;
    } else {
      const int64_t picks = std::max_element(r.budgets.begin(), r.budgets.end())->kept;
      in.oracle_rank = ScoreMatrix::Constant(d.n_kv_head, c, -1.0);
      for_each(pool, d.n_kv_head, [&](int64_t g) {
        OracleInput oi{c, kv_head(*t.v, d, g), t.wo->data(), d.d_head, d.d_model, d.n_head, {}};
        for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h)
          for (int64_t qi = 0; qi < n_query; ++qi) {
            const int64_t p = r.eval_rows[static_cast<size_t>(qi)];
            const auto row = attn[static_cast<size_t>(h)].row(qi).head(p + 1);
            oi.queries.push_back({h, std::vector<double>(row.begin(), row.end())});
          }
        const std::vector<int64_t> order = greedy_order(oi, picks);
        for (size_t i = 0; i < order.size(); ++i)
          in.oracle_rank(g, order[i]) = static_cast<double>(picks - static_cast<int64_t>(i));
      });
    }
  }

  // Selections, [method, budget]; each is independent of the others.
  const int64_t n_sel = out.n_method * out.n_budget;
  std::vector<char> skipped(static_cast<size_t>(n_sel), 0);
  for (int64_t mb = 0; mb < n_sel; ++mb)
    skipped[static_cast<size_t>(mb)] =
        r.methods[static_cast<size_t>(mb / out.n_budget)].leaf().kind == MethodSpec::Kind::Oracle && out.oracle_skipped;
  const std::vector<Selection> selections = select_all(in, r, skipped, pool);
  out.kept_mask.assign(static_cast<size_t>(n_sel * d.n_kv_head * c), 0);
  out.kept_count.assign(static_cast<size_t>(n_sel * d.n_kv_head), 0);
  for (int64_t mb = 0; mb < n_sel; ++mb) {
    if (skipped[static_cast<size_t>(mb)]) continue;
    const Selection& s = selections[static_cast<size_t>(mb)];
    for (int64_t g = 0; g < d.n_kv_head; ++g) {
      const int64_t base = mb * d.n_kv_head + g;
      out.kept_count[static_cast<size_t>(base)] = static_cast<int64_t>(s.kept[static_cast<size_t>(g)].size());
      for (int64_t i : s.kept[static_cast<size_t>(g)]) out.kept_mask[static_cast<size_t>(base * c + i)] = 1;
    }
  }

  out.metrics.assign(static_cast<size_t>(n_sel * d.n_head * n_query), MetricRow{});
  for_each(pool, d.n_head, [&](int64_t h) {
    const int64_t g = h / d.group;
    HeadTensors ht;
    ht.v = kv_head(*t.v, d, g);
    ht.wo = t.wo->data();
    ht.d_head = d.d_head;
    ht.d_model = d.d_model;
    ht.n_head = d.n_head;
    ht.head = h;
    ht.nu_l1 = std::span<const float>(t.nu_l1->data() + h * d.seq, static_cast<size_t>(d.seq));
    ht.nu_l2 = std::span<const float>(t.nu_l2->data() + h * d.seq, static_cast<size_t>(d.seq));
    const HeadEval e(ht, attn[static_cast<size_t>(h)], r.eval_rows, c, r.nu_min, r.window);
    attn[static_cast<size_t>(h)] = MatrixD();  // HeadEval holds its own copy
    std::vector<HeadSelection> todo;
    for (int64_t mb = 0; mb < n_sel; ++mb) {
      const std::span<MetricRow> rows(out.metrics.data() + (mb * d.n_head + h) * n_query,
                                      static_cast<size_t>(n_query));
      if (skipped[static_cast<size_t>(mb)]) {
        for (MetricRow& row : rows) row.fill(std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      const Selection& s = selections[static_cast<size_t>(mb)];
      todo.push_back({s.kept[static_cast<size_t>(g)], s.stage1[static_cast<size_t>(g)], rows});
    }
    e.metrics(todo);
  });
  return out;
}

}  // namespace ckv
