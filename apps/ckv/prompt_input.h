#pragma once
// The prompt inputs shared by every subcommand that runs a model: --prompt, --prompt-file,
// --tokens, --chat. They resolve to token ids checked against the model.
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "data/records.h"
#include "model/model.h"

namespace ckv::app {

struct PromptOptions {
  std::string prompt;       // --prompt TEXT
  std::string prompt_file;  // --prompt-file F
  std::string tokens_file;  // --tokens F (ids; bypasses the tokenizer)
  bool chat = false;        // --chat: wrap the text as a user message in the chat template
};

void add_prompt_options(CLI::App& cmd, PromptOptions& o);

// Token ids of the prompt; `fallback_text` is used when no input flag is given. Throws
// InputError for unreadable files, ids out of range, an empty prompt or one longer than
// the model's context.
std::vector<int32_t> prompt_tokens(const PromptOptions& o, const Model& model,
                                   const std::string& fallback_text);

// The whole file as bytes; InputError "<path>: cannot read the prompt file".
std::string read_text_file(const std::string& path);

}  // namespace ckv::app
