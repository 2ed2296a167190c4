#pragma once
// The tokenizer alone (no weights) that `ckv niah` / `ckv ruler` fit prompts with, and the
// model's context length: a .gguf file, a tokenizer.json, or an HF directory
// (tokenizer.json + config.json). A model without a tokenizer throws (FormatError/IoError).
#include <cstdint>
#include <filesystem>
#include <memory>

#include "model/tokenizer.h"

namespace ckv {

struct PromptTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  int64_t context_length = 0;  // 0: unknown (a bare tokenizer.json)
};

PromptTokenizer load_prompt_tokenizer(const std::filesystem::path& path);

}  // namespace ckv
