#pragma once
// OBCache (Gu et al., "OBCache: Optimal Brain KV Cache Pruning for Efficient Long-Context
// LLM Inference", arXiv 2510.07651) on SnapKV's observation window, the seed's "SnapKV with
// OBCache" (joint variant by default; docs/BOUND.md "OBCache" states the source). For one
// query head, window rows r in [c - w, c) with full causal attention A_r, logits
// z_r = q_r.k / sqrt(d), head output o_r = sum_j A_rj v_j, and prefix keys i < c - w, the
// Optimal-Brain-Damage estimate of ||Delta o_r||^2 when token i is pruned, summed over r:
//
//   value:  A_ri^2 ||v_i||^2                       (v_i -> 0)
//   key:    (A_ri z_ri)^2 ||v_i - o_r||^2           (z_ri -> 0, first order)
//   joint:  value + key + 2 A_ri^2 z_ri (||v_i||^2 - v_i.o_r)     (both: the cross term)
//
// The per-head sums are then pooled and group-reduced exactly as snapkv's window attention
// (--pool, --kernel, --gqa-reduce), and the window scores the layer's maximum + 1.
#include <cstdint>

#include <Eigen/Core>

#include "analysis/perturbation.h"
#include "analysis/selection.h"

namespace ckv {

// The summed saliency of the prefix [0, c - w) of one query head. attn: [w, >= c] the
// window rows' attention (rows c - w .. c - 1); logits: [w, c - w] their logits on the
// prefix; v: [>= c, d] the head's values.
Eigen::RowVectorXd obcache_window_scores(const MatrixD& attn, const MatrixD& logits, const MatrixD& v, int64_t c,
                                         ObcacheScore kind);

}  // namespace ckv
