#pragma once
// Layer-global allocation (Layer-DefensiveKV, defensivekv.h): the kept entries of a budget
// are shared among all layers by their scores, so every layer's scores are needed before
// any layer is selected. A pre-pass collects them: a forward pass with this recorder (or
// on_qkv called on dumped tensors, layer by layer), then totals() gives each layer's share.
// The context rows [0, c) -- all the scores read -- are the same in a masked and an
// unmasked pass (docs/MATH.md §6), so the pre-pass may be unmasked.
#include <cstdint>
#include <map>
#include <memory>

#include "analysis/defensivekv.h"
#include "model/recorder.h"
#include "model/weights.h"

namespace ckv {

class ThreadPool;

class DefensiveCollector : public Recorder {
 public:
  // Scores the context [0, c) with params (window, defensive_*) of a model with n_head
  // query heads; pool: threads for nu and the window attention (may be null).
  DefensiveCollector(const ModelWeights& weights, int64_t n_head, int64_t c, const SelectionParams& params,
                     ThreadPool* pool);
  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override;
  // Adds a layer's scores computed elsewhere.
  void add(int64_t layer, std::shared_ptr<const DefensiveScores> scores);

  // layer -> its kept entries (over its KV heads) at `budget` per KV head, from the joint
  // top budget * n_kv_head * (layers collected) over every collected layer (cached; not
  // thread-safe).
  std::map<int64_t, int64_t> totals(Budget budget) const;
  // The layer's scores (null when it was not collected).
  std::shared_ptr<const DefensiveScores> scores(int64_t layer) const;
  int64_t layer_count() const { return static_cast<int64_t>(scores_.size()); }

 private:
  const ModelWeights& weights_;
  int64_t n_head_, c_;
  SelectionParams params_;
  ThreadPool* pool_;
  std::map<int64_t, std::shared_ptr<const DefensiveScores>> scores_;
  mutable std::map<Budget, std::map<int64_t, int64_t>> totals_;  // budget -> totals(budget)
};

}  // namespace ckv
