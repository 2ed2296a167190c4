#pragma once
// A loaded model: config, weights in HF layout (matrices in their stored dtype, norms and
// biases in float32), tokenizer, and where it came from.
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/tokenizer.h"
#include "model/weights.h"

namespace ckv {

struct ModelSourceInfo {
  std::filesystem::path path;   // .gguf file or safetensors directory
  std::string format;           // "gguf" or "safetensors"
  size_t tensor_count = 0;
  std::map<std::string, size_t> dtype_counts;  // stored dtype name -> tensor count
};

struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the model has none (then --tokens only)
  ModelSourceInfo source;
};

// Loads a .gguf file or an HF directory (config.json + safetensors + tokenizer.json).
// Every failure throws a typed ckv::Error naming the path and the problem.
Model load_model(const std::filesystem::path& path);

// The embedded default model: $CKV_MODEL if set, else models/SmolLM2-135M-Instruct.Q4_1.gguf
// searched upwards from the executable and the working directory.
std::filesystem::path default_model_path();

}  // namespace ckv
