#pragma once
// Hyperparameters of a supported decoder, read from HF config.json or GGUF metadata.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ckv {

class GgufFile;

// The decoder families ckv implements; model/family.h describes each one.
enum class Architecture { Llama, Qwen2, Qwen3, Phi3, Qwen3Moe, Gemma3 };

// The gate of the MLP: SiLU (SwiGLU) or GELU's tanh approximation (GeGLU, Gemma's
// gelu_pytorch_tanh).
enum class FfnActivation { Silu, GeluTanh };

struct RopeScaling {
  std::string type = "default";  // "default", "llama3" or "longrope" (docs/MODELS.md "RoPE (HF)")
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
  // longrope: divisors of inv_freq [rope_dim/2] for a pass whose positions stay within
  // original_max_position (short) and for a longer one (long), as HF picks them per call;
  // attention_factor multiplies cos and sin (so q.k by its square).
  std::vector<float> short_factor;
  std::vector<float> long_factor;
  double attention_factor = 1.0;
};

struct ModelConfig {
  Architecture arch = Architecture::Llama;
  std::string arch_name = "llama";  // as the file names it
  int64_t n_layer = 0;
  int64_t d_model = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t d_head = 0;
  int64_t d_ff = 0;
  int64_t vocab = 0;
  int64_t context_length = 0;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // q/k/v bias (qwen2, or llama with attention_bias)
  bool tied_embeddings = false;
  // Per-layer features of the family (model/family.h), fixed when the config is read.
  int64_t rope_dim = 0;          // rotated dims of each head: d_head, fewer with partial rotary
  bool qk_norm = false;          // RMSNorm [d_head] of each q and k head before RoPE (qwen3)
  bool fused_qkv = false;        // one [q_rows + 2*kv_rows, d_model] projection (phi3)
  bool fused_gate_up = false;    // one [2*d_ff, d_model] gate-then-up projection (phi3)
  // Sliding-window attention: on a layer marked in sliding_layers, a query at position p sees
  // the keys at (p - sliding_window, p] (HF's rule: sliding_window keys, itself included).
  int64_t sliding_window = 0;         // 0: none
  std::vector<char> sliding_layers;   // [n_layer] 1 where the window applies; empty when none
  FfnActivation ffn_act = FfnActivation::Silu;
  // Gemma 3 (model/family_gemma3.cpp); the defaults are every other family's graph.
  double rope_local_theta = 0;    // > 0: sliding layers rotate by this base, unscaled
  double embed_scale = 1;         // the embedding rows times this (Gemma: sqrt(d_model))
  double attn_scale = 0;          // attention logit scale; 0: 1/sqrt(d_head)
  bool post_norms = false;        // RMSNorm of each block's output before its residual add
  double final_logit_softcap = 0; // > 0: logits <- cap * tanh(logits / cap)
  // Mixture of experts (qwen3moe, mixtral; docs/MODELS.md "Mixture of experts"): an expert
  // layer's MLP is n_expert SiLU-gated MLPs of width d_ff_expert and a router [n_expert,
  // d_model]; each token runs the n_expert_used experts of its largest router softmax
  // probabilities, weighted by those probabilities (renormalised to sum 1 when
  // norm_topk_prob). The other layers keep the dense MLP of width d_ff.
  int64_t n_expert = 0;          // 0: every layer is dense
  int64_t n_expert_used = 0;     // experts per token (top-k)
  int64_t d_ff_expert = 0;       // each expert's intermediate size
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;       // HF: layer l has experts when (l + 1) % step == 0
  std::vector<int64_t> mlp_only_layers;  // HF: layers with the dense MLP whatever the step
  bool hf_mixtral_expert_names = false;  // HF checkpoint spells them block_sparse_moe.*.w1/w3/w2

  int64_t group_size() const { return n_head / n_kv_head; }  // query heads per KV head
  // The window of `layer`'s attention: sliding_window on a sliding layer, else 0 (none).
  int64_t window_of(int64_t layer) const {
    return sliding_window > 0 && layer >= 0 && layer < static_cast<int64_t>(sliding_layers.size()) &&
                   sliding_layers[static_cast<size_t>(layer)] != 0
               ? sliding_window
               : 0;
  }
  // Marks every layer sliding (Mistral, Phi-3: one window for the whole model).
  void slide_every_layer() { sliding_layers.assign(static_cast<size_t>(n_layer), 1); }
  // Whether layer l's MLP is the experts (HF Qwen3MoeDecoderLayer's rule).
  bool expert_layer(int64_t l) const;
  // Checks positivity and divisibility; throws FormatError naming `source`.
  void validate(const std::string& source) const;
};

// HF's hidden_act / hidden_activation name: "silu" or "gelu_pytorch_tanh" (UnsupportedError).
FfnActivation ffn_activation(const std::string& name, const std::string& source);

// Throws UnsupportedError naming the architecture when no family (model/family.h) has it.
Architecture parse_architecture(const std::string& name, const std::string& source);

// From an HF config.json (transformers 4 `rope_theta`/`rope_scaling` or transformers 5
// `rope_parameters`). Throws FormatError for missing or mistyped fields, UnsupportedError
// for architectures and options ckv does not implement. Does not call validate().
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& source);

// From GGUF metadata ({arch}.* keys, docs/MODELS.md). vocab falls back to the tokenizer's token
// count, then to token_embd's rows; tied_embeddings is set when output.weight is absent.
// GGUF keeps llama3 rope factors in the tensor rope_freqs.weight, so rope_scaling stays
// "default" here and the loader fills ModelWeights::rope_freq_factors. Does not validate().
ModelConfig config_from_gguf(const GgufFile& gguf);

}  // namespace ckv
