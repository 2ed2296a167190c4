#pragma once
// The one canonical weight-name table: each weight of a decoder of the families of
// model/family.h, its name in
// HF checkpoints and in GGUF files (llama.cpp's llama-arch naming). Loaders translate file
// names through this table and nowhere else. Per-layer patterns hold "{}" for the layer.
#include <span>
#include <string>
#include <string_view>

namespace ckv {

enum class WeightKind {
  TokenEmbd,   // [vocab, d_model]
  OutputNorm,  // [d_model]
  Output,      // [vocab, d_model] (absent when tied to TokenEmbd)
  RopeFreqs,   // [d_head/2] llama3 rope divisors (GGUF only; HF derives them from config)
  RopeFactorsShort,  // [rope_dim/2] longrope divisors within the original context (GGUF only)
  RopeFactorsLong,   // [rope_dim/2] longrope divisors beyond it (GGUF only)
  AttnNorm,    // [d_model]
  AttnQ,       // [n_head*d_head, d_model]
  AttnK,       // [n_kv_head*d_head, d_model]
  AttnV,       // [n_kv_head*d_head, d_model]
  AttnQBias,   // [n_head*d_head]
  AttnKBias,   // [n_kv_head*d_head]
  AttnVBias,   // [n_kv_head*d_head]
  AttnOutput,  // [d_model, n_head*d_head]
  AttnQkv,     // [(n_head + 2*n_kv_head)*d_head, d_model]: q, k, v rows in one (phi3)
  AttnQNorm,   // [d_head] RMSNorm weight of every q head (qwen3)
  AttnKNorm,   // [d_head] RMSNorm weight of every k head (qwen3)
  FfnNorm,     // [d_model]
  FfnGate,     // [d_ff, d_model]
  FfnUp,       // [d_ff, d_model]
  FfnDown,     // [d_model, d_ff]
  FfnGateUp,   // [2*d_ff, d_model]: gate rows then up rows in one (phi3; GGUF calls it ffn_up)
  PostAttnNorm,  // [d_model] RMSNorm of the attention output before its residual add (gemma3;
                 // HF calls it post_attention_layernorm, the llama name of FfnNorm: the
                 // family renames, model/family.h)
  PostFfnNorm,   // [d_model] RMSNorm of the MLP output before its residual add (gemma3)
  // Mixture of experts (qwen3moe, mixtral). GGUF stacks the experts of a layer in one tensor
  // per projection; an HF checkpoint stores one tensor per expert ("{}" twice: layer, expert).
  FfnGateInp,   // [n_expert, d_model] the router
  FfnGateExps,  // [n_expert, d_ff_expert, d_model]
  FfnUpExps,    // [n_expert, d_ff_expert, d_model]
  FfnDownExps,  // [n_expert, d_model, d_ff_expert]
};

struct WeightName {
  WeightKind kind;
  bool per_layer;
  std::string_view canonical;  // ckv's own name, e.g. "blk.{}.attn_q.weight"
  std::string_view hf;         // "" when HF checkpoints do not store it
  std::string_view gguf;
  std::string_view hf_mixtral = {};  // Mixtral's HF spelling where it differs (block_sparse_moe)
};

std::span<const WeightName> weight_name_table();
const WeightName& weight_name(WeightKind kind);

// File names for a weight; `layer` is ignored for global weights. Empty when the format
// does not store that weight. `mixtral`: Mixtral's HF spelling of the expert weights.
std::string hf_name(WeightKind kind, int64_t layer = 0, bool mixtral = false);
std::string gguf_name(WeightKind kind, int64_t layer = 0);
// The HF tensor of one expert of FfnGateExps, FfnUpExps or FfnDownExps (GGUF: gguf_name's
// stacked tensor).
std::string hf_expert_name(WeightKind kind, int64_t layer, int64_t expert, bool mixtral = false);

}  // namespace ckv
