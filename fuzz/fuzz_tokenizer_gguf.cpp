// GGUF tokenizer-metadata fuzzer: a vocabulary from a hostile file (tokens, merges, scores,
// types, special ids, chat template) must build or throw ckv::Error, and a built tokenizer
// must encode and decode a fixed text without crashing.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ckv::GgufFile gguf(ckv::MappedFile::from_memory({data, size}, "fuzz.gguf"));
    auto tok = ckv::tokenizer_from_gguf(gguf);
    auto ids = tok->encode("Hello world 12345 <|im_start|> \xc3\xa9\xf0\x9f\x98\x80\n\t  x", true, true);
    (void)tok->decode(ids);
    if (!tok->chat_template().empty()) (void)tok->apply_chat_template({{"user", "hi"}}, true);
  } catch (const ckv::Error&) {
  }
  return 0;
}
