#include "output/describe.h"

#include <nlohmann/json.hpp>

#include "model/tokenizer.h"

namespace ckv {

void describe(h5::Object& object, std::string_view description, std::string_view unit) {
  object.set_attr_string("description", description);
  if (!unit.empty()) object.set_attr_string("unit", unit);
}

std::vector<std::string> token_texts(const Tokenizer* tokenizer, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  if (tokenizer == nullptr) return out;
  out.reserve(ids.size());
  for (int32_t id : ids) out.push_back(tokenizer->token_text(id));
  return out;
}

void set_token_text(h5::Dataset& ids, const std::vector<std::string>& text) {
  if (text.empty()) return;
  // Byte-level pieces may be partial UTF-8: replace, not throw, so the attribute is valid JSON.
  ids.set_attr_string("token_text",
                      nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace ckv
