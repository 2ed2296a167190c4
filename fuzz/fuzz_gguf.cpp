// GGUF parser fuzzer: any input must parse or throw ckv::Error; never crash or read out of
// bounds. Parsed files also go through config extraction and tensor dequantisation.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ckv::GgufFile gguf(ckv::MappedFile::from_memory({data, size}, "fuzz.gguf"));
    for (const ckv::TensorInfo& t : gguf.tensors()) {
      if (t.nbytes <= (1u << 20)) (void)gguf.load_f32(t.name);
    }
    try {
      ckv::config_from_gguf(gguf).validate("fuzz.gguf");
    } catch (const ckv::Error&) {
    }
  } catch (const ckv::Error&) {
  }
  return 0;
}
