#pragma once
// GGUF v3 reader (narrated layout in gguf.cpp). Every count, length and offset in the file
// is checked before use; a malformed file throws FormatError naming the file and field.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/mapped_file.h"
#include "io/tensor_source.h"

namespace ckv {

// A metadata value. Integers of any width are widened; arrays keep their element kind.
struct GgufArray {
  std::vector<int64_t> ints;         // u8..i64 and bool elements
  std::vector<double> floats;        // f32/f64 elements
  std::vector<std::string> strings;  // string elements
  uint32_t element_type = 0;         // GGUF value type id of the elements
  uint64_t size() const { return ints.size() + floats.size() + strings.size(); }
};
using GgufValue = std::variant<int64_t, uint64_t, double, bool, std::string, GgufArray>;

class GgufFile final : public TensorSource {
 public:
  explicit GgufFile(const std::filesystem::path& path);
  explicit GgufFile(MappedFile file);  // for tests and fuzzers

  std::string_view format() const override { return "gguf"; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const TensorInfo* find(std::string_view name) const override;
  Tensor load_f32(std::string_view name) const override;
  std::span<const uint8_t> stored_bytes(std::string_view name) const override;

  uint32_t version() const { return version_; }
  const std::filesystem::path& path() const { return file_.path(); }
  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }

  // Typed getters: std::nullopt when the key is absent; FormatError when present with an
  // incompatible type (any integer type is accepted for integers).
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;  // also accepts integers
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;

 private:
  void parse();

  MappedFile file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace ckv
