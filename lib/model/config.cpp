#include "model/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/gguf.h"
#include "io/tensor_names.h"

namespace ckv {
namespace {

// Bounds that no real decoder reaches; they keep a crafted config from sizing absurd
// allocations before any tensor is read.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxWidth = int64_t{1} << 20;  // d_model, d_ff, n_head*d_head
constexpr int64_t kMaxHeads = int64_t{1} << 14;
constexpr int64_t kMaxVocab = int64_t{1} << 26;

const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t int_field(const nlohmann::json& j, const char* key, const std::string& source,
                  std::optional<int64_t> fallback = std::nullopt) {
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

// transformers 4 writes rope_theta and rope_scaling at the top level; transformers 5 moves
// both into rope_parameters. Either way only "default" and "llama3" are implemented.
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
  if (type != "llama3") {
    fail<UnsupportedError>("{}: rope type '{}' is not supported (default, llama3)", source, type);
  }
  RopeScaling& r = c.rope_scaling;
  r.type = type;
  r.factor = float_field(*params, "factor", source, r.factor);
  r.low_freq_factor = float_field(*params, "low_freq_factor", source, r.low_freq_factor);
  r.high_freq_factor = float_field(*params, "high_freq_factor", source, r.high_freq_factor);
  r.original_max_position =
      int_field(*params, "original_max_position_embeddings", source, r.original_max_position);
}

}  // namespace

Architecture parse_architecture(const std::string& name, const std::string& source) {
  // Mistral checkpoints are the llama layout under another name.
  if (name == "llama" || name == "mistral") return Architecture::Llama;
  if (name == "qwen2") return Architecture::Qwen2;
  fail<UnsupportedError>("{}: unsupported architecture '{}' (supported: llama, qwen2)", source,
                         name);
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
  check(d_ff > 0 && d_ff <= kMaxWidth, fmt::format("d_ff = {}", d_ff));
  check(vocab > 0 && vocab <= kMaxVocab, fmt::format("vocab = {}", vocab));
  check(context_length >= 0, fmt::format("context_length = {}", context_length));
  check(rms_eps > 0 && rms_eps < 1, fmt::format("rms_eps = {}", rms_eps));
  check(rope_theta > 0, fmt::format("rope_theta = {}", rope_theta));
  if (rope_scaling.type == "llama3") {
    const RopeScaling& r = rope_scaling;
    check(r.factor > 0 && r.low_freq_factor > 0 && r.high_freq_factor > r.low_freq_factor &&
              r.original_max_position > 0,
          fmt::format("llama3 rope scaling factor {}, low {}, high {}, original {}", r.factor,
                      r.low_freq_factor, r.high_freq_factor, r.original_max_position));
  }
}

ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) fail<FormatError>("{}: config is not a JSON object", source);
  ModelConfig c;
  c.arch_name = string_field(j, "model_type", source, "");
  if (c.arch_name.empty()) fail<FormatError>("{}: missing 'model_type'", source);
  c.arch = parse_architecture(c.arch_name, source);
  c.n_layer = int_field(j, "num_hidden_layers", source);
  c.d_model = int_field(j, "hidden_size", source);
  c.n_head = int_field(j, "num_attention_heads", source);
  c.n_kv_head = int_field(j, "num_key_value_heads", source, c.n_head);
  c.d_head = int_field(j, "head_dim", source, c.n_head > 0 ? c.d_model / c.n_head : 0);
  c.d_ff = int_field(j, "intermediate_size", source);
  c.vocab = int_field(j, "vocab_size", source);
  const bool qwen = c.arch == Architecture::Qwen2;
  c.context_length = int_field(j, "max_position_embeddings", source, qwen ? 32768 : 2048);
  c.rms_eps = float_field(j, "rms_norm_eps", source, 1e-6);
  read_rope(j, source, c);
  c.tied_embeddings = bool_field(j, "tie_word_embeddings", source, false);
  // qwen2 always has q/k/v biases (and no o_proj bias).
  c.attention_bias = qwen;
  if (!qwen && bool_field(j, "attention_bias", source, false)) {
    // HF llama's attention_bias also biases o_proj, which ModelWeights has no slot for.
    fail<UnsupportedError>("{}: llama attention_bias (q/k/v/o_proj biases) is not supported",
                           source);
  }
  if (bool_field(j, "mlp_bias", source, false)) {
    fail<UnsupportedError>("{}: mlp_bias is not supported", source);
  }
  const std::string act = string_field(j, "hidden_act", source, "silu");
  if (act != "silu")
    fail<UnsupportedError>("{}: hidden_act '{}' is not supported (silu)", source, act);
  if (qwen && bool_field(j, "use_sliding_window", source, false)) {
    fail<UnsupportedError>("{}: qwen2 sliding-window attention is not supported", source);
  }
  // Mistral v0.1 attends to a window of 4096 keys; ckv computes full causal attention, which
  // equals it only while the window covers the whole context. Refuse rather than compute
  // full attention silently (qwen2 writes a window but enables it by use_sliding_window).
  if (const auto it = j.find("sliding_window");
      !qwen && it != j.end() && !it->is_null() &&
      (!it->is_number_integer() || it->get<int64_t>() < c.context_length)) {
    fail<UnsupportedError>("{}: sliding-window attention (sliding_window {}) is not supported",
                           source, it->dump());
  }
  return c;
}

ModelConfig config_from_gguf(const GgufFile& gguf) {
  const std::string source = gguf.path().string();
  ModelConfig c;
  const std::optional<std::string> arch = gguf.get_string("general.architecture");
  if (!arch) fail<FormatError>("{}: missing general.architecture", source);
  c.arch_name = *arch;
  c.arch = parse_architecture(c.arch_name, source);
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
  if (const auto r = gguf.get_int(key("rope.dimension_count")); r && *r != c.d_head) {
    fail<UnsupportedError>("{}: partial rotary embedding ({} of {} dims) is not supported", source,
                           *r, c.d_head);
  }
  const std::optional<double> eps = gguf.get_float(key("attention.layer_norm_rms_epsilon"));
  if (!eps)
    fail<FormatError>("{}: missing metadata {}", source, key("attention.layer_norm_rms_epsilon"));
  c.rms_eps = *eps;
  c.rope_theta = gguf.get_float(key("rope.freq_base")).value_or(10000.0);
  if (const auto type = gguf.get_string(key("rope.scaling.type")); type && *type != "none") {
    const double factor = gguf.get_float(key("rope.scaling.factor")).value_or(1.0);
    if (!(*type == "linear" && factor == 1.0)) {
      fail<UnsupportedError>("{}: rope scaling '{}' is not supported", source, *type);
    }
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
  if (const auto w = gguf.get_int(key("attention.sliding_window")); w && *w > 0 && *w < c.context_length)
    fail<UnsupportedError>("{}: sliding-window attention ({} {}) is not supported", source,
                           key("attention.sliding_window"), *w);
  c.tied_embeddings = gguf.find(gguf_name(WeightKind::Output)) == nullptr;
  c.attention_bias =
      c.arch == Architecture::Qwen2 || gguf.find(gguf_name(WeightKind::AttnQBias, 0)) != nullptr;
  return c;
}

}  // namespace ckv
