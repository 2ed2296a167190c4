#include "io/tensor_names.h"

#include <fmt/format.h>

#include "core/error.h"

namespace ckv {
namespace {

// Canonical names follow GGUF's short names, prefixed "blk.N." per layer.
constexpr WeightName kTable[] = {
    {WeightKind::TokenEmbd, false, "token_embd.weight", "model.embed_tokens.weight",
     "token_embd.weight"},
    {WeightKind::OutputNorm, false, "output_norm.weight", "model.norm.weight",
     "output_norm.weight"},
    {WeightKind::Output, false, "output.weight", "lm_head.weight", "output.weight"},
    {WeightKind::RopeFreqs, false, "rope_freqs.weight", "", "rope_freqs.weight"},
    {WeightKind::RopeFactorsShort, false, "rope_factors_short.weight", "", "rope_factors_short.weight"},
    {WeightKind::RopeFactorsLong, false, "rope_factors_long.weight", "", "rope_factors_long.weight"},
    {WeightKind::AttnNorm, true, "blk.{}.attn_norm.weight",
     "model.layers.{}.input_layernorm.weight", "blk.{}.attn_norm.weight"},
    {WeightKind::AttnQ, true, "blk.{}.attn_q.weight", "model.layers.{}.self_attn.q_proj.weight",
     "blk.{}.attn_q.weight"},
    {WeightKind::AttnK, true, "blk.{}.attn_k.weight", "model.layers.{}.self_attn.k_proj.weight",
     "blk.{}.attn_k.weight"},
    {WeightKind::AttnV, true, "blk.{}.attn_v.weight", "model.layers.{}.self_attn.v_proj.weight",
     "blk.{}.attn_v.weight"},
    {WeightKind::AttnQBias, true, "blk.{}.attn_q.bias", "model.layers.{}.self_attn.q_proj.bias",
     "blk.{}.attn_q.bias"},
    {WeightKind::AttnKBias, true, "blk.{}.attn_k.bias", "model.layers.{}.self_attn.k_proj.bias",
     "blk.{}.attn_k.bias"},
    {WeightKind::AttnVBias, true, "blk.{}.attn_v.bias", "model.layers.{}.self_attn.v_proj.bias",
     "blk.{}.attn_v.bias"},
    {WeightKind::AttnOutput, true, "blk.{}.attn_output.weight",
     "model.layers.{}.self_attn.o_proj.weight", "blk.{}.attn_output.weight"},
    {WeightKind::AttnQkv, true, "blk.{}.attn_qkv.weight", "model.layers.{}.self_attn.qkv_proj.weight",
     "blk.{}.attn_qkv.weight"},
    {WeightKind::AttnQNorm, true, "blk.{}.attn_q_norm.weight", "model.layers.{}.self_attn.q_norm.weight",
     "blk.{}.attn_q_norm.weight"},
    {WeightKind::AttnKNorm, true, "blk.{}.attn_k_norm.weight", "model.layers.{}.self_attn.k_norm.weight",
     "blk.{}.attn_k_norm.weight"},
    {WeightKind::FfnNorm, true, "blk.{}.ffn_norm.weight",
     "model.layers.{}.post_attention_layernorm.weight", "blk.{}.ffn_norm.weight"},
    {WeightKind::FfnGate, true, "blk.{}.ffn_gate.weight", "model.layers.{}.mlp.gate_proj.weight",
     "blk.{}.ffn_gate.weight"},
    {WeightKind::FfnUp, true, "blk.{}.ffn_up.weight", "model.layers.{}.mlp.up_proj.weight",
     "blk.{}.ffn_up.weight"},
    {WeightKind::FfnDown, true, "blk.{}.ffn_down.weight", "model.layers.{}.mlp.down_proj.weight",
     "blk.{}.ffn_down.weight"},
    // llama.cpp stores phi3's fused gate/up under the name of the up projection.
    {WeightKind::FfnGateUp, true, "blk.{}.ffn_gate_up.weight", "model.layers.{}.mlp.gate_up_proj.weight",
     "blk.{}.ffn_up.weight"},
    {WeightKind::PostAttnNorm, true, "blk.{}.post_attention_norm.weight", "", "blk.{}.post_attention_norm.weight"},
    {WeightKind::PostFfnNorm, true, "blk.{}.post_ffw_norm.weight",
     "model.layers.{}.post_feedforward_layernorm.weight", "blk.{}.post_ffw_norm.weight"},
    {WeightKind::FfnGateInp, true, "blk.{}.ffn_gate_inp.weight", "model.layers.{}.mlp.gate.weight",
     "blk.{}.ffn_gate_inp.weight", "model.layers.{}.block_sparse_moe.gate.weight"},
    {WeightKind::FfnGateExps, true, "blk.{}.ffn_gate_exps.weight", "model.layers.{}.mlp.experts.{}.gate_proj.weight",
     "blk.{}.ffn_gate_exps.weight", "model.layers.{}.block_sparse_moe.experts.{}.w1.weight"},
    {WeightKind::FfnUpExps, true, "blk.{}.ffn_up_exps.weight", "model.layers.{}.mlp.experts.{}.up_proj.weight",
     "blk.{}.ffn_up_exps.weight", "model.layers.{}.block_sparse_moe.experts.{}.w3.weight"},
    {WeightKind::FfnDownExps, true, "blk.{}.ffn_down_exps.weight", "model.layers.{}.mlp.experts.{}.down_proj.weight",
     "blk.{}.ffn_down_exps.weight", "model.layers.{}.block_sparse_moe.experts.{}.w2.weight"},
};

std::string expand(std::string_view pattern, bool per_layer, int64_t layer) {
  if (pattern.empty() || !per_layer) return std::string(pattern);
  return fmt::format(fmt::runtime(pattern), layer);
}

}  // namespace

std::span<const WeightName> weight_name_table() {
  return kTable;
}

const WeightName& weight_name(WeightKind kind) {
  for (const WeightName& w : kTable) {
    if (w.kind == kind) return w;
  }
  fail("no name table entry for weight kind {}", static_cast<int>(kind));
}

std::string hf_name(WeightKind kind, int64_t layer, bool mixtral) {
  const WeightName& w = weight_name(kind);
  return expand(mixtral && !w.hf_mixtral.empty() ? w.hf_mixtral : w.hf, w.per_layer, layer);
}

std::string hf_expert_name(WeightKind kind, int64_t layer, int64_t expert, bool mixtral) {
  const WeightName& w = weight_name(kind);
  if (kind != WeightKind::FfnGateExps && kind != WeightKind::FfnUpExps && kind != WeightKind::FfnDownExps)
    fail("weight kind {} is not an expert's", static_cast<int>(kind));
  return fmt::format(fmt::runtime(mixtral ? w.hf_mixtral : w.hf), layer, expert);
}

std::string gguf_name(WeightKind kind, int64_t layer) {
  const WeightName& w = weight_name(kind);
  return expand(w.gguf, w.per_layer, layer);
}

}  // namespace ckv
