#include "data/prompt_tokenizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/input_file.h"
#include "io/gguf.h"
#include "model/config.h"

namespace ckv {

PromptTokenizer load_prompt_tokenizer(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) {
    if (!std::filesystem::exists(path / "tokenizer.json"))
      fail<FormatError>("{}: no tokenizer (tokenizer.json is missing)", path.string());
    PromptTokenizer m{tokenizer_from_json(path / "tokenizer.json"), 0};
    const std::filesystem::path config = path / "config.json";
    const std::string text = read_regular_file(config, "the model config");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail<FormatError>("{}: not valid JSON ({})", config.string(), e.what());
    }
    m.context_length = config_from_hf_json(j, config.string()).context_length;
    return m;
  }
  if (path.extension() == ".json") return {tokenizer_from_json(path), 0};
  const GgufFile gguf(path);
  return {tokenizer_from_gguf(gguf), config_from_gguf(gguf).context_length};
}

}  // namespace ckv
