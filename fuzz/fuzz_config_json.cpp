// HF config.json fuzzer: config extraction and validation.
#include <cstddef>
#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* text = reinterpret_cast<const char*>(data);
  const nlohmann::json j = nlohmann::json::parse(text, text + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    ckv::config_from_hf_json(j, "fuzz.config.json").validate("fuzz.config.json");
  } catch (const ckv::Error&) {
  }
  return 0;
}
