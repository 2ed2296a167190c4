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

// knorm: kvpress 0.5.5 KnormPress (Devoto et al., "A Simple and Effective L2 Norm-Based
// Strategy for KV Cache Compression", arXiv 2406.11430): score(j) = -||k_j||, the keys of
// smallest norm kept. RoPE rotates without changing a norm, so post-RoPE keys score as pre-RoPE.
ScoreMatrix knorm_layer_scores(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool);

// keydiff: kvpress 0.5.5 KeyDiffPress (KeyDiff, arXiv 2504.15364, without its block-wise
// iteration): anchor a = mean_j k_j / max(||k_j||, 1e-12) over the KV head's entries [0, c),
// score(j) = -cos(k_j, a) = -k_j.a / (max(||k_j||, 1e-8) max(||a||, 1e-8)) on post-RoPE keys:
// the keys least like the average key kept.
ScoreMatrix keydiff_layer_scores(const LayerTensors& t, const LayerRequest& r, ThreadPool* pool);

}  // namespace ckv
