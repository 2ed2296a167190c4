// qwen2: Qwen2 / Qwen2.5. The llama graph with q/k/v biases (no o_proj bias), q/k rows as HF
// stores them in GGUF too.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

void read_hf(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  // qwen2 writes a window but applies it only under use_sliding_window, from layer
  // max_window_layers on (Qwen2Config's default 28).
  read_qwen_window(j, source, c, 28);
}

void read_gguf(const GgufFile& gguf, ModelConfig& c) {
  refuse_short_gguf_window(gguf, c);
}

constexpr std::string_view kHf[] = {"qwen2"};
constexpr std::string_view kGguf[] = {"qwen2"};

}  // namespace

const Family& qwen2_family() {
  static const Family f{.arch = Architecture::Qwen2,
                        .name = "qwen2",
                        .hf_model_types = kHf,
                        .gguf_archs = kGguf,
                        .default_context = 32768,
                        .qkv_bias = true,
                        .qk_norm = false,
                        .fused_qkv_hf = false,
                        .fused_gate_up_hf = false,
                        .gguf_permuted_qk = false,
                        .partial_rotary = false,
                        .read_hf = read_hf,
                        .read_gguf = read_gguf};
  return f;
}

}  // namespace ckv
