#include "model/chat_template.h"

#include "core/error.h"
#include "core/text.h"

namespace ckv {
namespace {

// Reads the Jinja string literal that starts at text[pos] (a quote), unescaping it.
std::optional<std::string> read_literal(std::string_view text, size_t pos) {
  if (pos >= text.size() || (text[pos] != '\'' && text[pos] != '"')) return std::nullopt;
  const char quote = text[pos];
  std::string out;
  for (size_t i = pos + 1; i < text.size(); ++i) {
    char c = text[i];
    if (c == quote) return out;
    if (c == '\\' && i + 1 < text.size()) {
      char e = text[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      continue;
    }
    out += c;
  }
  return std::nullopt;  // unterminated
}

// Jinja's `| trim`: leading and trailing whitespace off.
std::string_view jinja_trim(std::string_view s) {
  return trim(s, " \t\n\r");
}

// Gemma 3's template (HF google/gemma-3-*-it tokenizer_config.json): <bos>, then per message
// "<start_of_turn>{role}\n{content | trim}<end_of_turn>\n" with "assistant" named "model"; a
// leading system message becomes the first turn's prefix ("{system}\n\n", untrimmed).
std::string render_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out = "<bos>", prefix;
  size_t first = 0;
  if (!messages.empty() && messages.front().role == "system") {
    prefix = messages.front().content + "\n\n";
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out += "<start_of_turn>" + (m.role == "assistant" ? std::string("model") : m.role) + "\n";
    if (i == first) out += prefix;
    out += std::string(jinja_trim(m.content)) + "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

const std::string_view kGemma3ChatTemplate =
    "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ 'model' if message['role'] == 'assistant' "
    "else message['role'] }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}";

bool is_gemma_template(std::string_view chat_template) {
  return chat_template.find("<start_of_turn>") != std::string_view::npos;
}

bool is_chatml_template(std::string_view chat_template) {
  return chat_template.find("<|im_start|>") != std::string_view::npos;
}

std::optional<std::string> chatml_default_system(std::string_view chat_template) {
  // SmolLM2: {% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n...' }}
  for (std::string_view condition :
       {"messages[0]['role'] != 'system'", "messages[0]['role'] != \"system\"",
        "messages[0].role != 'system'"}) {
    size_t at = chat_template.find(condition);
    if (at == std::string_view::npos) continue;
    size_t open = chat_template.find("{{", at);
    if (open == std::string_view::npos) return std::nullopt;
    size_t quote = chat_template.find_first_not_of(" -", open + 2);
    auto literal = read_literal(chat_template, quote);
    if (literal && literal->starts_with("<|im_start|>system\n") &&
        literal->ends_with("<|im_end|>\n"))
      return literal;
    return std::nullopt;
  }
  return std::nullopt;
}

std::string render_chat_template(std::string_view chat_template,
                                 const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, std::string_view source) {
  if (chat_template.empty()) fail<UnsupportedError>("{}: the model has no chat template", source);
  if (is_gemma_template(chat_template)) return render_gemma(messages, add_generation_prompt);
  if (!is_chatml_template(chat_template))
    fail<UnsupportedError>(
        "{}: chat template is neither ChatML (<|im_start|>) nor Gemma's (<start_of_turn>)", source);
  std::string out;
  if (!messages.empty() && messages.front().role != "system")
    out += chatml_default_system(chat_template).value_or("");
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace ckv
