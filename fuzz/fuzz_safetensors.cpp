// safetensors file fuzzer: header parsing, entry checks and conversion of every tensor.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ckv::SafetensorsFile file(ckv::MappedFile::from_memory({data, size}, "fuzz.safetensors"));
    for (const ckv::TensorInfo& t : file.tensors()) (void)file.load_f32(t.name);
  } catch (const ckv::Error&) {
  }
  return 0;
}
