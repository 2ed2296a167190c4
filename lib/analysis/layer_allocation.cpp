#include "analysis/layer_allocation.h"

#include "analysis/bound_layer.h"
#include "analysis/value_norms.h"

namespace ckv {

DefensiveCollector::DefensiveCollector(const ModelWeights& weights, int64_t n_head, int64_t c,
                                       const SelectionParams& params, ThreadPool* pool)
    : weights_(weights), n_head_(n_head), c_(c), params_(params), pool_(pool) {}

void DefensiveCollector::on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) {
  const Tensor wo = weights_.layers.at(static_cast<size_t>(layer)).wo.to_f32();  // [d_model, n_head*d_head]
  const ValueNorms nu = value_norms(v, wo, n_head_, {}, {.l1 = true, .l2 = false}, pool_);
  const LayerTensors t{.q = &q, .k = &k, .v = &v, .wo = &wo, .nu_l1 = &nu.l1, .nu_l2 = nullptr};
  LayerRequest r;
  r.methods = {MethodSpec::parse("defensivekv")};
  r.params = params_;
  r.c = c_;
  r.eval_rows = {c_ - 1};  // selection_inputs' attn row; unused here
  add(layer, selection_inputs(t, r, false, false, pool_).defensive);
}

void DefensiveCollector::add(int64_t layer, std::shared_ptr<const DefensiveScores> scores) {
  scores_[layer] = std::move(scores);
  totals_.clear();
}

std::map<int64_t, int64_t> DefensiveCollector::totals(Budget budget) const {
  if (const auto it = totals_.find(budget); it != totals_.end()) return it->second;
  std::vector<const DefensiveScores*> layers;
  for (const auto& [l, s] : scores_) layers.push_back(s.get());
  const std::vector<int64_t> counts = layer_defensive_totals(layers, budget);
  std::map<int64_t, int64_t> out;
  size_t i = 0;
  for (const auto& [l, s] : scores_) out[l] = counts[i++];
  totals_[budget] = out;
  return out;
}

std::shared_ptr<const DefensiveScores> DefensiveCollector::scores(int64_t layer) const {
  const auto it = scores_.find(layer);
  return it == scores_.end() ? nullptr : it->second;
}

}  // namespace ckv
