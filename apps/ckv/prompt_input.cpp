#include "core/input_file.h"
#include "prompt_input.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ckv::app {

void add_prompt_options(CLI::App& cmd, PromptOptions& o) {
  auto* prompt = cmd.add_option("-p,--prompt", o.prompt, "Prompt text");
  auto* file = cmd.add_option("--prompt-file", o.prompt_file, "Path of a file holding the prompt text");
  auto* tokens = cmd.add_option("--tokens", o.tokens_file,
                                "Path of a file of token ids (whitespace/comma separated, or a JSON array); "
                                "bypasses the tokenizer");
  prompt->excludes(file)->excludes(tokens);
  file->excludes(tokens);
  cmd.add_flag("--chat", o.chat, "Apply the model's chat template (text inputs only)")
      ->excludes(tokens);
}

std::string read_text_file(const std::string& path) {
  return read_regular_file(path, "the prompt file");
}

std::vector<int32_t> prompt_tokens(const PromptOptions& o, const Model& model,
                                   const std::string& fallback_text) {
  std::vector<int32_t> ids;
  std::string source;
  if (!o.tokens_file.empty()) {
    ids = read_token_ids(o.tokens_file, model.config.vocab);
    source = o.tokens_file;
  } else {
    std::string text = !o.prompt_file.empty() ? read_text_file(o.prompt_file)
                       : !o.prompt.empty()    ? o.prompt
                                              : fallback_text;
    source = !o.prompt_file.empty() ? o.prompt_file : "--prompt";
    if (!model.tokenizer) {
      fail<InputError>("{}: the model has no tokenizer; give token ids with --tokens",
                       model.source.path.string());
    }
    if (o.chat) text = model.tokenizer->apply_chat_template({{"user", text}}, true);
    // Special tokens in the text are recognised, as HF tokenizers do. A chat rendering
    // carries its own and gets no BOS; plain text gets the model's BOS when it asks for one.
    ids = model.tokenizer->encode(text, /*add_bos=*/!o.chat, /*parse_special=*/true);
  }
  if (ids.empty()) fail<InputError>("{}: the prompt has no tokens", source);
  if (model.config.context_length > 0 &&
      static_cast<int64_t>(ids.size()) > model.config.context_length) {
    fail<InputError>("{}: the prompt has {} tokens, longer than the model's context of {}", source,
                     ids.size(), model.config.context_length);
  }
  return ids;
}

}  // namespace ckv::app
