#pragma once
// Hyperparameters of a supported decoder, read from HF config.json or GGUF metadata.
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ckv {

class GgufFile;

enum class Architecture { Llama, Qwen2 };

struct RopeScaling {
  std::string type = "default";  // "default" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

struct ModelConfig {
  Architecture arch = Architecture::Llama;
  std::string arch_name = "llama";  // as the file names it
  int64_t n_layer = 0;
  int64_t d_model = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t d_head = 0;
  int64_t d_ff = 0;
  int64_t vocab = 0;
  int64_t context_length = 0;
  double rms_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool attention_bias = false;  // q/k/v bias (qwen2, or llama with attention_bias)
  bool tied_embeddings = false;

  int64_t group_size() const { return n_head / n_kv_head; }  // query heads per KV head
  // Checks positivity and divisibility; throws FormatError naming `source`.
  void validate(const std::string& source) const;
};

// Throws UnsupportedError naming the architecture when it is not llama or qwen2.
Architecture parse_architecture(const std::string& name, const std::string& source);

// From an HF config.json (transformers 4 `rope_theta`/`rope_scaling` or transformers 5
// `rope_parameters`). Throws FormatError for missing or mistyped fields, UnsupportedError
// for architectures and options ckv does not implement. Does not call validate().
ModelConfig config_from_hf_json(const nlohmann::json& j, const std::string& source);

// From GGUF metadata ({arch}.* keys, docs/MODELS.md). vocab falls back to the tokenizer's token
// count, then to token_embd's rows; tied_embeddings is set when output.weight is absent.
// GGUF keeps llama3 rope factors in the tensor rope_freqs.weight, so rope_scaling stays
// "default" here and the loader fills ModelWeights::rope_freq_factors. Does not validate().
ModelConfig config_from_gguf(const GgufFile& gguf);

}  // namespace ckv
