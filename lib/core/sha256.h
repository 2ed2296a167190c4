#pragma once
// SHA-256 digests for provenance: the model file, input files and golden data are named by
// their hash in every output. Backed by OpenSSL's libcrypto, which uses the CPU's SHA
// extensions, so hashing a multi-GB model costs seconds, not minutes.
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace ckv {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hashing, for data that arrives in pieces (a file being written, a stream).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::span<const uint8_t> bytes);
  void update(std::string_view bytes);
  // Finishes the digest; the object can then only be destroyed.
  Sha256Digest finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Lower-case hex, 64 characters, as `sha256sum` prints.
std::string to_hex(const Sha256Digest& digest);

std::string sha256_hex(std::span<const uint8_t> bytes);
std::string sha256_hex(std::string_view bytes);

// Streams the file in large blocks. Throws IoError naming the path when it cannot be
// opened or read.
std::string sha256_file(const std::filesystem::path& path);

// A model's identity: a file's sha256; for an HF directory, the sha256 of its sorted
// "sha256  name" manifest (what `sha256sum *` prints), so any changed file changes it.
std::string model_sha256(const std::filesystem::path& path);

}  // namespace ckv
