#pragma once
// The scores of the selection methods computed from their layer's tensors alone: each is
// the LayerScoreFn of its method's line in CKV_SELECTION_METHODS (selection.h), and nothing
// else names it. Each gives [n_kv_head, c] over the evictable context [0, c) of the request
// (on a sliding layer, over the entries it holds: bound_layer.h), from post-RoPE q/k and v.
#include "analysis/bound_layer.h"
#include "analysis/selection.h"

namespace ckv {

// expectedattention: expected_attention_scores (expected_attention.h) with the layer's own
// RoPE frequencies (LayerRequest::rope_inv_freq). Throws InputError when they are missing.
ScoreMatrix expected_attention_layer_scores(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool);

}  // namespace ckv
