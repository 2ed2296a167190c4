// qwen3: Qwen3 dense. The llama graph without biases, with an RMSNorm over each q and k head
// (q_norm, k_norm [d_head]) before RoPE, and head_dim given by the config (Qwen3-0.6B: 128,
// not 1024 / 16). q/k rows as HF stores them in GGUF too.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

void read_hf(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  refuse_attention_bias(j, source, "qwen3");
  read_qwen_window(j, source, c, 28);  // as qwen2's (Qwen3Config's default 28)
}

void read_gguf(const GgufFile& gguf, ModelConfig& c) {
  refuse_short_gguf_window(gguf, c);
}

constexpr std::string_view kHf[] = {"qwen3"};
constexpr std::string_view kGguf[] = {"qwen3"};

}  // namespace

const Family& qwen3_family() {
  static const Family f{.arch = Architecture::Qwen3,
                        .name = "qwen3",
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
