#pragma once
// Measurements of a propagated eviction (docs/MATH.md §2, §6): a forward pass without the mask
// and one with it, both captured at the evaluation rows (positions >= c), compared layer by
// layer. Nothing n x n is kept: attention is captured for the evaluation rows only.
//
//   MaskCapture full(model, eval_rows, c, nullptr, {.nu = true});
//   fwd.run(tokens, full.request());                 // unmasked
//   MaskCapture masked(model, eval_rows, c, &plan, {.verify_physical = true});
//   ForwardRequest req = masked.request(); req.mask = plan.to_mask(seq);
//   fwd.run(tokens, req);
//   RunMetrics m = compare_runs(full, masked, plan, {.sinks = 4});
#include <cstdint>
#include <span>
#include <vector>

#include "analysis/mask_plan.h"
#include "core/tensor.h"
#include "model/forward.h"

namespace ckv {

class ThreadPool;

struct CaptureOptions {
  bool nu = false;               // L1 nu of the context entries (the unmasked run's)
  bool verify_physical = false;  // recompute each eval row over physically reduced K/V
  ThreadPool* pool = nullptr;
};

// A recorder keeping, per layer, what the metrics need at the evaluation rows.
class MaskCapture : public Recorder {
 public:
  // plan: the eviction applied in this run (null or empty for the unmasked run). The
  // weights must outlive the capture.
  MaskCapture(const ModelConfig& config, const ModelWeights& weights, std::vector<int64_t> eval_rows,
              int64_t c, const EvictionPlan* plan, CaptureOptions options = {});
  // The recording part of a forward request (add the mask and logit rows yourself).
  ForwardRequest request();

  void on_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v) override;
  void on_attention(int64_t layer, std::span<const int64_t> rows, const Tensor& probs) override;
  void on_head_outputs(int64_t layer, std::span<const int64_t> rows, const Tensor& out) override;
  void on_residual(int64_t layer, const Tensor& resid) override;

  int64_t n_layer() const { return config_.n_layer; }
  int64_t n_eval() const { return static_cast<int64_t>(eval_rows_.size()); }
  int64_t c() const { return c_; }
  const std::vector<int64_t>& eval_rows() const { return eval_rows_; }
  int64_t group() const { return config_.n_head / config_.n_kv_head; }

  std::vector<Tensor> resid;      // [n_layer] x [n_eval, d_model]
  std::vector<Tensor> head_out;   // [n_layer] x [n_head, n_eval, d_model]
  std::vector<Tensor> attn;       // [n_layer] x [n_head, n_eval, seq] recorded (masked: A')
  std::vector<Tensor> retained;   // [n_layer] x [n_head, n_eval] S from this run's own logits
  std::vector<Tensor> nu;         // [n_layer] x [n_head, c] when asked
  // --verify-physical: largest |masked output - output over the physically reduced K/V|
  // over every layer, head and eval row (W_h-projected, d_model space), and the largest
  // |output| it is relative to.
  double physical_max_diff = 0, physical_max_abs = 0;
  // [n_layer] max |A'_j - N_j A_j / S| over heads and rows, A this run's unmasked softmax
  // (Theorem 3.2 checked in the run itself; 0 for an unmasked run).
  std::vector<double> renorm_err;

 private:
  const ModelConfig& config_;
  const ModelWeights& weights_;
  std::vector<int64_t> eval_rows_;
  int64_t c_;
  const EvictionPlan* plan_;
  CaptureOptions options_;
  // The current layer's, kept until its head outputs arrive: q_ [n_head, n_eval, d_head] at
  // the evaluation rows, k_ [n_kv_head, seq, d_head], v_ likewise (--verify-physical only).
  Tensor q_, k_, v_;
};

struct MaskMetricOptions {
  int64_t sinks = 4;  // sink positions [0, sinks)
};

// One layer of a masked run against the unmasked one. Per-row vectors are [n_eval];
// per-head ones [n_head * n_eval] (head-major).
struct LayerMaskMetrics {
  std::vector<double> resid_l1, resid_l2;        // ‖r' - r‖ per eval row
  std::vector<double> head_l1, head_l2;          // ‖o'_h - o_h‖ (W_h-projected)
  std::vector<double> retained;                  // S, from the masked run's own logits
  std::vector<double> sink_full, sink_raw, sink_corrected;        // mass on [0, sinks)
  std::vector<double> content_full, content_raw, content_corrected;  // mass on [sinks, c)
  std::vector<double> delta_theta;               // [n_head] mean over rows Σ_{evicted} A_i nu_i
  double renorm_max_err = 0;  // MaskCapture::renorm_err of the masked run
  double resid_l1_mean() const;
  double resid_l2_mean() const;
};

struct RunMetrics {
  std::vector<LayerMaskMetrics> layers;  // [n_layer]
  double delta_theta_total = 0;          // Σ over layers and heads
};

// Compares a masked capture with the unmasked one (which must carry nu).
RunMetrics compare_runs(const MaskCapture& full, const MaskCapture& masked, const EvictionPlan& plan,
                        const MaskMetricOptions& options);

// Next-token distribution metrics of one logits row (each [vocab]).
struct NextToken {
  double kl = 0;         // KL(full ‖ masked), nats
  bool top1_agree = false;
  int32_t top1_full = 0, top1_masked = 0;
};
NextToken next_token(std::span<const float> full, std::span<const float> masked);

// log p(token | row) from one logits row.
double log_prob(std::span<const float> logits, int32_t token);

// Value-aware sink score over the evaluation rows of the unmasked run, [n_head, c] per
// layer: s_attn(j) = Σ_q A_qj, s_val(j) = s_attn(j) nu_j (docs/MATH.md §6).
struct SinkScores {
  std::vector<Tensor> s_attn, s_val;  // [n_layer] x [n_head, c]
};
SinkScores sink_scores(const MaskCapture& full);

// Per-position first-order eviction weight w_j = Σ_{layer, query head of a selected KV
// head} mean_q A_qj nu_j over [0, c): Delta_theta(S) = Σ_{j∈S} w_j for a span evicted in
// exactly those layers and KV heads.
std::vector<double> delta_theta_weights(const MaskCapture& full, const std::vector<int64_t>& layers,
                                        const std::vector<int64_t>& kv_heads);

}  // namespace ckv
