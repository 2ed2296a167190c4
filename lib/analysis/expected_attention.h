#pragma once
// ExpectedAttention (Devoto et al., "Expected Attention: KV cache compression by estimating
// attention from future queries distribution", arXiv 2510.00636) as kvpress 0.5.5's
// ExpectedAttentionPress.score defines it (kvpress/presses/expected_attention_press.py),
// for one layer with context [0, c), sinks s (--ea-sinks, 4), T future positions
// (--ea-future, 512), head dimension d:
//
//   * the pre-RoPE queries q_p of the context positions p in [s, c) (ckv holds post-RoPE
//     q: the rotation of position p is undone with the forward pass's own cos/sin table);
//     per query head h: mean mu_h and covariance Sigma_h = (1/(c - s)) sum (q_p - mu)(q_p - mu)^T;
//   * the rotation averaged over the next T positions, R = mean_{t in [c, c + T)} R_t
//     (R_t the RoPE rotation of position t, HF's rotate_half layout);
//     mu_h <- R mu_h, Sigma_h <- R Sigma_h R^T;
//   * for the post-RoPE keys k_j, j in [s, c): z_h(j) = k_j.mu_h / sqrt(d)
//     + k_j^T Sigma_h k_j / (2 d) (the covariance term unless --ea-no-covariance);
//     softmax over j; mean over the KV head's query heads (always the mean);
//   * times ||v_j||_2 after adding epsilon (--ea-epsilon, 0; unless --ea-no-vnorm);
//   * the sinks [0, s) score the layer's maximum + 1 (kept whenever the budget allows).
//
// The scores feed top-k selection like snapkv's, so adakv(...) and criticalkv(...) compose.
#include <cstdint>
#include <span>

#include "analysis/selection.h"
#include "core/tensor.h"

namespace ckv {

class ThreadPool;

// Scores [n_kv_head, c] of one layer. q: [n_head, seq, d] post-RoPE, k: [n_kv_head, seq, d]
// post-RoPE, v: [n_kv_head, seq, d] (seq >= c); inv_freq: the model's RoPE frequencies
// (rope_inv_freq, [d/2]). Throws InputError when c <= sinks or inv_freq does not fit d.
ScoreMatrix expected_attention_scores(const Tensor& q, const Tensor& k, const Tensor& v, int64_t c,
                                      std::span<const float> inv_freq, const SelectionParams& params,
                                      ThreadPool* pool = nullptr);

}  // namespace ckv
