#pragma once
// PyramidKV's per-layer budget (Cai et al., arXiv 2406.02069), as kvpress 0.5.5's
// PyramidKVPress.get_layer_budget defines it (kvpress/presses/pyramidkv_press.py): lower
// layers keep more, higher layers less, the mean over layers being the uniform budget.
// With B = c (1 - r), kvpress's q_len * (1 - compression_ratio) unrounded (Budget: for a
// fraction f, r = 1 - f in floating point; for a count --keep N, B = N), window w, beta:
//
//   min = B / beta,  max = 2 B - min;  if max >= c - w: max = c - w, min = 2 B - max;
//   unless c >= max >= min >= w (else: the uniform budget max(1, round(B))),
//   b_l = round(max - l (max - min) / (n_layer - 1))      (Python round: half to even)
//
// The scores are snapkv's (--window, --pool, --kernel; kvpress: 64, avg, 5). ckv applies
// the layer budget to every composition (criticalkv(pyramidkv), adakv(pyramidkv));
// kvpress's CriticalKVPress(PyramidKVPress) would select with its own uniform budget.
#include <cstdint>

#include "analysis/selection.h"

namespace ckv {

// Kept entries per KV head of layer `layer` of n_layer for a uniform budget over c: the
// pyramid is built on budget.per_head(c), kvpress's unrounded q_len * (1 - compression_ratio).
int64_t pyramid_budget(int64_t layer, int64_t n_layer, int64_t c, Budget budget, const SelectionParams& params);

}  // namespace ckv
