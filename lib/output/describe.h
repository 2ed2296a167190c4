#pragma once
// What makes a ckv output readable with h5py alone (docs/ANALYSIS.md "Reading with h5py"):
// every dataset carries a short `description` attribute, and `unit` where its values have
// one; a token-id dataset carries the tokens as text beside the ids.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/h5.h"

namespace ckv {

class Tokenizer;

// Sets the string attributes `description` and, when not empty, `unit`.
void describe(h5::Object& object, std::string_view description, std::string_view unit = {});

// A new dataset `name` of g holding `data`, with its dimension names and its description.
template <typename T>
h5::Dataset put_described(h5::Group& g, const std::string& name, h5::DType type,
                          const std::vector<int64_t>& shape, const std::vector<T>& data,
                          const std::vector<std::string>& dims, std::string_view description,
                          std::string_view unit = {}) {
  h5::Dataset d = g.create_dataset(name, type, shape);
  d.write(data);
  d.set_dims(dims);
  describe(d, description, unit);
  return d;
}

// Each id as the tokenizer shows one token (Tokenizer::token_text); empty without a tokenizer.
std::vector<std::string> token_texts(const Tokenizer* tokenizer, const std::vector<int32_t>& ids);

// Stores `text` (one string per id, or nothing when empty) as the attribute `token_text` of
// the ids' dataset: a JSON list of strings (one variable-length string, so any length fits
// an attribute), h5py: json.loads(ds.attrs["token_text"]).
void set_token_text(h5::Dataset& ids, const std::vector<std::string>& text);

}  // namespace ckv
