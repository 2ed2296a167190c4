#include "model/family.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"

namespace ckv {

std::span<const Family* const> families() {
  // The table: one entry per family_<name>.cpp.
  static const Family* const kFamilies[] = {&llama_family(), &qwen2_family(), &qwen3_family(),
                                            &phi3_family(), &qwen3moe_family(), &gemma3_family()};
  return kFamilies;
}

const Family& family_of(Architecture arch) {
  for (const Family* f : families())
    if (f->arch == arch) return *f;
  fail("no family for architecture {}", static_cast<int>(arch));
}

namespace {

std::string supported_list() {
  std::string out;
  for (const Family* f : families()) out += (out.empty() ? "" : ", ") + std::string(f->name);
  return out;
}

template <typename NamesOf>
const Family& find_family(const std::string& name, const std::string& source, NamesOf names_of) {
  for (const Family* f : families())
    for (std::string_view n : names_of(*f))
      if (n == name) return *f;
  fail<UnsupportedError>("{}: unsupported architecture '{}' (supported: {})", source, name,
                         supported_list());
}

}  // namespace

const Family& family_for_hf(const std::string& model_type, const std::string& source) {
  return find_family(model_type, source, [](const Family& f) { return f.hf_model_types; });
}

const Family& family_for_gguf(const std::string& arch, const std::string& source) {
  return find_family(arch, source, [](const Family& f) { return f.gguf_archs; });
}

std::vector<std::string> family_features(const ModelConfig& c) {
  std::vector<std::string> out;
  if (c.arch_name.ends_with(kTextConfigSuffix))  // config.cpp: a multimodal checkpoint's language model
    out.emplace_back("the text model of a multimodal checkpoint (its vision tower is not loaded)");
  if (c.attention_bias) out.emplace_back("qkv bias");
  if (c.qk_norm) out.emplace_back("q/k norm");
  if (c.fused_qkv) out.emplace_back("fused qkv");
  if (c.fused_gate_up) out.emplace_back("fused gate/up");
  if (c.rope_dim != c.d_head)
    out.push_back(fmt::format("partial rotary {} of {} dims", c.rope_dim, c.d_head));
  if (c.rope_scaling.type == "longrope")
    out.push_back(fmt::format("longrope (original context {}, attention factor {:.4g})",
                              c.rope_scaling.original_max_position,
                              c.rope_scaling.attention_factor));
  if (c.rope_scaling.type == "llama3") out.emplace_back("llama3 rope");
  int64_t sliding = 0;
  for (int64_t l = 0; l < c.n_layer; ++l) sliding += c.window_of(l) > 0 ? 1 : 0;
  if (sliding > 0) {
    std::string global;  // the layers that attend to every key, when some do
    for (int64_t l = 0; l < c.n_layer; ++l)
      if (c.window_of(l) == 0) global += (global.empty() ? "" : " ") + std::to_string(l);
    out.push_back(fmt::format("sliding window {} on {} of {} layers{}", c.sliding_window, sliding, c.n_layer,
                              global.empty() ? "" : " (full attention on layers " + global + ")"));
  }
  if (c.rope_local_theta > 0)
    out.push_back(fmt::format("rope base {:g} on sliding layers, {:g} on full ones", c.rope_local_theta,
                              c.rope_theta));
  if (c.ffn_act == FfnActivation::GeluTanh) out.emplace_back("GeGLU (gelu tanh)");
  if (c.post_norms) out.emplace_back("post-attention and post-MLP norms");
  if (c.embed_scale != 1) out.push_back(fmt::format("embeddings times {:.6g}", c.embed_scale));
  if (c.attn_scale > 0) out.push_back(fmt::format("attention logit scale {:.6g}", c.attn_scale));
  if (c.final_logit_softcap > 0) out.push_back(fmt::format("final logit soft-cap {:g}", c.final_logit_softcap));
  if (c.n_expert > 0) {
    int64_t dense = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) dense += c.expert_layer(l) ? 0 : 1;
    out.push_back(fmt::format("{} experts of d_ff {}", c.n_expert, c.d_ff_expert));
    out.push_back(fmt::format("{} experts per token", c.n_expert_used));
    out.emplace_back(c.norm_topk_prob ? "top-k weights renormalised" : "top-k weights as routed");
    if (dense > 0) out.push_back(fmt::format("{} dense layers", dense));
  }
  return out;
}

void require_default_attention_scale(const ModelConfig& c, std::string_view what) {
  const double standard = 1.0 / std::sqrt(static_cast<double>(c.d_head));
  if (c.attn_scale > 0 && std::abs(c.attn_scale / standard - 1.0) > 1e-6)
    fail<UnsupportedError>("{}: the model scales attention logits by {:.6g} (query_pre_attn_scalar), not "
                           "1/sqrt(d_head) = {:.6g}, and ckv's analyses recompute attention with the latter",
                           what, c.attn_scale, standard);
}

namespace family_detail {

const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_field(const nlohmann::json& j, const char* key, const std::string& source,
                  std::optional<int64_t> fallback) {
  const nlohmann::json* v = field(j, key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    fail<FormatError>("{}: missing integer '{}'", source, key);
  }
  if (v->is_number_unsigned()) {
    const auto u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX))
      fail<FormatError>("{}: '{}' is too large", source, key);
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  fail<FormatError>("{}: '{}' is {}, not an integer", source, key, v->dump());
}

double float_field(const nlohmann::json& j, const char* key, const std::string& source,
                   double fallback) {
  const nlohmann::json* v = field(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) fail<FormatError>("{}: '{}' is {}, not a number", source, key, v->dump());
  return v->get<double>();
}

bool bool_field(const nlohmann::json& j, const char* key, const std::string& source,
                bool fallback) {
  const nlohmann::json* v = field(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) fail<FormatError>("{}: '{}' is {}, not a bool", source, key, v->dump());
  return v->get<bool>();
}

std::string string_field(const nlohmann::json& j, const char* key, const std::string& source,
                         const std::string& fallback) {
  const nlohmann::json* v = field(j, key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) fail<FormatError>("{}: '{}' is {}, not a string", source, key, v->dump());
  return v->get<std::string>();
}

int64_t sliding_window_field(const nlohmann::json& j, const std::string& source) {
  const nlohmann::json* v = field(j, "sliding_window");
  if (v == nullptr) return 0;
  if (!v->is_number_integer() || v->get<int64_t>() <= 0)
    fail<FormatError>("{}: 'sliding_window' is {}, not a positive integer", source, v->dump());
  return v->get<int64_t>();
}

bool read_layer_types(const nlohmann::json& j, const std::string& source, ModelConfig& c) {
  const nlohmann::json* v = field(j, "layer_types");
  if (v == nullptr) return false;
  if (!v->is_array() || static_cast<int64_t>(v->size()) != c.n_layer)
    fail<FormatError>("{}: 'layer_types' is not a list of {} layer types", source, c.n_layer);
  c.sliding_layers.clear();
  for (const nlohmann::json& t : *v) {
    if (t == "sliding_attention")
      c.sliding_layers.push_back(1);
    else if (t == "full_attention")
      c.sliding_layers.push_back(0);
    else
      fail<UnsupportedError>("{}: layer type {} is not supported (sliding_attention, full_attention)", source,
                             t.dump());
  }
  return true;
}

void read_qwen_window(const nlohmann::json& j, const std::string& source, ModelConfig& c,
                      int64_t default_max_window_layers) {
  if (!bool_field(j, "use_sliding_window", source, false)) return;
  c.sliding_window = sliding_window_field(j, source);
  if (c.sliding_window == 0) return;
  if (read_layer_types(j, source, c)) return;
  const int64_t from = int_field(j, "max_window_layers", source, default_max_window_layers);
  c.sliding_layers.assign(static_cast<size_t>(c.n_layer), 0);
  for (int64_t l = std::max<int64_t>(0, from); l < c.n_layer; ++l) c.sliding_layers[static_cast<size_t>(l)] = 1;
}

void refuse_short_gguf_window(const GgufFile& gguf, ModelConfig& c) {
  if (c.sliding_window > 0 && c.sliding_window < c.context_length)
    fail<UnsupportedError>(
        "{}: sliding-window attention ({}.attention.sliding_window {}) is not supported from GGUF for {}: "
        "the file does not say which layers it applies to",
        gguf.path().string(), c.arch_name, c.sliding_window, c.arch_name);
  c.sliding_window = 0;  // covers the context: full attention
}

void refuse_attention_bias(const nlohmann::json& j, const std::string& source,
                           std::string_view family) {
  // HF's attention_bias also biases o_proj, which ModelWeights has no slot for.
  if (bool_field(j, "attention_bias", source, false))
    fail<UnsupportedError>("{}: {} attention_bias (q/k/v/o_proj biases) is not supported", source,
                           family);
}

int64_t expert_count_field(const nlohmann::json& j, const std::string& source, int64_t fallback) {
  const bool has_a = field(j, "num_experts") != nullptr, has_b = field(j, "num_local_experts") != nullptr;
  const int64_t a = int_field(j, "num_experts", source, fallback);
  const int64_t b = int_field(j, "num_local_experts", source, fallback);
  if (has_a && has_b && a != b)
    fail<FormatError>("{}: num_experts {} and num_local_experts {} differ (one attribute in HF)", source, a, b);
  return has_a ? a : b;
}

void read_gguf_experts(const GgufFile& gguf, ModelConfig& c) {
  const std::string source = gguf.path().string();
  auto key = [&](std::string_view suffix) { return fmt::format("{}.{}", c.arch_name, suffix); };
  c.n_expert = gguf.get_int(key("expert_count")).value_or(0);
  if (c.n_expert == 0) return;
  const std::optional<int64_t> used = gguf.get_int(key("expert_used_count"));
  if (!used) fail<FormatError>("{}: missing metadata {}", source, key("expert_used_count"));
  c.n_expert_used = *used;
  c.d_ff_expert = gguf.get_int(key("expert_feed_forward_length")).value_or(c.d_ff);
  c.norm_topk_prob = gguf.get_bool(key("expert_weights_norm")).value_or(true);
  for (const char* shared : {"expert_shared_count", "expert_shared_feed_forward_length"})
    if (gguf.get_int(key(shared)).value_or(0) != 0)
      fail<UnsupportedError>("{}: shared experts ({}) are not supported", source, key(shared));
  // llama.cpp's enum: 1 softmax, 2 sigmoid.
  if (const auto gating = gguf.get_int(key("expert_gating_func")); gating && *gating != 1)
    fail<UnsupportedError>("{}: expert gating function {} ({}) is not supported (softmax)", source, *gating,
                           key("expert_gating_func"));
  if (const auto scale = gguf.get_float(key("expert_weights_scale")); scale && *scale != 1.0)
    fail<UnsupportedError>("{}: expert weight scale {} ({}) is not supported", source, *scale,
                           key("expert_weights_scale"));
}

}  // namespace family_detail
}  // namespace ckv
