// llama: Llama 2/3.x, SmolLM2, Mistral (docs/MODELS.md "Architectures"). RMSNorm, SiLU-gated MLP,
// RoPE (default or llama3 scaling), no biases in HF checkpoints (a GGUF may carry q/k/v
// biases), q/k rows interleaved per head by llama.cpp's converter. Mixtral is llama with
// experts in every layer (HF model_type mixtral; GGUF llama with expert_count): HF's router
// softmax, top-k and renormalisation, which is the softmax of the top-k router logits.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

void read_hf(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  refuse_attention_bias(j, source, "llama");
  // Mistral v0.1 attends to a window of 4096 keys; ckv computes full causal attention, which
  // equals it only while the window covers the whole context. Refuse rather than compute
  // full attention silently.
  if (const auto it = j.find("sliding_window"); it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < c.context_length)
      fail<UnsupportedError>("{}: sliding-window attention (sliding_window {}) is not supported",
                             source, it->dump());
    c.sliding_window = it->get<int64_t>();
  }
  if (c.arch_name == "mixtral") {  // MixtralConfig's defaults where the file has none
    c.n_expert = expert_count_field(j, source, 8);
    c.n_expert_used = int_field(j, "num_experts_per_tok", source, 2);
    c.d_ff_expert = c.d_ff;
    c.norm_topk_prob = true;
    c.hf_mixtral_expert_names = true;
  }
}

void read_gguf(const GgufFile& gguf, ModelConfig& c) {
  refuse_short_gguf_window(gguf, c);
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
