// phi3: Phi-3 and Phi-4-mini. The llama graph with q/k/v in one projection (HF qkv_proj, GGUF
// attn_qkv: q rows, then k, then v) and gate/up in one (HF gate_up_proj, GGUF ffn_up: gate
// rows, then up), split at load into row views of the stored matrix; LongRoPE (short/long
// factors, attention factor; config.cpp) and partial rotary embedding (Phi-4-mini's
// partial_rotary_factor 0.75: RoPE turns the first rope_dim dims of each head). A sliding
// window (Phi-3-mini-4k: 2047) applies to every layer, as HF's Phi3Model masks.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

void read_hf(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  // transformers 4 writes partial_rotary_factor at the top level, 5 in rope_parameters.
  double partial = float_field(j, "partial_rotary_factor", source, 1.0);
  if (const nlohmann::json* params = field(j, "rope_parameters");
      params != nullptr && params->is_object())
    partial = float_field(*params, "partial_rotary_factor", source, partial);
  if (!(partial > 0 && partial <= 1))
    fail<FormatError>("{}: partial_rotary_factor {} outside (0, 1]", source, partial);
  c.rope_dim =
      static_cast<int64_t>(static_cast<double>(c.d_head) * partial);  // HF: int(head_dim * factor)
  if (c.rope_dim % 2 != 0)
    fail<UnsupportedError>("{}: partial_rotary_factor {} gives an odd number of rotary dims ({})",
                           source, partial, c.rope_dim);
  c.sliding_window = sliding_window_field(j, source);
  if (c.sliding_window > 0) c.slide_every_layer();
  c.rms_eps = float_field(j, "rms_norm_eps", source, 1e-5);  // Phi3Config's default, not 1e-6
}

void read_gguf(const GgufFile&, ModelConfig& c) {
  if (c.sliding_window > 0) c.slide_every_layer();  // phi3.attention.sliding_window
}

constexpr std::string_view kHf[] = {"phi3"};
constexpr std::string_view kGguf[] = {"phi3"};

}  // namespace

const Family& phi3_family() {
  static const Family f{.arch = Architecture::Phi3,
                        .name = "phi3",
                        .hf_model_types = kHf,
                        .gguf_archs = kGguf,
                        .default_context = 4096,
                        .qkv_bias = false,
                        .qk_norm = false,
                        .fused_qkv_hf = true,
                        .fused_gate_up_hf = true,
                        .gguf_permuted_qk = false,
                        .partial_rotary = true,
                        .read_hf = read_hf,
                        .read_gguf = read_gguf};
  return f;
}

}  // namespace ckv
