// gemma3: Gemma 3 text (HF Gemma3ForCausalLM, model_type gemma3_text; GGUF gemma3;
// docs/MODELS.md "Gemma 3"). The llama graph with:
//   - embeddings times sqrt(d_model) (HF Gemma3TextScaledWordEmbedding; fp32 here);
//   - Gemma's RMSNorm x * rsqrt(mean(x^2) + eps) * (1 + w): HF stores w, llama.cpp's converter
//     1 + w, so the loader adds 1 to HF's norm weights (Family::hf_norm_plus_one);
//   - four norms per layer: input (attn_norm), post-attention (post_attention_norm, HF
//     post_attention_layernorm), pre-MLP (ffn_norm, HF pre_feedforward_layernorm), post-MLP
//     (post_ffw_norm), each block's output normed before its residual add;
//   - per-head q/k norms before RoPE; logits scaled by query_pre_attn_scalar^-0.5;
//   - GeGLU (gelu_pytorch_tanh);
//   - sliding-window (local) layers and full (global) ones: HF `layer_types`, or
//     `sliding_window_pattern` (every 6th layer global); local layers rotate by
//     rope_local_base_freq unscaled, global ones by rope_theta with rope_scaling;
//   - final logit soft-capping where the config sets it; tied embeddings by default.
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

constexpr int64_t kDefaultPattern = 6;  // Gemma3TextConfig's sliding_window_pattern, llama.cpp's

// Layer l slides unless (l + 1) is a multiple of the pattern.
void pattern_layers(int64_t pattern, ModelConfig& c) {
  c.sliding_layers.assign(static_cast<size_t>(c.n_layer), 0);
  for (int64_t l = 0; l < c.n_layer; ++l) c.sliding_layers[static_cast<size_t>(l)] = (l + 1) % pattern != 0 ? 1 : 0;
}

// What both formats share.
void gemma_graph(ModelConfig& c) {
  c.embed_scale = std::sqrt(static_cast<double>(c.d_model));
  c.post_norms = true;
  c.ffn_act = FfnActivation::GeluTanh;
}

// transformers 5 writes rope_parameters per layer type: {"full_attention": {rope_type,
// rope_theta, factor}, "sliding_attention": {rope_type, rope_theta}}; the local layers' must be
// unscaled.
void read_layer_ropes(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  const nlohmann::json* params = field(j, "rope_parameters");
  if (params == nullptr || !params->is_object() || field(*params, "full_attention") == nullptr) return;
  const nlohmann::json& full = (*params)["full_attention"];
  c.rope_theta = float_field(full, "rope_theta", source, 1e6);
  const std::string type = string_field(full, "rope_type", source, "default");
  c.rope_scaling = {};
  if (type == "linear") {
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = float_field(full, "factor", source, 1.0);
    if (!(c.rope_scaling.factor > 0)) fail<FormatError>("{}: linear rope factor {}", source, c.rope_scaling.factor);
  } else if (type != "default") {
    fail<UnsupportedError>("{}: gemma3 full-attention rope type '{}' is not supported (default, linear)", source, type);
  }
  if (const nlohmann::json* local = field(*params, "sliding_attention")) {
    c.rope_local_theta = float_field(*local, "rope_theta", source, 10000.0);
    if (string_field(*local, "rope_type", source, "default") != "default")
      fail<UnsupportedError>("{}: gemma3 sliding-attention rope must be the default", source);
  }
}

void read_hf(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  gemma_graph(c);
  const std::string act = string_field(j, "hidden_activation", source, string_field(j, "hidden_act", source, "gelu_pytorch_tanh"));
  c.ffn_act = ffn_activation(act, source);
  c.tied_embeddings = bool_field(j, "tie_word_embeddings", source, true);  // Gemma3TextConfig's default
  if (field(j, "rope_theta") == nullptr && field(j, "rope_parameters") == nullptr) c.rope_theta = 1e6;
  c.rope_local_theta = float_field(j, "rope_local_base_freq", source, 10000.0);
  read_layer_ropes(j, source, c);
  const double scalar = float_field(j, "query_pre_attn_scalar", source, 256.0);
  if (!(scalar > 0)) fail<FormatError>("{}: query_pre_attn_scalar {} is not positive", source, scalar);
  c.attn_scale = 1.0 / std::sqrt(scalar);
  c.final_logit_softcap = float_field(j, "final_logit_softcapping", source, 0.0);
  if (field(j, "attn_logit_softcapping") != nullptr)
    fail<UnsupportedError>("{}: attn_logit_softcapping (Gemma 2) is not supported", source);
  if (bool_field(j, "use_bidirectional_attention", source, false))
    fail<UnsupportedError>("{}: use_bidirectional_attention is not supported", source);
  if (bool_field(j, "attention_bias", source, false))
    fail<UnsupportedError>("{}: gemma3 attention_bias is not supported", source);
  c.sliding_window = int_field(j, "sliding_window", source, 4096);
  if (c.sliding_window <= 0) fail<FormatError>("{}: sliding_window {} is not positive", source, c.sliding_window);
  if (!read_layer_types(j, source, c)) {
    const int64_t pattern = int_field(j, "sliding_window_pattern", source, kDefaultPattern);
    if (pattern <= 0) fail<FormatError>("{}: sliding_window_pattern {} is not positive", source, pattern);
    pattern_layers(pattern, c);
  }
}

void read_gguf(const GgufFile& gguf, ModelConfig& c) {
  gemma_graph(c);
  // llama.cpp's gemma3: every 6th layer global, local layers at base 10000 unscaled, and the
  // logit scale 1/sqrt(d_head) except for the 27B model's (1/sqrt(d_model / n_head), its
  // query_pre_attn_scalar), which GGUF does not store.
  const std::string source = gguf.path().string();
  const int64_t pattern = gguf.get_int("gemma3.attention.sliding_window_pattern").value_or(kDefaultPattern);
  if (pattern <= 0) fail<FormatError>("{}: gemma3.attention.sliding_window_pattern {} is not positive", source, pattern);
  if (c.sliding_window <= 0) fail<FormatError>("{}: missing metadata gemma3.attention.sliding_window", source);
  pattern_layers(pattern, c);
  c.rope_local_theta = 10000.0;
  const bool is_27b = c.n_layer == 62 && c.d_model == 5376;
  c.attn_scale = 1.0 / std::sqrt(static_cast<double>(is_27b ? c.d_model / c.n_head : c.d_head));
  c.final_logit_softcap = gguf.get_float("gemma3.final_logit_softcapping").value_or(0.0);
}

// HF's post_attention_layernorm is Gemma's norm of the attention output, not llama's pre-MLP
// norm; the pre-MLP one is pre_feedforward_layernorm.
std::string gemma_hf_name(WeightKind kind, int64_t layer) {
  if (kind == WeightKind::FfnNorm) return fmt::format("model.layers.{}.pre_feedforward_layernorm.weight", layer);
  if (kind == WeightKind::PostAttnNorm) return fmt::format("model.layers.{}.post_attention_layernorm.weight", layer);
  return "";
}

constexpr std::string_view kHf[] = {"gemma3_text"};  // "gemma3": config.cpp reads its text_config
constexpr std::string_view kGguf[] = {"gemma3"};

}  // namespace

nlohmann::json gemma3_text_config(const nlohmann::json& j, const std::string& source) {
  const nlohmann::json* text = family_detail::field(j, "text_config");
  if (text == nullptr || !text->is_object())
    fail<FormatError>("{}: a gemma3 (multimodal) config needs a text_config object", source);
  nlohmann::json out = *text;
  // Gemma3TextConfig's defaults (transformers), which hub configs rely on.
  const nlohmann::json defaults = {{"model_type", "gemma3_text"},     {"vocab_size", 262208},
                                   {"hidden_size", 2304},             {"intermediate_size", 9216},
                                   {"num_hidden_layers", 26},         {"num_attention_heads", 8},
                                   {"num_key_value_heads", 4},        {"head_dim", 256},
                                   {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6}};
  for (const auto& [key, value] : defaults.items())
    if (family_detail::field(out, key.c_str()) == nullptr) out[key] = value;
  if (family_detail::field(out, "tie_word_embeddings") == nullptr && family_detail::field(j, "tie_word_embeddings") != nullptr)
    out["tie_word_embeddings"] = j["tie_word_embeddings"];
  return out;
}

const Family& gemma3_family() {
  static const Family f{.arch = Architecture::Gemma3,
                        .name = "gemma3",
                        .hf_model_types = kHf,
                        .gguf_archs = kGguf,
                        .default_context = 131072,
                        .qkv_bias = false,
                        .qk_norm = true,
                        .fused_qkv_hf = false,
                        .fused_gate_up_hf = false,
                        .gguf_permuted_qk = false,
                        .partial_rotary = false,
                        .read_hf = read_hf,
                        .read_gguf = read_gguf,
                        .hf_norm_plus_one = true,
                        .hf_name = gemma_hf_name};
  return f;
}

}  // namespace ckv
