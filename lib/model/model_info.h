#pragma once
// What `ckv info MODEL` prints: a loaded model's config, family, rope, tensors and tokenizer.
#include <string>

#include <nlohmann/json.hpp>

#include "model/model.h"

namespace ckv {

// The description as JSON (`ckv info --json`): the config's fields, the rope scaling, the
// tensor count per stored dtype and the tokenizer (null without one).
nlohmann::json model_info_json(const Model& model);
// The same as text, one line per aspect, each ending in a newline.
std::string model_info_text(const Model& model);

}  // namespace ckv
