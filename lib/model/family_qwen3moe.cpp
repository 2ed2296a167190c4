// qwen3moe: Qwen3-MoE (Qwen3-30B-A3B: 128 experts, 8 per token). Qwen3's attention (per-head
// q/k RMSNorm, head_dim from the config, no biases) with a mixture of experts in place of the
// MLP (ModelConfig's experts; ops/moe.h): router softmax, top-k, the top-k weights
// renormalised when norm_topk_prob. HF's decoder_sparse_step and mlp_only_layers keep some
// layers dense (width intermediate_size; the experts' is moe_intermediate_size); llama.cpp's
// qwen3moe graph has experts in every layer. Shared experts (Qwen2-MoE's) are refused.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

void read_hf(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  refuse_attention_bias(j, source, "qwen3moe");
  // Qwen3's window (read_qwen_window) is not taken over for the experts' family: refused.
  if (bool_field(j, "use_sliding_window", source, false))
    fail<UnsupportedError>("{}: qwen3moe sliding-window attention is not supported", source);
  if (int_field(j, "shared_expert_intermediate_size", source, 0) != 0)
    fail<UnsupportedError>("{}: shared experts (shared_expert_intermediate_size) are not supported", source);
  // Qwen3MoeConfig's defaults where the file has none.
  c.n_expert = expert_count_field(j, source, 128);
  c.n_expert_used = c.n_expert == 0 ? 0 : int_field(j, "num_experts_per_tok", source, 8);
  c.d_ff_expert = int_field(j, "moe_intermediate_size", source, 768);
  c.norm_topk_prob = bool_field(j, "norm_topk_prob", source, false);
  c.decoder_sparse_step = int_field(j, "decoder_sparse_step", source, 1);
  if (const nlohmann::json* layers = field(j, "mlp_only_layers")) {
    if (!layers->is_array()) fail<FormatError>("{}: 'mlp_only_layers' is {}, not a list", source, layers->dump());
    for (const nlohmann::json& l : *layers) {
      if (!l.is_number_integer())
        fail<FormatError>("{}: 'mlp_only_layers' holds {}, not a layer index", source, l.dump());
      c.mlp_only_layers.push_back(l.get<int64_t>());
    }
  }
}

void read_gguf(const GgufFile& gguf, ModelConfig& c) {
  refuse_short_gguf_window(gguf, c);
  read_gguf_experts(gguf, c);
  if (c.n_expert == 0)
    fail<FormatError>("{}: missing metadata {}.expert_count", gguf.path().string(), c.arch_name);
}

constexpr std::string_view kHf[] = {"qwen3_moe"};
constexpr std::string_view kGguf[] = {"qwen3moe"};

}  // namespace

const Family& qwen3moe_family() {
  static const Family f{.arch = Architecture::Qwen3Moe,
                        .name = "qwen3moe",
                        .hf_model_types = kHf,
                        .gguf_archs = kGguf,
                        .default_context = 32768,
                        .qkv_bias = false,
                        .qk_norm = true,
                        .fused_qkv_hf = false,
                        .fused_gate_up_hf = false,
                        .gguf_permuted_qk = false,
                        .partial_rotary = false,
                        .read_hf = read_hf,
                        .read_gguf = read_gguf};
  return f;
}

}  // namespace ckv
