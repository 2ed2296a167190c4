#pragma once
// Typed errors thrown by the library. Only apps/ prints them and chooses exit codes.
// Every message names the offending input (a file, a flag, a tensor) and what is wrong,
// in one line.
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace ckv {

// Base of every error ckv reports to the user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A file whose content is malformed, truncated or inconsistent (model files, dumps).
class FormatError : public Error {
 public:
  using Error::Error;
};

// A valid file or request that ckv does not support (architecture, quant type, dtype).
class UnsupportedError : public Error {
 public:
  using Error::Error;
};

// Bad user input: flags, token ids out of range, prompts longer than the context.
class InputError : public Error {
 public:
  using Error::Error;
};

// A flag whose value is wrong in itself (out of range, malformed, contradicting another
// flag): the command line must change. apps/ exits 2 for it, as for CLI11's parse errors.
class UsageError : public InputError {
 public:
  using InputError::InputError;
};

// A failure of the compute device: a CUDA or cuBLAS call that failed (naming the call,
// file and line; out of memory names the size asked for), or a device asked of a build
// without it.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// An operating-system failure: a file that cannot be opened, mapped or written.
class IoError : public Error {
 public:
  using Error::Error;
};

// `text` with every control byte (and DEL) written as \xNN, so a message that quotes a file
// cannot carry terminal escapes or line breaks, nor be cut at a NUL by what().
inline std::string escape_control(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if (b < 0x20 || b == 0x7F) out += fmt::format("\\x{:02x}", b);
    else out += ch;
  }
  return out;
}

template <typename E = Error, typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw E(escape_control(fmt::format(f, std::forward<Args>(args)...)));
}

}  // namespace ckv
