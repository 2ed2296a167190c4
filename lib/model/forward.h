#pragma once
// The decoder forward pass of the families of model/family.h (docs/MODELS.md "Architectures"),
// fp32, with recording and attention-mask intervention. A layer is: RMSNorm, q/k/v
// projections (+ biases), per-head q/k RMSNorm (qwen3, gemma3), RoPE over the rotary dims
// (longrope's factors and scale for phi3; gemma3's sliding layers their own base), causal
// attention (within the sliding window on the config's sliding layers), o_proj, (post-norm,
// gemma3), residual; RMSNorm, gated MLP (SiLU or GELU-tanh; or a mixture of SiLU-gated experts:
// ops/moe.h), (post-norm), residual. Embeddings times the config's scale, final logits
// soft-capped where it sets a cap. It calls ops only, in one execution context
// (ops/context.h) made from ForwardOptions when the Forward is built, and never branches on
// the device. Only the CPU runs it: a CUDA device is refused at construction (the kernels
// exist, but the pass's KV cache, recordings and masks are host-side and the device path has
// not been verified on a GPU).
//
//   Forward fwd(model, {.threads = 2});
//   ForwardRequest req;
//   req.record.qkv = true;                 // post-RoPE Q/K/V of every layer
//   req.record.attn_rows = {seq - 1};      // attention probabilities of the last query
//   req.recorder = &my_recorder;           // receives them layer by layer
//   req.mask[3].push_back({.kv_head = 1, .q_begin = 10, .q_end = seq, .keys = {0, 5}});
//   ForwardResult res = fwd.run(tokens, req);   // res.logits [1, vocab] for the last row
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/recorder.h"
#include "model/weights.h"
#include "ops/attention.h"
#include "ops/context.h"
#include "ops/linear.h"
#include "ops/rope.h"

namespace ckv {

struct ForwardOptions {
  Device device = Device::CPU;  // where the ops run (the CLI's --device); only the CPU here
  int device_index = 0;         // cuda:N
  int threads = 1;           // worker threads for every op (the CLI's --threads)
  int64_t query_block = 64;  // query rows per attention task; results do not depend on it
  ComputeDType compute = ComputeDType::F32;  // the linear layers' arithmetic (--compute-dtype)
};

struct ForwardRequest {
  RecordRequest record;
  Recorder* recorder = nullptr;  // required when record is not empty
  // Additive attention-logit mask by layer: each span adds `value` (default -inf) to the
  // logits of (rows [q_begin, q_end), keys) for every query head of KV head kv_head.
  // Applied inside the blocked attention; nothing n x n is built.
  std::map<int64_t, std::vector<AttentionMaskSpan>> mask;
  // Optional per-layer mask source, called once per layer after Q/K/V (post-RoPE; after
  // on_qkv) and before attention, with that layer's entries of `mask` (a copy) to extend:
  // what a compressor that selects from each layer's own keys needs (ckv mask --method).
  // q: [n_head, seq, d_head], k, v: [n_kv_head, seq, d_head].
  std::function<void(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v,
                     std::vector<AttentionMaskSpan>& spans)>
      layer_mask;
  std::vector<int64_t> logit_rows;  // [r_logits] rows whose logits are returned; empty = last
  // When set, an empty cache (next_position() 0) that receives every layer's K/V of the
  // sequence as this pass computes them: a prefill that also records, and that decoding
  // (run_cached) continues from.
  KvCache* cache = nullptr;
};

// A run over a KV cache (Forward::run_cached): the new tokens are appended to the cache at
// positions [cache.next_position(), +n) and attend to what the cache holds.
struct CachedRequest {
  std::vector<int64_t> logit_rows;  // rows of the new tokens (0 = the first) whose logits are
                                    // returned; empty = the last
  // Called per layer after the new rows' Q/K/V (post-RoPE) are computed and their K/V
  // appended to the cache, before the attention reads the cache: what selects and evicts
  // inside a pass (cache.keep / evict on this layer). q: [n_head, n, d_head], k, v:
  // [n_kv_head, n, d_head] of the new rows only.
  std::function<void(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v, KvCache& cache)>
      before_attention;
};

struct ForwardResult {
  std::vector<int64_t> logit_rows;  // [r_logits]
  Tensor logits;                    // [r_logits, vocab]
};

// Holds the execution context (device, thread pool, scratch) and the activations; one run
// at a time (not thread-safe). The config and weights must outlive it.
class Forward {
 public:
  // Checks every weight's shape against the config; throws FormatError naming the tensor,
  // UsageError for a device or compute dtype it cannot run on.
  Forward(const ModelConfig& config, const ModelWeights& weights, ForwardOptions options = {});
  explicit Forward(const Model& model, ForwardOptions options = {})
      : Forward(model.config, model.weights, options) {}

  // tokens: [seq] ids in [0, vocab). Throws InputError for an empty or over-long sequence,
  // ids out of range, rows or mask spans outside the sequence or model.
  ForwardResult run(std::span<const int32_t> tokens, const ForwardRequest& request = {});

  // Feeds tokens after what `cache` holds (prefill into an empty cache, a question after a
  // compressed context, one decoding step): their K/V are appended and each new row attends
  // to the cache's entries at positions up to its own. With a cache that holds every
  // position, the logits equal run()'s on the whole sequence up to float rounding (the GEMMs
  // block differently). On an exception the cache is restored to what it held before.
  // Throws InputError as run() does, and for a cache of another model's shape.
  ForwardResult run_cached(std::span<const int32_t> tokens, KvCache& cache,
                           const CachedRequest& request = {});

  const ModelConfig& config() const { return config_; }
  int threads() const { return ctx_.threads(); }
  ComputeDType compute() const { return ctx_.compute(); }
  // The context the ops run in: its device is the one that ran (provenance).
  const ExecContext& context() const { return ctx_; }

 private:
  void check_request(int64_t seq, const ForwardRequest& request) const;
  void check_tokens(std::span<const int32_t> tokens, int64_t first_position) const;
  void embed(std::span<const int32_t> tokens);
  void mlp_block(int64_t layer);
  void post_norm(const Tensor& weight);
  // The rotation table of `layer` in the pass being run (a sliding layer's own, Gemma 3).
  const RopeTable& layer_rope(int64_t layer) const;
  ForwardResult logits(std::span<const int64_t> rows);
  // Chooses (and grows) the rotation table of a pass over positions [0, end) (longrope: its
  // short or long factors, HF's choice per call); project_qkv rotates by it.
  void select_rope(int64_t end);
  // normed_ [n, d_model] -> q_, k_, v_ of the rows at positions [first_position, +n).
  void project_qkv(int64_t layer, int64_t first_position);
  void attention_block(int64_t layer, const ForwardRequest& request, bool record);
  void cached_attention_block(int64_t layer, int64_t first_position, KvCache& cache,
                              const CachedRequest& request);
  void record_head_outputs(int64_t layer, const ForwardRequest& request);
  void add_residual(int64_t layer);

  const ModelConfig& config_;
  const ModelWeights& weights_;
  ForwardOptions options_;
  ExecContext ctx_;
  std::vector<float> inv_freq_;       // [rope_dim/2]
  std::vector<float> inv_freq_long_;  // [rope_dim/2] longrope's long factors, else empty
  std::vector<float> inv_freq_local_; // [rope_dim/2] sliding layers' base (rope_local_theta), else empty
  float rope_scale_ = 1.0f;           // on cos and sin (longrope's attention factor)
  std::vector<KvHeadView> kv_views_;  // [n_kv_head] of the layer being run over a cache
  std::vector<int64_t> q_positions_;  // [n] positions of the rows being run over a cache

  // Scratch reused across layers and runs.
  Tensor resid_;                  // [seq, d_model]
  Tensor normed_;                 // [seq, d_model]
  Tensor proj_[3];                // one row chunk's q, k and v projections, [chunk, heads*d_head]
  Tensor q_, k_, v_;              // [n_head|n_kv_head, seq, d_head]
  Tensor context_;                // [seq, n_head*d_head]
  Tensor block_out_;              // [seq, d_model]
  Tensor probs_;                  // [n_head, r, seq]
  RopeTable rope_;
  RopeTable rope_long_;                 // longrope's long factors
  RopeTable rope_local_;                // sliding layers' (rope_local_theta)
  const RopeTable* pass_rope_ = nullptr;  // the table of the pass being run
};

}  // namespace ckv
