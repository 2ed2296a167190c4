#pragma once
// What many tests share: the folders of tests/data, reading a file whole, and bitwise
// equality of float vectors.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace ckv::test {

inline const std::filesystem::path kTestData = CKV_TEST_DATA_DIR;
inline const std::filesystem::path kLoadersDir =
    kTestData / "loaders";  // tiny models, loader cases
inline const std::filesystem::path kTokenizersDir =
    kTestData / "tokenizers";  // tokenizer files and goldens

// The bytes of file p; throws std::runtime_error when it cannot be opened.
inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + p.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::vector<uint8_t> read_file_bytes(const std::filesystem::path& p) {
  const std::string s = read_file(p);
  return {s.begin(), s.end()};
}

// a and b hold the same float32 bit patterns (NaN payloads and signed zeros included).
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float p, float q) {
           return std::bit_cast<uint32_t>(p) == std::bit_cast<uint32_t>(q);
         });
}

}  // namespace ckv::test
