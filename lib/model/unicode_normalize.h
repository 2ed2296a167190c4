#pragma once
// Unicode normalisation for tokenizer.json normalizers (real Qwen2 tokenizers apply NFC
// before pre-tokenisation), through ICU.
#include <string>
#include <string_view>

namespace ckv {

// The NFC form of UTF-8 text. Text that is not valid UTF-8 is returned unchanged: the
// byte-level tokenizer then sees exactly the bytes it was given.
std::string nfc_normalize(std::string_view utf8);

}  // namespace ckv
