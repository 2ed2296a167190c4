// Text fuzzer: any byte string (invalid UTF-8, lone surrogates, special-token fragments) must
// tokenise and decode with each shipped test vocabulary, or throw ckv::Error; never crash.
// The vocabularies are the small GGUFs of tests/data/tokenizers (CKV_FUZZ_TOKENIZER_DIR).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "model/tokenizer.h"

namespace {
std::vector<std::unique_ptr<ckv::Tokenizer>> load_all() {
  std::vector<std::unique_ptr<ckv::Tokenizer>> out;
  for (const char* name : {"gpt2.vocab.gguf", "gpt2-default.vocab.gguf", "smollm.vocab.gguf",
                           "llama3.vocab.gguf", "qwen2.vocab.gguf", "spm.vocab.gguf"}) {
    ckv::GgufFile gguf(std::string(CKV_FUZZ_TOKENIZER_DIR) + "/" + name);
    out.push_back(ckv::tokenizer_from_gguf(gguf));
  }
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizers = load_all();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& tok : tokenizers) {
    try {
      (void)tok->decode(tok->encode(text, true, (size & 1) != 0));
    } catch (const ckv::Error&) {
    }
  }
  return 0;
}
