#pragma once
// Chat templates. ckv renders ChatML (recognised by "<|im_start|>" in the template text) and
// Gemma's (below) itself instead of running Jinja. ChatML: every message becomes
//   <|im_start|>{role}\n{content}<|im_end|>\n
// and the generation prompt is "<|im_start|>assistant\n". A default system message that the
// template inserts when the first message is not "system" (SmolLM2, Qwen2) is read from the
// template's own string literal.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace ckv {

bool is_chatml_template(std::string_view chat_template);
// Gemma's (recognised by "<start_of_turn>"): rendered as HF's Gemma 3 template does, starting
// with "<bos>" (model/chat_template.cpp).
bool is_gemma_template(std::string_view chat_template);
// Gemma 3's turn format as a Jinja template (ckv's short form of HF's, without the system
// prefix), the chat template of a Gemma GGUF that carries none (Gemma 3 270M's).
extern const std::string_view kGemma3ChatTemplate;

// The default system block ("<|im_start|>system\n...<|im_end|>\n"), when the template has one.
std::optional<std::string> chatml_default_system(std::string_view chat_template);

// UnsupportedError naming `source` for an empty or non-ChatML template.
std::string render_chat_template(std::string_view chat_template,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, std::string_view source);

}  // namespace ckv
