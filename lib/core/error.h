#pragma once
// Typed errors thrown by the library. Only apps/ prints them and chooses exit codes.
// Every message names the offending input (a file, a flag, a tensor) and what is wrong,
// in one line.
#include <stdexcept>
#include <string>

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

// An operating-system failure: a file that cannot be opened, mapped or written.
class IoError : public Error {
 public:
  using Error::Error;
};

template <typename E = Error, typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ckv
