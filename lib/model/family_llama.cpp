// llama: Llama 2/3.x, SmolLM2, Mistral (docs/MODELS.md "Architectures"). RMSNorm, SiLU-gated MLP,
// RoPE (default or llama3 scaling), no biases in HF checkpoints (a GGUF may carry q/k/v
// biases), q/k rows interleaved per head by llama.cpp's converter; Mistral v0.1's sliding
// window on every layer. Mixtral is llama with experts in every layer (HF model_type mixtral;
// GGUF llama with expert_count): HF's router softmax, top-k and renormalisation, which is the
// softmax of the top-k router logits.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

void read_hf(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  refuse_attention_bias(j, source, "llama");
  // Mistral v0.1 attends to a window of 4096 keys on every layer (MistralConfig
  // sliding_window; null in v0.3).
  c.sliding_window = sliding_window_field(j, source);
  if (c.sliding_window > 0) c.slide_every_layer();
  if (c.arch_name == "mixtral") {  // MixtralConfig's defaults where the file has none
    c.n_expert = expert_count_field(j, source, 8);
    c.n_expert_used = int_field(j, "num_experts_per_tok", source, 2);
    c.d_ff_expert = c.d_ff;
    c.norm_topk_prob = true;
    c.hf_mixtral_expert_names = true;
  }
}

void read_gguf(const GgufFile& gguf, ModelConfig& c) {
  // A window in the file (llama.attention.sliding_window) is one on every layer, as HF's
  // Mistral applies it.
  if (c.sliding_window > 0) c.slide_every_layer();
  read_gguf_experts(gguf, c);
}

constexpr std::string_view kHf[] = {"llama", "mistral", "mixtral"};  // Mistral: the llama layout renamed
constexpr std::string_view kGguf[] = {"llama"};

}  // namespace

const Family& llama_family() {
  static const Family f{.arch = Architecture::Llama,
                        .name = "llama",
                        .hf_model_types = kHf,
                        .gguf_archs = kGguf,
                        .default_context = 2048,
                        .qkv_bias = false,
                        .qk_norm = false,
                        .fused_qkv_hf = false,
                        .fused_gate_up_hf = false,
                        .gguf_permuted_qk = true,
                        .partial_rotary = false,
                        .read_hf = read_hf,
                        .read_gguf = read_gguf};
  return f;
}

}  // namespace ckv
