#include "analysis/bound_layer.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
};

Dims dims_of(const LayerTensors& t) {
  Dims d{t.q->dim(0), t.k->dim(0), t.q->dim(1), t.q->dim(2), t.wo->dim(0), 0};
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

SelectionInputs selection_inputs(const LayerTensors& t, const LayerRequest& r, bool need_snapkv,
                                 bool need_h2o) {
  const Dims d = dims_of(t);
  const int64_t c = r.c;
  SelectionInputs in;
  in.c = c;
  in.n_kv_head = d.n_kv_head;
  ScoreMatrix attn = ScoreMatrix::Zero(d.n_head, c), nu(d.n_head, c);
  for (int64_t h = 0; h < d.n_head; ++h) {
    const float* k = kv_head(*t.k, d, h / d.group);
    for (int64_t p : r.eval_rows) {
      const std::vector<double> a = attention_row(q_row(t, d, h, p), k, d.d_head, p);
      for (int64_t i = 0; i < c && i <= p; ++i) attn(h, i) += a[static_cast<size_t>(i)];
    }
    for (int64_t i = 0; i < c; ++i) nu(h, i) = t.nu_l1->data()[h * d.seq + i];
  }
  attn /= static_cast<double>(r.eval_rows.size());
  in.attn = reduce_groups(attn, d.n_kv_head, r.params.gqa_reduce);
  // kvpress CriticalKVPress: the group mean of the query heads' nu (or max on request).
  in.nu = reduce_groups(nu, d.n_kv_head, r.params.gqa_reduce);

  if (need_snapkv) {
    // MATH.md §4 snapkv / kvpress SnapKVPress.score: the window's attention over the keys
    // before it, averaged over window rows, pooled, group-reduced; the window padded with
    // the layer's maximum + 1.
    const int64_t w = r.params.window;
    if (w >= c) fail<InputError>("--window {}: not shorter than the context of {} tokens", w, c);
    const int64_t prefix = c - w;
    ScoreMatrix pooled(d.n_head, prefix);
    for (int64_t h = 0; h < d.n_head; ++h) {
      Eigen::RowVectorXd mean = Eigen::RowVectorXd::Zero(prefix);
      for (int64_t p = prefix; p < c; ++p) {
        const std::vector<double> a = attention_row(q_row(t, d, h, p), kv_head(*t.k, d, h / d.group), d.d_head, p);
        for (int64_t i = 0; i < prefix; ++i) mean[i] += a[static_cast<size_t>(i)];
      }
      mean /= static_cast<double>(w);
      pooled.row(h) = pool_row(mean, r.params.kernel, r.params.pool);
    }
    const ScoreMatrix reduced = reduce_groups(pooled, d.n_kv_head, r.params.gqa_reduce);
    const double pad = (prefix > 0 ? reduced.maxCoeff() : 0.0) + 1.0;
    in.snapkv = ScoreMatrix::Constant(d.n_kv_head, c, pad);
    in.snapkv.leftCols(prefix) = reduced;
  }
  if (need_h2o) {
    // Accumulated attention of the last h2o_rows context queries (as the paper emulates H2O).
    ScoreMatrix acc = ScoreMatrix::Zero(d.n_head, c);
    const int64_t first = std::max<int64_t>(0, c - r.params.h2o_rows);
    for (int64_t h = 0; h < d.n_head; ++h)
      for (int64_t p = first; p < c; ++p) {
        const std::vector<double> a = attention_row(q_row(t, d, h, p), kv_head(*t.k, d, h / d.group), d.d_head, p);
        for (int64_t i = 0; i <= p; ++i) acc(h, i) += a[static_cast<size_t>(i)];
      }
    in.h2o = reduce_groups(acc, d.n_kv_head, r.params.gqa_reduce);
  }
  in.file_kept = r.file_kept;
  return in;
}

LayerResult analyze_layer(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool) {
  const Dims d = dims_of(t);
  const int64_t c = r.c;
  if (c <= 0 || c > d.seq) fail<InputError>("bound: context end {} outside [1, {}]", c, d.seq);
  SelectionInputs in = selection_inputs(t, r, uses(r.methods, MethodSpec::Kind::SnapKV),
                                        uses(r.methods, MethodSpec::Kind::H2O));
  const auto n_query = static_cast<int64_t>(r.eval_rows.size());
  // Evaluation attention rows, [n_head][n_query][p+1].
  std::vector<std::vector<std::vector<double>>> attn(static_cast<size_t>(d.n_head));
  for (int64_t h = 0; h < d.n_head; ++h)
    for (int64_t p : r.eval_rows)
      attn[static_cast<size_t>(h)].push_back(attention_row(q_row(t, d, h, p), kv_head(*t.k, d, h / d.group), d.d_head, p));

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
      const int64_t picks = *std::max_element(r.budgets.begin(), r.budgets.end());
      in.oracle_rank = ScoreMatrix::Constant(d.n_kv_head, c, -1.0);
      auto one = [&](int64_t g) {
        OracleInput oi{c, kv_head(*t.v, d, g), t.wo->data(), d.d_head, d.d_model, d.n_head, {}};
        for (int64_t h = g * d.group; h < (g + 1) * d.group; ++h)
          for (int64_t qi = 0; qi < n_query; ++qi)
            oi.queries.push_back({h, attn[static_cast<size_t>(h)][static_cast<size_t>(qi)]});
        const std::vector<int64_t> order = greedy_order(oi, picks);
        for (size_t i = 0; i < order.size(); ++i) in.oracle_rank(g, order[i]) = static_cast<double>(picks - static_cast<int64_t>(i));
      };
      if (pool) pool->parallel_for(d.n_kv_head, one);
      else for (int64_t g = 0; g < d.n_kv_head; ++g) one(g);
    }
  }

  // Selections, [method, budget].
  std::vector<Selection> selections;
  out.kept_mask.assign(static_cast<size_t>(out.n_method * out.n_budget * d.n_kv_head * c), 0);
  out.kept_count.assign(static_cast<size_t>(out.n_method * out.n_budget * d.n_kv_head), 0);
  for (int64_t m = 0; m < out.n_method; ++m)
    for (int64_t b = 0; b < out.n_budget; ++b) {
      const MethodSpec& method = r.methods[static_cast<size_t>(m)];
      const bool skip = method.leaf().kind == MethodSpec::Kind::Oracle && out.oracle_skipped;
      selections.push_back(skip ? Selection{} : select(method, in, r.budgets[static_cast<size_t>(b)], r.params));
      const Selection& s = selections.back();
      for (int64_t g = 0; g < d.n_kv_head && !skip; ++g) {
        const int64_t base = (m * out.n_budget + b) * d.n_kv_head + g;
        out.kept_count[static_cast<size_t>(base)] = static_cast<int64_t>(s.kept[static_cast<size_t>(g)].size());
        for (int64_t i : s.kept[static_cast<size_t>(g)]) out.kept_mask[static_cast<size_t>(base * c + i)] = 1;
      }
    }

  out.metrics.assign(static_cast<size_t>(out.n_method * out.n_budget * d.n_head * n_query), MetricRow{});
  auto one_head = [&](int64_t h) {
    const int64_t g = h / d.group;
    for (int64_t m = 0; m < out.n_method; ++m)
      for (int64_t b = 0; b < out.n_budget; ++b) {
        const Selection& s = selections[static_cast<size_t>(m * out.n_budget + b)];
        for (int64_t qi = 0; qi < n_query; ++qi) {
          MetricRow& row = out.metrics[static_cast<size_t>(((m * out.n_budget + b) * d.n_head + h) * n_query + qi)];
          if (s.kept.empty()) {
            row.fill(std::numeric_limits<double>::quiet_NaN());
            continue;
          }
          const std::vector<double>& a = attn[static_cast<size_t>(h)][static_cast<size_t>(qi)];
          const auto n = a.size();
          std::vector<char> keep(n, 0), stage1(n, 0);
          for (size_t i = static_cast<size_t>(c); i < n; ++i) keep[i] = stage1[i] = 1;
          for (int64_t i : s.kept[static_cast<size_t>(g)]) if (static_cast<size_t>(i) < n) keep[static_cast<size_t>(i)] = 1;
          for (int64_t i : s.stage1[static_cast<size_t>(g)]) if (static_cast<size_t>(i) < n) stage1[static_cast<size_t>(i)] = 1;
          HeadQueryInput hq;
          hq.attn = a;
          hq.keep = keep;
          hq.stage1 = stage1;
          hq.nu_l1 = std::span<const float>(t.nu_l1->data() + h * d.seq, static_cast<size_t>(d.seq));
          hq.nu_l2 = std::span<const float>(t.nu_l2->data() + h * d.seq, static_cast<size_t>(d.seq));
          hq.v = kv_head(*t.v, d, g);
          hq.wo = t.wo->data();
          hq.d_head = d.d_head;
          hq.d_model = d.d_model;
          hq.n_head = d.n_head;
          hq.head = h;
          hq.kept = static_cast<int64_t>(s.kept[static_cast<size_t>(g)].size());
          row = perturbation(hq);
        }
      }
  };
  if (pool) pool->parallel_for(d.n_head, one_head);
  else for (int64_t h = 0; h < d.n_head; ++h) one_head(h);
  return out;
}

}  // namespace ckv
