#include "model/unicode_normalize.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/ustring.h>

#include "core/error.h"

namespace ckv {

std::string nfc_normalize(std::string_view utf8) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t utf16_length = 0;
  // Validation only: a null destination with capacity 0 reports the length or an error.
  u_strFromUTF8(nullptr, 0, &utf16_length, utf8.data(), static_cast<int32_t>(utf8.size()), &status);
  if (status == U_INVALID_CHAR_FOUND || status == U_ILLEGAL_ARGUMENT_ERROR) return std::string(utf8);
  status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) fail("ICU: NFC normaliser unavailable ({})", u_errorName(status));
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  nfc->normalizeUTF8(0, icu::StringPiece(utf8.data(), static_cast<int32_t>(utf8.size())), sink,
                     nullptr, status);
  if (U_FAILURE(status)) return std::string(utf8);
  return out;
}

}  // namespace ckv
