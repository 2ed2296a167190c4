#pragma once
// The decoder families as data (llama.cpp's split of hyperparameters, tensors and
// graph). A family says what HF config.json and GGUF files call it, which per-layer features
// its graph has, and reads (or refuses, in one line) the config options that are its own;
// config.cpp reads what every family shares, model_loader.cpp lists the tensors from the
// features, forward.cpp runs the features. A new family is one family_<name>.cpp file that
// defines its Family and one entry in the table of family.cpp.
//
//   const Family& f = family_for_hf("qwen3", source);   // or family_for_gguf(...)
//   f.read_hf(json, source, config);                   // its own options
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/tensor_names.h"
#include "model/config.h"

namespace ckv {

class GgufFile;

struct Family {
  Architecture arch;
  std::string_view name;                             // ckv's name, as `ckv info` prints it
  std::span<const std::string_view> hf_model_types;  // config.json "model_type" values
  std::span<const std::string_view> gguf_archs;      // GGUF "general.architecture" values
  int64_t default_context;  // HF max_position_embeddings when config.json has none
  // Graph features every model of the family has (a config may add more, e.g. a llama GGUF
  // with q/k/v biases):
  bool qkv_bias;          // q/k/v biases (qwen2)
  bool qk_norm;           // per-head q/k RMSNorm before RoPE (qwen3)
  bool fused_qkv_hf;      // HF stores qkv_proj (phi3); GGUF files may store either form
  bool fused_gate_up_hf;  // HF stores gate_up_proj (phi3)
  bool gguf_permuted_qk;  // llama.cpp's converter interleaves each q/k head's rows (llama)
  bool partial_rotary;    // RoPE may rotate fewer than d_head dims (phi3's partial_rotary_factor)
  // The family's own config options, after the shared fields are read: fills `c`, throws
  // UnsupportedError naming an option ckv does not implement, FormatError for a bad value.
  void (*read_hf)(const nlohmann::json& j, const std::string& source, ModelConfig& c);
  void (*read_gguf)(const GgufFile& gguf, ModelConfig& c);
  // HF RMSNorm weights are stored as w with the norm multiplying by 1 + w (gemma3; llama.cpp's
  // converter stores 1 + w in GGUF): the loader adds 1 to every HF norm weight.
  bool hf_norm_plus_one = false;
  // The family's HF tensor names where they differ from the table's (io/tensor_names.h);
  // null or "" = the table's.
  std::string (*hf_name)(WeightKind kind, int64_t layer) = nullptr;
};

// Every family, in the order `ckv info` and error messages list them.
std::span<const Family* const> families();
const Family& family_of(Architecture arch);
// Throw UnsupportedError "unsupported architecture 'X' (supported: ...)" when none matches.
const Family& family_for_hf(const std::string& model_type, const std::string& source);
const Family& family_for_gguf(const std::string& arch, const std::string& source);

// The graph features a config turns on, in words, for `ckv info`: "q/k norm", "fused qkv",
// "fused gate/up", "qkv bias", "partial rotary 12 of 16 dims", "longrope (...)", "sliding
// window N on L of M layers (...)", "GeGLU", "post-norms", "rope base B on sliding layers",
// "logit scale", "final logit soft-cap", "128 experts of d_ff 768", "8 experts per token",
// "top-k weights renormalised", "N dense layers". Empty for a plain llama.
std::vector<std::string> family_features(const ModelConfig& c);

// Whether the model's attention logits are scaled by 1/sqrt(d_head), the scale ckv's
// analyses (ckv bound, check, the metrics of ckv mask) recompute attention with from recorded
// q/k; Gemma 3 with query_pre_attn_scalar != head_dim is not. Those subcommands refuse such a
// model (UnsupportedError naming `what`) rather than report numbers of another attention.
void require_default_attention_scale(const ModelConfig& c, std::string_view what);

// The families' definitions (one family_<name>.cpp each).
const Family& llama_family();
const Family& qwen2_family();
const Family& qwen3_family();
const Family& phi3_family();
const Family& qwen3moe_family();
const Family& gemma3_family();

// The language model's config of a multimodal Gemma 3 checkpoint (Gemma3ForConditionalGeneration,
// model_type "gemma3"): its text_config with Gemma3TextConfig's defaults for the fields a
// hub config leaves out (family_gemma3.cpp). FormatError without a text_config object.
nlohmann::json gemma3_text_config(const nlohmann::json& j, const std::string& source);
// What config_from_hf_json appends to the arch_name of such a checkpoint ("gemma3 (text_config)").
inline constexpr std::string_view kTextConfigSuffix = " (text_config)";

// Shared pieces of the families' readers (family.cpp).
namespace family_detail {
const nlohmann::json* field(const nlohmann::json& j, const char* key);  // null when absent or null
// `fallback` when absent; FormatError naming the key when mistyped (or missing, for
// int_field without a fallback).
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& source,
                  std::optional<int64_t> fallback = std::nullopt);
std::string string_field(const nlohmann::json& j, const char* key, const std::string& source,
                         const std::string& fallback);
bool bool_field(const nlohmann::json& j, const char* key, const std::string& source, bool fallback);
double float_field(const nlohmann::json& j, const char* key, const std::string& source,
                   double fallback);
// A window of HF config.json (`sliding_window`, an integer or null) or 0 when there is none.
int64_t sliding_window_field(const nlohmann::json& j, const std::string& source);
// HF's `layer_types` ("sliding_attention" / "full_attention", one per layer) into
// c.sliding_layers; false when the config has none. FormatError for a wrong length or type.
bool read_layer_types(const nlohmann::json& j, const std::string& source, ModelConfig& c);
// qwen2, qwen3: with `use_sliding_window`, `sliding_window` on the layers `layer_types` marks,
// or else on the layers from `max_window_layers` on (transformers' Qwen2Config); without it,
// no window (HF writes a window it does not apply).
void read_qwen_window(const nlohmann::json& j, const std::string& source, ModelConfig& c,
                      int64_t default_max_window_layers);
// Refuses a GGUF `{arch}.attention.sliding_window` shorter than the context where GGUF does
// not say which layers it applies to (qwen2, qwen3: HF's max_window_layers is not in the
// file); keeps one that covers it.
void refuse_short_gguf_window(const GgufFile& gguf, ModelConfig& c);
// Refuses HF `attention_bias: true` where it also biases o_proj (llama, qwen3).
void refuse_attention_bias(const nlohmann::json& j, const std::string& source,
                           std::string_view family);
// HF's expert count: `num_experts` or `num_local_experts`, the same attribute of Qwen3MoeConfig
// and MixtralConfig under either name (transformers 5 writes num_local_experts for both);
// `fallback` when absent, FormatError when both are given and differ.
int64_t expert_count_field(const nlohmann::json& j, const std::string& source, int64_t fallback);
// The experts of a GGUF (`{arch}.expert_count`, `expert_used_count`,
// `expert_feed_forward_length`, else d_ff; `expert_weights_norm`, else renormalised as
// llama.cpp's llama and qwen3moe graphs do); none when expert_count is absent or 0. Refuses
// shared experts, a gating function other than softmax and a weight scale other than 1.
void read_gguf_experts(const GgufFile& gguf, ModelConfig& c);
}  // namespace family_detail

}  // namespace ckv
