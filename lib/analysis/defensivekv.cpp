#include "analysis/defensivekv.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace ckv {

void defensive_fold(const MatrixD& rows, int64_t c, const SelectionParams& params, DefensiveHeadFold& acc) {
  const int64_t w = params.window, prefix = c - w;
  if (acc.max_pooled.size() != prefix) {
    acc.max_pooled = Eigen::RowVectorXd::Constant(prefix, -std::numeric_limits<double>::infinity());
    acc.attn_sum = Eigen::RowVectorXd::Zero(prefix);
    acc.share_sum = 0;
  }
  for (int64_t r = 0; r < rows.rows(); ++r) {
    const int64_t cols = std::min<int64_t>(rows.cols(), c);
    const Eigen::RowVectorXd a = rows.row(r).head(std::min(prefix, cols));  // [<= prefix]
    Eigen::RowVectorXd full = Eigen::RowVectorXd::Zero(prefix);
    full.head(a.size()) = a;
    // The window share: official, the mass on the w positions before the window (the
    // last w of the prefix, a Python slice [-w:]); intent, the mass on the window itself.
    if (params.defensive_share == DefensiveShare::BeforeWindow) {
      const int64_t from = std::max<int64_t>(0, prefix - w);
      acc.share_sum += full.segment(from, prefix - from).sum();
    } else if (cols > prefix) {
      acc.share_sum += rows.row(r).segment(prefix, cols - prefix).sum();
    }
    // avg_pool1d (zero padding counted), rescaled to the row's own sum on the prefix.
    const Eigen::RowVectorXd pooled = pool_row(full, params.defensive_kernel, PoolKind::Avg);
    const Eigen::RowVectorXd rescaled = pooled / pooled.sum() * full.sum();
    acc.max_pooled = acc.max_pooled.cwiseMax(rescaled);
    acc.attn_sum += full;
  }
}

std::shared_ptr<const DefensiveScores> defensive_combine(const std::vector<DefensiveHeadFold>& heads,
                                                         const ScoreMatrix& nu_heads, int64_t n_kv_head,
                                                         int64_t c, const SelectionParams& params) {
  const auto n_head = static_cast<int64_t>(heads.size());
  const int64_t group = n_head / n_kv_head, w = params.window, prefix = c - w;
  auto out = std::make_shared<DefensiveScores>();
  out->c = c;
  out->window = w;
  out->n_kv_head = n_kv_head;
  ScoreMatrix defensive(n_kv_head, prefix), ave(n_kv_head, prefix), nu(n_kv_head, prefix);
  double share = 0;
  for (int64_t g = 0; g < n_kv_head; ++g) {
    Eigen::RowVectorXd mx = heads[static_cast<size_t>(g * group)].max_pooled;
    Eigen::RowVectorXd sum = Eigen::RowVectorXd::Zero(prefix), nu_sum = Eigen::RowVectorXd::Zero(prefix);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const DefensiveHeadFold& f = heads[static_cast<size_t>(h)];
      if (f.max_pooled.size() != prefix) fail<InputError>("defensivekv: head {} has no window rows", h);
      mx = mx.cwiseMax(f.max_pooled);
      sum += f.attn_sum;
      nu_sum += nu_heads.row(h).head(prefix);
      share += f.share_sum;
    }
    // Defensive aggregation: the max over group and window, clamped below at its mean.
    defensive.row(g) = mx.cwiseMax(mx.mean());
    ave.row(g) = sum / static_cast<double>(group * w);
    nu.row(g) = nu_sum / static_cast<double>(group);
  }
  out->window_share = share / static_cast<double>(n_head * w);
  // The value-norm factor: official, normalised across KV heads per position; intent,
  // across the positions of each KV head.
  ScoreMatrix factor(n_kv_head, prefix);
  if (params.defensive_nu == DefensiveNu::AcrossHeads) {
    const Eigen::RowVectorXd total = nu.colwise().sum();
    for (int64_t g = 0; g < n_kv_head; ++g) factor.row(g) = nu.row(g).cwiseQuotient(total);
  } else {
    for (int64_t g = 0; g < n_kv_head; ++g) factor.row(g) = nu.row(g) / nu.row(g).sum();
  }
  const ScoreMatrix base = defensive.cwiseProduct(factor);
  out->max = base.maxCoeff();
  out->scores = ScoreMatrix::Constant(n_kv_head, c, out->max);
  out->scores.leftCols(prefix) = base;
  // Stage 1: decreasing normalised window attention until the mass reaches the threshold
  // (the first index where the cumulative sum is >= it; 0 when none is, as torch.argmax
  // of an all-false mask).
  const double threshold = params.defensive_mass - out->window_share;  // official: 0.9 - share
  out->order.resize(static_cast<size_t>(n_kv_head));
  out->count.assign(static_cast<size_t>(n_kv_head), 0);
  for (int64_t g = 0; g < n_kv_head; ++g) {
    const Eigen::RowVectorXd norm = ave.row(g) / ave.row(g).sum();
    std::vector<int64_t>& order = out->order[static_cast<size_t>(g)];
    order = top_k(norm, prefix);
    double cum = 0;
    for (int64_t i = 0; i < prefix; ++i) {
      cum += norm[order[static_cast<size_t>(i)]];
      if (cum >= threshold) {
        out->count[static_cast<size_t>(g)] = i;
        break;
      }
    }
  }
  return out;
}

ScoreMatrix defensive_budget_scores(const DefensiveScores& s, Budget budget,
                                    std::vector<std::vector<int64_t>>* stage1) {
  const int64_t prefix = s.c - s.window;
  // int(q_len * (1 - compression_ratio) - window_size) with q_len the prefix length and
  // 1 - compression_ratio the keep share (b / c for a count); Python's int() truncates
  // toward zero.
  const double kept_prefix = budget.is_count() ? static_cast<double>(prefix) * static_cast<double>(budget.kept) /
                                                     static_cast<double>(s.c)
                                               : static_cast<double>(prefix) * budget.keep_share;
  const auto cap = static_cast<int64_t>(kept_prefix - static_cast<double>(s.window));
  ScoreMatrix out = s.scores;
  if (stage1) stage1->assign(static_cast<size_t>(s.n_kv_head), {});
  for (int64_t g = 0; g < s.n_kv_head; ++g) {
    int64_t k = std::min(s.count[static_cast<size_t>(g)], cap);
    if (k < 0) k = std::max<int64_t>(0, prefix + k);  // sorted_indices[:k], k < 0
    const std::vector<int64_t>& order = s.order[static_cast<size_t>(g)];
    for (int64_t i = 0; i < k; ++i) out(g, order[static_cast<size_t>(i)]) = s.max;
    if (stage1) stage1->at(static_cast<size_t>(g)).assign(order.begin(), order.begin() + k);
  }
  return out;
}

int64_t defensive_layer_total(Budget budget, int64_t c, int64_t n_kv_head) {
  if (budget.is_count()) return std::min(budget.kept, c) * n_kv_head;
  // int(q_len * (1 - compression_ratio) * num_key_value_heads), evaluated left to right.
  const double total = static_cast<double>(c) * budget.keep_share * static_cast<double>(n_kv_head);
  return std::clamp<int64_t>(static_cast<int64_t>(total), 0, c * n_kv_head);
}

Selection select_defensive(const DefensiveScores& s, Budget budget, int64_t total) {
  Selection out;
  const ScoreMatrix scores = defensive_budget_scores(s, budget, &out.stage1);
  const Eigen::Map<const Eigen::RowVectorXd> flat(scores.data(), scores.size());
  out.kept.assign(static_cast<size_t>(s.n_kv_head), {});
  for (int64_t i : top_k(flat, total)) out.kept[static_cast<size_t>(i / s.c)].push_back(i % s.c);
  for (auto& kept : out.kept) std::sort(kept.begin(), kept.end());
  return out;
}

std::vector<int64_t> layer_defensive_totals(const std::vector<const DefensiveScores*>& layers, Budget budget) {
  struct Entry {
    double score;
    int64_t layer, index;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    const ScoreMatrix scores = defensive_budget_scores(*layers[l], budget, nullptr);
    if (budget.is_count()) total += std::min(budget.kept, layers[l]->c) * layers[l]->n_kv_head;
    for (int64_t i = 0; i < scores.size(); ++i) entries.push_back({scores.data()[i], static_cast<int64_t>(l), i});
  }
  if (!budget.is_count() && !layers.empty()) {
    // int(q_len * (1 - compression_ratio) * num_key_value_heads * num_hidden_layers), left
    // to right, over the layers given (every layer of one prompt has the same c).
    const double t = static_cast<double>(layers.front()->c) * budget.keep_share *
                     static_cast<double>(layers.front()->n_kv_head) * static_cast<double>(layers.size());
    total = std::max<int64_t>(0, static_cast<int64_t>(t));
  }
  total = std::min<int64_t>(total, static_cast<int64_t>(entries.size()));
  std::nth_element(entries.begin(), entries.begin() + total, entries.end(), [](const Entry& a, const Entry& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.layer != b.layer) return a.layer < b.layer;
    return a.index < b.index;
  });
  std::vector<int64_t> totals(layers.size(), 0);
  for (int64_t i = 0; i < total; ++i) ++totals[static_cast<size_t>(entries[static_cast<size_t>(i)].layer)];
  return totals;
}

}  // namespace ckv
