#include "model/config.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/tensor_names.h"
#include "model/family.h"

namespace ckv {
namespace {

using namespace family_detail;

// Bounds that no real decoder reaches; they keep a crafted config from sizing absurd
// allocations before any tensor is read.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // d_model, d_ff, n_head*d_head
constexpr int64_t kMaxHeads = int64_t{1} << 14;
constexpr int64_t kMaxVocab = int64_t{1} << 26;
constexpr int64_t kMaxExperts = int64_t{1} << 12;

std::vector<float> factor_list(const nlohmann::json& params, const char* key, const std::string& source) {
  const nlohmann::json* v = field(params, key);
  if (v == nullptr || !v->is_array()) fail<FormatError>("{}: longrope needs a list '{}'", source, key);
  std::vector<float> out;
  for (const nlohmann::json& x : *v) {
    if (!x.is_number()) fail<FormatError>("{}: '{}' holds {}, not a number", source, key, x.dump());
    out.push_back(static_cast<float>(x.get<double>()));
  }
  return out;
}

// LongRoPE's cos/sin scale when the config gives none (HF modeling_rope_utils): with
// factor = context / original, sqrt(1 + ln(factor) / ln(original)), 1 for factor <= 1.
double default_longrope_attention_factor(double factor, int64_t original) {
  if (factor <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original)));
}

// transformers 4 writes rope_theta and rope_scaling at the top level; transformers 5 moves
// both into rope_parameters. Implemented: "default", "llama3", "longrope" (alias "su").
void read_rope(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  c.rope_theta = float_field(j, "rope_theta", source, 10000.0);
  const nlohmann::json* params = field(j, "rope_parameters");
  if (params == nullptr) params = field(j, "rope_scaling");
  if (params == nullptr) return;
  if (!params->is_object()) fail<FormatError>("{}: rope parameters are not an object", source);
  c.rope_theta = float_field(*params, "rope_theta", source, c.rope_theta);
  std::string type = string_field(*params, "rope_type", source, "");
  if (type.empty()) type = string_field(*params, "type", source, "default");
  if (type == "default") return;
  RopeScaling& r = c.rope_scaling;
  if (type == "longrope" || type == "su") {
    r.type = "longrope";
    r.short_factor = factor_list(*params, "short_factor", source);
    r.long_factor = factor_list(*params, "long_factor", source);
    r.original_max_position = int_field(
        *params, "original_max_position_embeddings", source,
        int_field(j, "original_max_position_embeddings", source));
    if (r.original_max_position <= 0)
      fail<FormatError>("{}: original_max_position_embeddings = {}", source, r.original_max_position);
    r.factor = float_field(*params, "factor", source,
                           static_cast<double>(c.context_length) / static_cast<double>(r.original_max_position));
    r.attention_factor = float_field(*params, "attention_factor", source,
                                     default_longrope_attention_factor(r.factor, r.original_max_position));
    return;
  }
  if (type == "linear") {  // positions divided by factor (Gemma 3's global layers)
    r.type = type;
    r.factor = float_field(*params, "factor", source, r.factor);
    if (!(r.factor > 0)) fail<FormatError>("{}: linear rope factor {}", source, r.factor);
    return;
  }
  if (type != "llama3") {
    fail<UnsupportedError>("{}: rope type '{}' is not supported (default, linear, llama3, longrope)", source, type);
  }
  r.type = type;
  r.factor = float_field(*params, "factor", source, r.factor);
  r.low_freq_factor = float_field(*params, "low_freq_factor", source, r.low_freq_factor);
  r.high_freq_factor = float_field(*params, "high_freq_factor", source, r.high_freq_factor);
  r.original_max_position =
      int_field(*params, "original_max_position_embeddings", source, r.original_max_position);
}

}  // namespace

FfnActivation ffn_activation(const std::string& name, const std::string& source) {
  if (name == "silu") return FfnActivation::Silu;
  if (name == "gelu_pytorch_tanh") return FfnActivation::GeluTanh;
  fail<UnsupportedError>("{}: hidden activation '{}' is not supported (silu, gelu_pytorch_tanh)", source, name);
}

namespace {

// The features every model of a family has.
void apply_family(const Family& f, ModelConfig& c) {
  c.arch = f.arch;
  c.attention_bias = c.attention_bias || f.qkv_bias;
  c.qk_norm = f.qk_norm;
}

}  // namespace

Architecture parse_architecture(const std::string& name, const std::string& source) {
  return family_for_hf(name, source).arch;
}

bool ModelConfig::expert_layer(int64_t l) const {
  return n_expert > 0 && (l + 1) % decoder_sparse_step == 0 &&
         std::find(mlp_only_layers.begin(), mlp_only_layers.end(), l) == mlp_only_layers.end();
}

void ModelConfig::validate(const std::string& source) const {
  auto check = [&](bool ok, std::string_view what) {
    if (!ok) fail<FormatError>("{}: invalid config: {}", source, what);
  };
  check(n_layer > 0 && n_layer <= kMaxLayers, fmt::format("n_layer = {}", n_layer));
  check(d_model > 0 && d_model <= kMaxWidth, fmt::format("d_model = {}", d_model));
  check(n_head > 0 && n_head <= kMaxHeads, fmt::format("n_head = {}", n_head));
  check(n_kv_head > 0 && n_kv_head <= n_head && n_head % n_kv_head == 0,
        fmt::format("n_head = {} is not a multiple of n_kv_head = {}", n_head, n_kv_head));
  check(d_head > 0 && d_head % 2 == 0 && d_head <= kMaxWidth,
        fmt::format("d_head = {} (must be positive and even)", d_head));
  check(n_head * d_head <= kMaxWidth, fmt::format("n_head*d_head = {}", n_head * d_head));
  check(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= d_head,
        fmt::format("rotary dims {} of d_head {} (must be positive, even, at most d_head)", rope_dim, d_head));
  check(d_ff > 0 && d_ff <= kMaxWidth, fmt::format("d_ff = {}", d_ff));
  check(vocab > 0 && vocab <= kMaxVocab, fmt::format("vocab = {}", vocab));
  check(context_length >= 0, fmt::format("context_length = {}", context_length));
  check(rms_eps > 0 && rms_eps < 1, fmt::format("rms_eps = {}", rms_eps));
  check(rope_theta > 0, fmt::format("rope_theta = {}", rope_theta));
  check(sliding_window >= 0, fmt::format("sliding_window = {}", sliding_window));
  check(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == n_layer,
        fmt::format("{} layer types for {} layers", sliding_layers.size(), n_layer));
  check(std::isfinite(embed_scale) && embed_scale > 0, fmt::format("embedding scale {}", embed_scale));
  check(std::isfinite(attn_scale) && attn_scale >= 0, fmt::format("attention scale {}", attn_scale));
  check(std::isfinite(final_logit_softcap) && final_logit_softcap >= 0,
        fmt::format("final logit soft-cap {}", final_logit_softcap));
  check(std::isfinite(rope_local_theta) && rope_local_theta >= 0,
        fmt::format("local rope base {}", rope_local_theta));
  if (n_expert > 0) {
    check(n_expert <= kMaxExperts, fmt::format("n_expert = {}", n_expert));
    check(n_expert_used > 0 && n_expert_used <= n_expert,
          fmt::format("{} experts per token of {}", n_expert_used, n_expert));
    check(d_ff_expert > 0 && d_ff_expert <= kMaxWidth, fmt::format("expert d_ff = {}", d_ff_expert));
    check(decoder_sparse_step > 0 && decoder_sparse_step <= kMaxLayers,
          fmt::format("decoder_sparse_step = {}", decoder_sparse_step));
    for (int64_t l : mlp_only_layers)
      check(l >= 0 && l < n_layer, fmt::format("mlp_only_layers holds {} of {} layers", l, n_layer));
  } else {
    check(n_expert == 0 && n_expert_used == 0, fmt::format("{} experts per token of {}", n_expert_used, n_expert));
  }
  const RopeScaling& r = rope_scaling;
  if (r.type == "llama3") {
    check(r.factor > 0 && r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
              r.original_max_position > 0,
          fmt::format("llama3 rope scaling factor {}, low {}, high {}, original {}", r.factor,
                      r.low_freq_factor, r.high_freq_factor, r.original_max_position));
  }
  if (r.type == "longrope") {
    const auto half = static_cast<size_t>(rope_dim / 2);
    check(r.short_factor.size() == half && r.long_factor.size() == half,
          fmt::format("longrope short/long factors of {}/{} entries, the {} rotary dims need {}",
                      r.short_factor.size(), r.long_factor.size(), rope_dim, half));
    bool positive = r.original_max_position > 0 && std::isfinite(r.attention_factor) && r.attention_factor > 0;
    for (const auto* list : {&r.short_factor, &r.long_factor})
      for (float x : *list) positive = positive && std::isfinite(x) && x > 0;
    check(positive, "longrope factors, attention factor and original context must be positive");
  }
}

ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) fail<FormatError>("{}: config is not a JSON object", source);
  ModelConfig c;
  c.arch_name = string_field(j, "model_type", source, "");
  if (c.arch_name.empty()) fail<FormatError>("{}: missing 'model_type'", source);
  if (c.arch_name == "gemma3") {  // Gemma3ForConditionalGeneration: its language model
    ModelConfig text = config_from_hf_json(gemma3_text_config(j, source), source);
    text.arch_name = c.arch_name + std::string(kTextConfigSuffix);  // `ckv info` says it is the text part
    return text;
  }
  const Family& family = family_for_hf(c.arch_name, source);
  c.arch = family.arch;
  c.n_layer = int_field(j, "num_hidden_layers", source);
  c.d_model = int_field(j, "hidden_size", source);
  c.n_head = int_field(j, "num_attention_heads", source);
  c.n_kv_head = int_field(j, "num_key_value_heads", source, c.n_head);
  c.d_head = int_field(j, "head_dim", source, c.n_head > 0 ? c.d_model / c.n_head : 0);
  c.rope_dim = c.d_head;
  c.d_ff = int_field(j, "intermediate_size", source);
  c.vocab = int_field(j, "vocab_size", source);
  c.context_length = int_field(j, "max_position_embeddings", source, family.default_context);
  c.rms_eps = float_field(j, "rms_norm_eps", source, 1e-6);
  read_rope(j, source, c);
  c.tied_embeddings = bool_field(j, "tie_word_embeddings", source, false);
  apply_family(family, c);
  c.fused_qkv = family.fused_qkv_hf;
  c.fused_gate_up = family.fused_gate_up_hf;
  if (bool_field(j, "mlp_bias", source, false)) {
    fail<UnsupportedError>("{}: mlp_bias is not supported", source);
  }
  c.ffn_act = ffn_activation(string_field(j, "hidden_act", source, "silu"), source);
  family.read_hf(j, source, c);
  return c;
}

ModelConfig config_from_gguf(const GgufFile& gguf) {
  const std::string source = gguf.path().string();
  ModelConfig c;
  const std::optional<std::string> arch = gguf.get_string("general.architecture");
  if (!arch) fail<FormatError>("{}: missing general.architecture", source);
  c.arch_name = *arch;
  const Family& family = family_for_gguf(c.arch_name, source);
  c.arch = family.arch;
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", c.arch_name, suffix); };
  auto required_int = [&](std::string_view suffix) {
    const std::optional<int64_t> v = gguf.get_int(key(suffix));
    if (!v) fail<FormatError>("{}: missing metadata {}", source, key(suffix));
    return *v;
  };
  c.n_layer = required_int("block_count");
  c.d_model = required_int("embedding_length");
  c.d_ff = required_int("feed_forward_length");
  c.context_length = required_int("context_length");
  // GGUF states the context it was trained for; 0 (or less) is no context at all, not "unlimited".
  if (c.context_length < 1) fail<FormatError>("{}: invalid config: {} = {}", source, key("context_length"), c.context_length);
  c.n_head = required_int("attention.head_count");
  c.n_kv_head = gguf.get_int(key("attention.head_count_kv")).value_or(c.n_head);
  c.d_head =
      gguf.get_int(key("attention.key_length")).value_or(c.n_head > 0 ? c.d_model / c.n_head : 0);
  if (const auto v = gguf.get_int(key("attention.value_length")); v && *v != c.d_head) {
    fail<UnsupportedError>("{}: value head size {} differs from key head size {}", source, *v,
                           c.d_head);
  }
  c.rope_dim = gguf.get_int(key("rope.dimension_count")).value_or(c.d_head);
  if (c.rope_dim != c.d_head && !family.partial_rotary) {
    fail<UnsupportedError>("{}: partial rotary embedding ({} of {} dims) is not supported", source,
                           c.rope_dim, c.d_head);
  }
  const std::optional<double> eps = gguf.get_float(key("attention.layer_norm_rms_epsilon"));
  if (!eps)
    fail<FormatError>("{}: missing metadata {}", source, key("attention.layer_norm_rms_epsilon"));
  c.rms_eps = *eps;
  c.rope_theta = gguf.get_float(key("rope.freq_base")).value_or(10000.0);
  if (const auto type = gguf.get_string(key("rope.scaling.type")); type && *type != "none") {
    const double factor = gguf.get_float(key("rope.scaling.factor")).value_or(1.0);
    if (*type != "linear" || !(factor > 0)) {
      fail<UnsupportedError>("{}: rope scaling '{}' (factor {}) is not supported", source, *type, factor);
    }
    if (factor != 1.0) {
      c.rope_scaling.type = "linear";
      c.rope_scaling.factor = factor;
    }
  }
  // LongRoPE in GGUF (llama.cpp's phi3 converter): the two factor lists as tensors.
  const std::string short_name = gguf_name(WeightKind::RopeFactorsShort);
  const std::string long_name = gguf_name(WeightKind::RopeFactorsLong);
  if (gguf.find(short_name) != nullptr || gguf.find(long_name) != nullptr) {
    RopeScaling& r = c.rope_scaling;
    r.type = "longrope";
    for (const auto& [name, list] : {std::pair{short_name, &r.short_factor}, std::pair{long_name, &r.long_factor}}) {
      if (gguf.find(name) == nullptr) fail<FormatError>("{}: longrope needs tensor '{}'", source, name);
      *list = gguf.load_f32(name).storage();
    }
    r.original_max_position = gguf.get_int(key("rope.scaling.original_context_length")).value_or(0);
    if (r.original_max_position <= 0)
      fail<FormatError>("{}: longrope needs metadata {}", source, key("rope.scaling.original_context_length"));
    r.factor = static_cast<double>(c.context_length) / static_cast<double>(r.original_max_position);
    r.attention_factor = gguf.get_float(key("rope.scaling.attn_factor"))
                             .value_or(default_longrope_attention_factor(r.factor, r.original_max_position));
  }
  if (const auto v = gguf.get_int(key("vocab_size"))) {
    c.vocab = *v;
  } else if (const auto* tokens = [&]() -> const GgufArray* {
               const auto it = gguf.metadata().find("tokenizer.ggml.tokens");
               return it == gguf.metadata().end() ? nullptr : std::get_if<GgufArray>(&it->second);
             }()) {
    c.vocab = static_cast<int64_t>(tokens->size());
  } else if (const TensorInfo* embd = gguf.find(gguf_name(WeightKind::TokenEmbd))) {
    c.vocab = embd->shape.empty() ? 0 : embd->shape[0];
  }
  c.sliding_window = gguf.get_int(key("attention.sliding_window")).value_or(0);
  c.tied_embeddings = gguf.find(gguf_name(WeightKind::Output)) == nullptr;
  c.attention_bias = gguf.find(gguf_name(WeightKind::AttnQBias, 0)) != nullptr;
  apply_family(family, c);
  // A family with fused projections may store either form in GGUF; the fused one when present.
  c.fused_qkv = family.fused_qkv_hf && gguf.find(gguf_name(WeightKind::AttnQkv, 0)) != nullptr;
  c.fused_gate_up = family.fused_gate_up_hf && gguf.find(gguf_name(WeightKind::FfnGate, 0)) == nullptr;
  family.read_gguf(gguf, c);
  return c;
}

}  // namespace ckv
