#pragma once
// The mixture-of-experts MLP of qwen3moe and mixtral (docs/MODELS.md "Mixture of experts"):
// a router picks n_used experts per token from the softmax of its logits, and the token's
// output is the sum of those experts' SiLU-gated MLPs (ops/mlp.h) weighted by their router
// probabilities, renormalised to sum 1 when `normalize` (HF's norm_topk_prob; Mixtral always,
// which is the softmax over the top-k logits).
//
//   std::vector<MoeExpert> experts = ...;  // the layer's n_expert expert MLPs
//   moe_mlp(ctx, x, router, experts, /*n_used=*/8, /*normalize=*/true, y);
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "io/weight_matrix.h"
#include "ops/context.h"

namespace ckv {

// One expert: w_gate, w_up [d_ff_expert, d_model], w_down [d_model, d_ff_expert].
struct MoeExpert {
  const WeightMatrix* w_gate;
  const WeightMatrix* w_up;
  const WeightMatrix* w_down;
};

// The router's choice for `rows` tokens: row r's experts expert[r*n_used + j], j = 0..n_used-1,
// by decreasing probability (the lower index first among equal ones), with their weights.
struct MoeRouting {
  int64_t n_used = 0;
  std::vector<int32_t> expert;  // [rows * n_used]
  std::vector<float> weight;    // [rows * n_used]
};

// logits: [rows, n_expert] router logits -> each row's softmax (float32), its n_used largest
// probabilities, divided by their sum when `normalize` (as HF's Qwen3MoeSparseMoeBlock and
// MixtralSparseMoeBlock do). Throws InputError for n_used outside [1, n_expert], FormatError
// for a logit that is not finite.
MoeRouting moe_route(const Tensor& logits, int64_t n_used, bool normalize);

// x: [rows, d_model]; router: [n_expert, d_model] in its stored dtype; experts: [n_expert];
// y: [rows, d_model] (resized, must not alias x). Each expert runs once on the rows routed
// to it (one gated_mlp over those rows gathered, so prefill makes one GEMM per expert and
// projection), and the rows' outputs add up in expert order: the result does not depend on
// the thread count.
void moe_mlp(ExecContext& ctx, const Tensor& x, const WeightMatrix& router, std::span<const MoeExpert> experts,
             int64_t n_used, bool normalize, Tensor& y);

}  // namespace ckv
