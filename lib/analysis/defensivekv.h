#pragma once
// DefensiveKV and Layer-DefensiveKV (Feng et al., "Taming the Fragility of KV Cache
// Eviction in LLM Inference", ICLR 2026, arXiv 2510.13334), reproducing the official
// presses of github.com/FFY0/DefensiveKV rule for rule (kvpress/presses/
// efficient_defensivekv_press.py, EfficientDefensiveKVPress, and
// efficient_layer_defensivekv_press.py, EfficientLayerDefensiveKVPress; their torch path):
//
//   * the window's last w context queries attend to all c keys (full causal softmax); the
//     rows' part on the prefix [0, c - w) is average-pooled (kernel 5, zero padding,
//     divided by the kernel), each pooled row rescaled to the unpooled row's sum;
//   * defensive aggregation: the maximum over the KV head's query heads and the window
//     rows, clamped below at its own mean over the prefix;
//   * times the value-norm factor: the group mean of the query heads' L1 nu, normalised
//     across KV heads at each position (official), or across positions (--defensive-nu
//     positions, the evident intent);
//   * stage 1 (CriticalKV's, by attention mass): the entries of the highest window-mean
//     attention (normalised over the prefix) until their cumulative mass reaches
//     0.9 - window share (the 0.9 is --defensive-mass), capped at int((c - w)(1 - r) - w)
//     (Budget: the keep share 1 - r of a fraction, b / c for a count; a negative cap is a
//     Python slice: all but its last |cap| entries); the window share is the mean mass on the
//     32 positions just before the window (official), or on the window itself
//     (--defensive-share window, the intent); stage-1 entries and the window score the
//     layer maximum M of the scores;
//   * DefensiveKV: the top int(c (1 - r) n_kv_head) of the layer jointly (AdaKV without
//     safeguard; b * n_kv_head for a count); Layer-DefensiveKV: the top
//     int(c (1 - r) n_kv_head n_layer) over all layers jointly gives each layer its total
//     (layer_defensive_totals), then that layer's joint top.
//
// Ties go to the lower layer, KV head, position (torch.topk leaves them unspecified).
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "analysis/perturbation.h"
#include "analysis/selection.h"

namespace ckv {

// The budget-independent part of one layer's DefensiveKV scores.
struct DefensiveScores {
  int64_t c = 0, window = 0, n_kv_head = 0;
  ScoreMatrix scores;  // [n_kv_head, c] defensive x nu factor on the prefix, M on the window
  double max = 0;      // M: the maximum of the prefix scores over the layer
  std::vector<std::vector<int64_t>> order;  // [n_kv_head][c - w] prefix by decreasing attention
  std::vector<int64_t> count;               // [n_kv_head] stage-1 entries before the cap
  double window_share = 0;                  // the share subtracted from the mass threshold (0.9)
};

// One query head's window rows folded (defensive_fold), before the group reduction.
struct DefensiveHeadFold {
  Eigen::RowVectorXd max_pooled;  // [c - w] max over rows of the rescaled pooled rows
  Eigen::RowVectorXd attn_sum;    // [c - w] sum over rows of the attention on the prefix
  double share_sum = 0;           // sum over rows of the window share
};

// Folds attention rows (query positions in the window, keys [0, >= c)) into `acc`.
void defensive_fold(const MatrixD& rows, int64_t c, const SelectionParams& params, DefensiveHeadFold& acc);

// From every query head's fold ([n_head], window rows complete) and the query heads' L1 nu
// ([n_head, >= c]), the layer's scores.
std::shared_ptr<const DefensiveScores> defensive_combine(const std::vector<DefensiveHeadFold>& heads,
                                                         const ScoreMatrix& nu_heads, int64_t n_kv_head,
                                                         int64_t c, const SelectionParams& params);

// The scores at budget b (kept per KV head): stage-1 entries raised to M; their positions
// per KV head in *stage1 when given.
ScoreMatrix defensive_budget_scores(const DefensiveScores& s, Budget budget,
                                    std::vector<std::vector<int64_t>>* stage1);

// DefensiveKV's kept entries of a layer over its n_kv_head KV heads: the official
// int(c (1 - r) n_kv_head), b * n_kv_head for a count.
int64_t defensive_layer_total(Budget budget, int64_t c, int64_t n_kv_head);

// The joint top `total` of the layer's budget scores, as a Selection (stage1: stage 1).
Selection select_defensive(const DefensiveScores& s, Budget budget, int64_t total);

// Layer-DefensiveKV's allocation: each layer's share of the top int(c (1 - r) n_kv_head
// n_layer) entries (b * n_kv_head * n_layer for a count) over all layers' budget scores
// ([layer] totals, in the order given; n_layer is the number of layers given).
std::vector<int64_t> layer_defensive_totals(const std::vector<const DefensiveScores*>& layers, Budget budget);

}  // namespace ckv
