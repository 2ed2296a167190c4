#pragma once
// A read-only memory-mapped file. Parsers read model files through this and check every
// offset and length against size() before touching bytes().
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace ckv {

class MappedFile {
 public:
  // Throws IoError naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  // Wraps bytes already in memory (tests, fuzzers); the caller keeps them alive.
  static MappedFile from_memory(std::span<const uint8_t> bytes, std::filesystem::path name);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool owns_mapping_ = false;
};

}  // namespace ckv
