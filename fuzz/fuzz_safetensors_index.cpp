// model.safetensors.index.json fuzzer.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)ckv::parse_safetensors_index(std::string_view(reinterpret_cast<const char*>(data), size),
                                       "fuzz.index.json");
  } catch (const ckv::Error&) {
  }
  return 0;
}
