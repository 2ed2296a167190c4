#include "model/family.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"

namespace ckv {

std::span<const Family* const> families() {
  // The table: one entry per family_<name>.cpp.
  static const Family* const kFamilies[] = {&llama_family(), &qwen2_family(), &qwen3_family(),
                                            &phi3_family(), &qwen3moe_family()};
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
  if (c.sliding_window > 0 && (c.context_length == 0 || c.sliding_window < c.context_length))
    out.push_back(fmt::format("sliding window {} (longer passes refused)", c.sliding_window));
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

void refuse_use_sliding_window(const nlohmann::json& j, const std::string& source,
                               std::string_view family) {
  if (bool_field(j, "use_sliding_window", source, false))
    fail<UnsupportedError>("{}: {} sliding-window attention is not supported", source, family);
}

void refuse_short_gguf_window(const GgufFile& gguf, ModelConfig& c) {
  if (c.sliding_window > 0 && c.sliding_window < c.context_length)
    fail<UnsupportedError>(
        "{}: sliding-window attention ({}.attention.sliding_window {}) is not supported",
        gguf.path().string(), c.arch_name, c.sliding_window);
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
