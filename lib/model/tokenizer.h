#pragma once
// Tokenizers: byte-level BPE (GPT-2, SmolLM, Llama 3, Qwen2 pre-tokenisers) and
// SentencePiece-style BPE with byte fallback (Llama 2, Mistral), built from tokenizer.json
// or from GGUF metadata.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ckv {

class GgufFile;

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text to ids. Special tokens written in the text (e.g. "<|im_start|>") are recognised
  // when parse_special is true. add_bos follows the model's own setting when true.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos = true,
                                      bool parse_special = true) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual std::string token_text(int32_t id) const = 0;  // one token as readable text

  virtual std::string_view kind() const = 0;  // "bpe" (byte-level) or "spm" (byte fallback)
  virtual std::string_view pre_tokenizer() const = 0;  // "gpt2", "smollm", "llama3", "qwen2", ...
  virtual int64_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;

  // The chat template text as the model file stores it ("" when none) and its rendering.
  // ChatML is supported; other templates throw UnsupportedError.
  virtual const std::string& chat_template() const = 0;
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt = true) const = 0;
};

// HF tokenizer.json (a tokenizer_config.json beside it adds the chat template, add_bos_token
// and the bos/eos tokens). IoError when it cannot be opened, FormatError for malformed files,
// UnsupportedError for models, normalizers or pre-tokenisers ckv does not implement; all name
// the file.
std::unique_ptr<Tokenizer> tokenizer_from_json(const std::filesystem::path& tokenizer_json);
// GGUF metadata tokenizer.ggml.* (model "gpt2" or "llama") and tokenizer.chat_template.
std::unique_ptr<Tokenizer> tokenizer_from_gguf(const GgufFile& gguf);

// Token ids given directly (`--tokens FILE`): integers separated by whitespace and/or commas,
// or one JSON array of integers. InputError names the source and the offending entry, also
// for ids outside [0, vocab_size).
std::vector<int32_t> parse_token_ids(std::string_view text, std::string_view source,
                                     int64_t vocab_size);
std::vector<int32_t> read_token_ids(const std::filesystem::path& path, int64_t vocab_size);

}  // namespace ckv
