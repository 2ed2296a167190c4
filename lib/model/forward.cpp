#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/rope_freq.h"
#include "ops/linear.h"
#include "ops/mlp.h"
#include "ops/moe.h"
#include "ops/rms_norm.h"

namespace ckv {

namespace {

template <typename Weight>  // Tensor or WeightMatrix
void expect_shape(const Weight& t, std::vector<int64_t> shape, const std::string& name) {
  if (t.shape() != shape)
    fail<FormatError>("weight {} has shape {}, the config needs [{}]", name, t.shape_string(),
                      fmt::join(shape, ", "));
}

// One projection's rows [begin, begin+count) of the sequence, x: [count, heads*d_head], and
// where they go: out [heads, seq, d_head] (the recorded, per-head layout).
struct HeadSplit {
  const Tensor* x;
  Tensor* out;
  int64_t heads;
};

// Moves each split's rows into its per-head layout, one task per block of 64 rows (decoding:
// one task, on the calling thread).
void split_heads(ThreadPool& pool, std::span<const HeadSplit> splits, int64_t begin, int64_t d_head) {
  constexpr int64_t kRows = 64;
  const int64_t count = splits.front().x->dim(0);
  pool.parallel_for((count + kRows - 1) / kRows, [&](int64_t t) {
    for (const HeadSplit& split : splits) {
      const int64_t seq = split.out->dim(1), width = split.heads * d_head;
      for (int64_t s = t * kRows; s < std::min(count, (t + 1) * kRows); ++s)
        for (int64_t h = 0; h < split.heads; ++h)
          std::copy_n(split.x->data() + s * width + h * d_head, d_head,
                      split.out->data() + (h * seq + begin + s) * d_head);
    }
  });
}

// The rows added per task by add_residual.
constexpr int64_t kResidualRows = 64;

void ensure_shape(Tensor& t, std::vector<int64_t> shape) {
  if (t.shape() != shape) t = Tensor(std::move(shape));
}

// The context of a forward pass: the CPU only (see forward.h).
ExecOptions exec_options(const ForwardOptions& options) {
  if (options.device != Device::CPU)
    fail<UsageError>("--device {}: the forward pass runs on the CPU only (its CUDA kernels are built but not "
                     "verified on a GPU, and the KV cache and recordings live in host memory); use --device cpu",
                     device_name(options.device));
  return {.device = options.device,
          .device_index = options.device_index,
          .threads = options.threads,
          .compute = options.compute};
}

// An expert layer's router and experts (model/config.h).
void check_expert_shapes(const ModelConfig& c, const LayerWeights& w, const std::string& p) {
  expect_shape(w.ffn_gate_inp, {c.n_expert, c.d_model}, p + "ffn_gate_inp");
  if (static_cast<int64_t>(w.experts.size()) != c.n_expert)
    fail<FormatError>("weight {}ffn_*_exps holds {} experts, the config needs {}", p, w.experts.size(), c.n_expert);
  for (const ExpertWeights& e : w.experts) {
    expect_shape(e.w_gate, {c.d_ff_expert, c.d_model}, p + "ffn_gate_exps");
    expect_shape(e.w_up, {c.d_ff_expert, c.d_model}, p + "ffn_up_exps");
    expect_shape(e.w_down, {c.d_model, c.d_ff_expert}, p + "ffn_down_exps");
  }
}

void check_rows(std::span<const int64_t> rows, int64_t seq, const char* what) {
  for (int64_t r : rows)
    if (r < 0 || r >= seq) fail<InputError>("{}: row {} outside the {} tokens", what, r, seq);
}

}  // namespace

bool RecordRequest::wants_layer(int64_t layer) const {
  return layers.empty() || std::find(layers.begin(), layers.end(), layer) != layers.end();
}

Forward::Forward(const ModelConfig& config, const ModelWeights& weights, ForwardOptions options)
    : config_(config), weights_(weights), options_(options), ctx_(exec_options(options)) {
  const ModelConfig& c = config;
  if (c.n_layer <= 0 || c.n_head <= 0 || c.n_kv_head <= 0 || c.n_head % c.n_kv_head != 0 ||
      c.d_head <= 0 || c.d_head % 2 != 0)
    fail<FormatError>("model config: n_layer {}, n_head {}, n_kv_head {}, d_head {} invalid",
                      c.n_layer, c.n_head, c.n_kv_head, c.d_head);
  if (static_cast<int64_t>(weights.layers.size()) != c.n_layer)
    fail<FormatError>("model has {} layers of weights, the config says {}", weights.layers.size(),
                      c.n_layer);
  expect_shape(weights.token_embd, {c.vocab, c.d_model}, "token_embd");
  expect_shape(weights.output_norm, {c.d_model}, "output_norm");
  expect_shape(weights.lm_head(), {c.vocab, c.d_model}, "output");
  const int64_t q_dim = c.n_head * c.d_head, kv_dim = c.n_kv_head * c.d_head;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& w = weights.layers[static_cast<size_t>(l)];
    const std::string p = fmt::format("blk.{}.", l);
    expect_shape(w.attn_norm, {c.d_model}, p + "attn_norm");
    expect_shape(w.wq, {q_dim, c.d_model}, p + "attn_q");
    expect_shape(w.wk, {kv_dim, c.d_model}, p + "attn_k");
    expect_shape(w.wv, {kv_dim, c.d_model}, p + "attn_v");
    if (!w.bq.empty()) expect_shape(w.bq, {q_dim}, p + "attn_q.bias");
    if (!w.bk.empty()) expect_shape(w.bk, {kv_dim}, p + "attn_k.bias");
    if (!w.bv.empty()) expect_shape(w.bv, {kv_dim}, p + "attn_v.bias");
    if (c.qk_norm) {
      expect_shape(w.q_norm, {c.d_head}, p + "attn_q_norm");
      expect_shape(w.k_norm, {c.d_head}, p + "attn_k_norm");
    }
    expect_shape(w.wo, {c.d_model, q_dim}, p + "attn_output");
    expect_shape(w.ffn_norm, {c.d_model}, p + "ffn_norm");
    if (c.post_norms) {
      expect_shape(w.post_attn_norm, {c.d_model}, p + "post_attention_norm");
      expect_shape(w.post_ffn_norm, {c.d_model}, p + "post_ffw_norm");
    }
    if (c.expert_layer(l)) {
      check_expert_shapes(c, w, p);
      continue;
    }
    expect_shape(w.w_gate, {c.d_ff, c.d_model}, p + "ffn_gate");
    expect_shape(w.w_up, {c.d_ff, c.d_model}, p + "ffn_up");
    expect_shape(w.w_down, {c.d_model, c.d_ff}, p + "ffn_down");
  }
  if (static_cast<int64_t>(c.sliding_layers.size()) != c.n_layer && !c.sliding_layers.empty())
    fail<FormatError>("model config: {} layer types for {} layers", c.sliding_layers.size(), c.n_layer);
  inv_freq_ = rope_inv_freq(c, weights.rope_freq_factors);
  if (c.rope_scaling.type == "longrope") inv_freq_long_ = rope_inv_freq(c, {}, /*long_factors=*/true);
  rope_scale_ = rope_attention_scale(c);
  // Sliding layers with their own base, unscaled (Gemma 3).
  if (c.rope_local_theta > 0) inv_freq_local_ = rope_inv_freq(local_rope_config(c), {});
}

void Forward::select_rope(int64_t end) {
  const bool use_long = rope_uses_long_factors(config_, end);
  RopeTable& table = use_long ? rope_long_ : rope_;
  if (table.seq < end)
    table = make_rope_table(use_long ? inv_freq_long_ : inv_freq_, std::max(end, 2 * table.seq), rope_scale_);
  pass_rope_ = &table;
  if (!inv_freq_local_.empty() && rope_local_.seq < end)
    rope_local_ = make_rope_table(inv_freq_local_, std::max(end, 2 * rope_local_.seq));
}

const RopeTable& Forward::layer_rope(int64_t layer) const {
  return !inv_freq_local_.empty() && config_.window_of(layer) > 0 ? rope_local_ : *pass_rope_;
}

void Forward::check_request(int64_t seq, const ForwardRequest& request) const {
  const RecordRequest& rec = request.record;
  if (!rec.empty() && request.recorder == nullptr)
    fail<InputError>("forward: tensors requested for recording but no recorder given");
  for (int64_t l : rec.layers)
    if (l < 0 || l >= config_.n_layer)
      fail<InputError>("forward: layer {} outside the model's {} layers", l, config_.n_layer);
  check_rows(rec.attn_rows, seq, "attention rows");
  check_rows(rec.head_out_rows, seq, "head output rows");
  check_rows(request.logit_rows, seq, "logit rows");
  if (request.cache != nullptr &&
      (request.cache->n_layer() != config_.n_layer || request.cache->n_kv_head() != config_.n_kv_head ||
       request.cache->d_head() != config_.d_head || request.cache->next_position() != 0))
    fail<InputError>("forward: the KV cache to fill must be empty and of the model's shape");
  for (const auto& [layer, spans] : request.mask)
    if (layer < 0 || layer >= config_.n_layer)
      fail<InputError>("attention mask: layer {} outside the model's {} layers", layer,
                       config_.n_layer);
}

void Forward::check_tokens(std::span<const int32_t> tokens, int64_t first_position) const {
  const ModelConfig& c = config_;
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail<InputError>("forward: no tokens");
  if (c.context_length > 0 && first_position + n > c.context_length)
    fail<InputError>("forward: {} tokens exceed the model's context of {}", first_position + n, c.context_length);
  for (int64_t i = 0; i < n; ++i)
    if (tokens[static_cast<size_t>(i)] < 0 || tokens[static_cast<size_t>(i)] >= c.vocab)
      fail<InputError>("forward: token id {} at position {} outside the vocabulary [0, {})",
                       tokens[static_cast<size_t>(i)], first_position + i, c.vocab);
}

// resid_ [n, d_model]: each token's embedding row converted to float32 (times the config's
// embedding scale, in fp32: Gemma's sqrt(d_model)).
void Forward::embed(std::span<const int32_t> tokens) {
  const int64_t d_model = config_.d_model;
  const auto n = static_cast<int64_t>(tokens.size());
  resid_ = Tensor({n, d_model});
  for (int64_t i = 0; i < n; ++i)
    weights_.token_embd.rows_f32(tokens[static_cast<size_t>(i)], 1, resid_.data() + i * d_model);
  if (config_.embed_scale != 1) resid_.matrix() *= static_cast<float>(config_.embed_scale);
}

// block_out_ <- norm(block_out_) where the family norms each block's output (Gemma 3).
void Forward::post_norm(const Tensor& weight) {
  if (config_.post_norms) rms_norm(ctx_, block_out_, weight, static_cast<float>(config_.rms_eps), block_out_);
}

// resid_ += MLP(ffn_norm(resid_)): the dense MLP, or an expert layer's experts (post-normed where
// the family says so).
void Forward::mlp_block(int64_t layer) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  rms_norm(ctx_, resid_, w.ffn_norm, static_cast<float>(config_.rms_eps), normed_);
  if (config_.expert_layer(layer)) {
    std::vector<MoeExpert> experts;
    for (const ExpertWeights& e : w.experts) experts.push_back({&e.w_gate, &e.w_up, &e.w_down});
    moe_mlp(ctx_, normed_, w.ffn_gate_inp, experts, config_.n_expert_used, config_.norm_topk_prob, block_out_);
  } else {
    gated_mlp(ctx_, normed_, w.w_gate, w.w_up, w.w_down, block_out_,
              config_.ffn_act == FfnActivation::GeluTanh ? GateActivation::GeluTanh : GateActivation::Silu);
  }
  post_norm(w.post_ffn_norm);
  add_residual(layer);
}

// The logits of resid_'s rows `rows` after the final norm: [r, vocab].
ForwardResult Forward::logits(std::span<const int64_t> rows) {
  const ModelConfig& c = config_;
  ForwardResult result;
  result.logit_rows.assign(rows.begin(), rows.end());
  const auto r = static_cast<int64_t>(rows.size());
  Tensor last({r, c.d_model});  // [r_logits, d_model]
  for (int64_t i = 0; i < r; ++i) last.matrix().row(i) = resid_.matrix().row(rows[static_cast<size_t>(i)]);
  rms_norm(ctx_, last, weights_.output_norm, static_cast<float>(c.rms_eps), last);
  linear(ctx_, last, weights_.lm_head(), Tensor(), result.logits);
  if (const auto cap = static_cast<float>(c.final_logit_softcap); cap > 0)  // HF: tanh(x / cap) * cap
    for (float& x : result.logits.storage()) x = std::tanh(x / cap) * cap;
  return result;
}

ForwardResult Forward::run(std::span<const int32_t> tokens, const ForwardRequest& request) {
  const ModelConfig& c = config_;
  const auto seq = static_cast<int64_t>(tokens.size());
  check_tokens(tokens, 0);
  check_request(seq, request);
  select_rope(seq);
  try {
    embed(tokens);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
      const bool record = !request.record.empty() && request.record.wants_layer(l);
      rms_norm(ctx_, resid_, w.attn_norm, static_cast<float>(c.rms_eps), normed_);
      attention_block(l, request, record);
      post_norm(w.post_attn_norm);
      add_residual(-1);
      mlp_block(l);
      if (record && request.record.residual) request.recorder->on_residual(l, resid_);
    }
    if (request.cache != nullptr) request.cache->advance(seq);
  } catch (...) {
    if (request.cache != nullptr) request.cache->truncate(0);
    throw;
  }
  std::vector<int64_t> rows = request.logit_rows;
  if (rows.empty()) rows = {seq - 1};
  return logits(rows);
}

ForwardResult Forward::run_cached(std::span<const int32_t> tokens, KvCache& cache,
                                  const CachedRequest& request) {
  const ModelConfig& c = config_;
  if (cache.n_layer() != c.n_layer || cache.n_kv_head() != c.n_kv_head || cache.d_head() != c.d_head)
    fail<InputError>("forward: a KV cache of {} layers, {} KV heads, d_head {} does not fit the model",
                     cache.n_layer(), cache.n_kv_head(), cache.d_head());
  const int64_t first = cache.next_position();
  const auto n = static_cast<int64_t>(tokens.size());
  check_tokens(tokens, first);
  check_rows(request.logit_rows, n, "logit rows");
  select_rope(first + n);
  q_positions_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) q_positions_[static_cast<size_t>(i)] = first + i;
  try {
    embed(tokens);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const LayerWeights& w = weights_.layers[static_cast<size_t>(l)];
      rms_norm(ctx_, resid_, w.attn_norm, static_cast<float>(c.rms_eps), normed_);
      cached_attention_block(l, first, cache, request);
      post_norm(w.post_attn_norm);
      add_residual(-1);
      mlp_block(l);
    }
    cache.advance(n);
  } catch (...) {
    cache.truncate(first);  // what this run appended goes; evictions by the callback stay
    throw;
  }
  std::vector<int64_t> rows = request.logit_rows;
  if (rows.empty()) rows = {n - 1};
  return logits(rows);
}

// resid_ += block_out_, in row blocks over the pool. With a layer (>= 0), the end of that
// layer: a NaN or infinity in the residual stream (weights that overflow, or a damaged model
// that passed the load checks) fails the pass naming the layer, instead of printing NaN
// logits and metrics that look ordinary. The check reads each block right after its add.
void Forward::add_residual(int64_t layer) {
  const int64_t rows = resid_.dim(0), d_model = resid_.dim(1);
  const int64_t blocks = (rows + kResidualRows - 1) / kResidualRows;
  std::vector<int64_t> first_bad(static_cast<size_t>(blocks), -1);
  ctx_.pool().parallel_for(blocks, [&](int64_t b) {
    const int64_t r0 = b * kResidualRows, n = std::min(kResidualRows, rows - r0);
    resid_.matrix().middleRows(r0, n) += block_out_.matrix().middleRows(r0, n);
    if (layer < 0) return;
    const int64_t i = first_non_finite(resid_.span().subspan(static_cast<size_t>(r0 * d_model),
                                                             static_cast<size_t>(n * d_model)));
    if (i >= 0) first_bad[static_cast<size_t>(b)] = r0 * d_model + i;
  });
  for (int64_t i : first_bad)
    if (i >= 0)
      fail<FormatError>("forward: non-finite activation after layer {} (residual stream at position {}: {})", layer,
                        i / d_model, resid_.span()[static_cast<size_t>(i)]);
}

void Forward::project_qkv(int64_t layer, int64_t first_position) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  const int64_t seq = normed_.dim(0);
  ensure_shape(q_, {c.n_head, seq, c.d_head});
  ensure_shape(k_, {c.n_kv_head, seq, c.d_head});
  ensure_shape(v_, {c.n_kv_head, seq, c.d_head});
  // In row chunks: the projection of one chunk at a time ([chunk, n_head*d_head]), moved
  // into the per-head layout.
  for (int64_t begin = 0; begin < seq; begin += kLinearRowChunk) {
    const int64_t count = std::min(kLinearRowChunk, seq - begin);
    const LinearTarget targets[] = {{&w.wq, &w.bq, &proj_[0]},   // [count, n_head*d_head]
                                    {&w.wk, &w.bk, &proj_[1]},   // [count, n_kv_head*d_head]
                                    {&w.wv, &w.bv, &proj_[2]}};  // [count, n_kv_head*d_head]
    linear_rows_batch(ctx_, normed_, begin, count, targets);
    const HeadSplit splits[] = {{&proj_[0], &q_, c.n_head}, {&proj_[1], &k_, c.n_kv_head}, {&proj_[2], &v_, c.n_kv_head}};
    split_heads(ctx_.pool(), splits, begin, c.d_head);
  }
  if (c.qk_norm) {  // each head's row [d_head], before RoPE (qwen3)
    rms_norm(ctx_, q_, w.q_norm, static_cast<float>(c.rms_eps), q_);
    rms_norm(ctx_, k_, w.k_norm, static_cast<float>(c.rms_eps), k_);
  }
  apply_rope(ctx_, q_, layer_rope(layer), first_position);
  apply_rope(ctx_, k_, layer_rope(layer), first_position);
}

// normed_ [n, d_model] of the rows at [first_position, +n) -> block_out_ [n, d_model], the
// rows' K/V appended to the cache first.
void Forward::cached_attention_block(int64_t layer, int64_t first_position, KvCache& cache,
                                     const CachedRequest& request) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  project_qkv(layer, first_position);
  cache.append(layer, k_, v_, first_position);
  if (request.before_attention) request.before_attention(layer, q_, k_, v_, cache);
  kv_views_.resize(static_cast<size_t>(config_.n_kv_head));
  for (int64_t g = 0; g < config_.n_kv_head; ++g) kv_views_[static_cast<size_t>(g)] = cache.view(layer, g);
  cached_attention(ctx_, q_, q_positions_, kv_views_, context_, options_.query_block, config_.window_of(layer),
                   static_cast<float>(config_.attn_scale));
  linear(ctx_, context_, w.wo, Tensor(), block_out_);  // [n, d_model]
}

// normed_ [seq, d_model] -> block_out_ [seq, d_model]: the attention block's output.
void Forward::attention_block(int64_t layer, const ForwardRequest& request, bool record) {
  const LayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  project_qkv(layer, 0);
  if (request.cache != nullptr) request.cache->append(layer, k_, v_, 0);
  if (record && request.record.qkv) request.recorder->on_qkv(layer, q_, k_, v_);

  AttentionParams params;
  params.query_block = options_.query_block;
  params.window = config_.window_of(layer);
  params.scale = static_cast<float>(config_.attn_scale);
  if (auto it = request.mask.find(layer); it != request.mask.end()) params.mask = it->second;
  std::vector<AttentionMaskSpan> layer_spans;  // the mask of this layer when a source extends it
  if (request.layer_mask) {
    layer_spans.assign(params.mask.begin(), params.mask.end());
    request.layer_mask(layer, q_, k_, v_, layer_spans);
    params.mask = layer_spans;
  }
  if (record && !request.record.attn_rows.empty()) {
    params.prob_rows = request.record.attn_rows;
    params.probs = &probs_;
  }
  causal_attention(ctx_, q_, k_, v_, context_, params);  // context_ [seq, n_head*d_head]
  if (params.probs != nullptr)
    request.recorder->on_attention(layer, request.record.attn_rows, probs_);
  if (record && !request.record.head_out_rows.empty()) record_head_outputs(layer, request);
  linear(ctx_, context_, w.wo, Tensor(), block_out_);  // [seq, d_model]
}

void Forward::record_head_outputs(int64_t layer, const ForwardRequest& request) {
  const ModelConfig& c = config_;
  const std::vector<int64_t>& rows = request.record.head_out_rows;
  const auto r = static_cast<int64_t>(rows.size());
  const Tensor wo = weights_.layers[static_cast<size_t>(layer)].wo.to_f32();  // [d_model, n_head*d_head]
  Tensor head_out({c.n_head, r, c.d_model});
  ctx_.pool().parallel_for(c.n_head, [&](int64_t h) {
    RowMatrix ctx(r, c.d_head);  // [r, d_head]: head h's attention output at the rows
    for (int64_t i = 0; i < r; ++i)
      ctx.row(i) =
          context_.matrix().row(rows[static_cast<size_t>(i)]).segment(h * c.d_head, c.d_head);
    MatrixMap out(head_out.data() + h * r * c.d_model, r, c.d_model);  // [r, d_model]
    out.noalias() = ctx * wo.matrix().middleCols(h * c.d_head, c.d_head).transpose();
  });
  request.recorder->on_head_outputs(layer, rows, head_out);
}

}  // namespace ckv
