#pragma once
// A small read-only HDF5 reader for the golden files written by tests/reference/*.py
// (layout in tests/reference/README.md). Test-only: errors throw std::runtime_error.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ckv::test {

template <typename T>
struct Array {
  std::vector<int64_t> shape;
  std::vector<T> data;  // row-major
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
};

class GoldenFile {
 public:
  explicit GoldenFile(const std::filesystem::path& path);
  ~GoldenFile();
  GoldenFile(const GoldenFile&) = delete;
  GoldenFile& operator=(const GoldenFile&) = delete;

  bool has(const std::string& name) const;  // a dataset or group at this path exists
  // Datasets converted to the requested type by HDF5.
  Array<float> floats(const std::string& name) const;
  Array<int32_t> ints(const std::string& name) const;
  bool has_attr(const std::string& object, const std::string& attr) const;
  // Attributes of an object ("/" for the root). Numeric attributes read as int64/double.
  std::string attr_string(const std::string& object, const std::string& attr) const;
  int64_t attr_int(const std::string& object, const std::string& attr) const;
  // Names of the members of a group, in HDF5's order.
  std::vector<std::string> members(const std::string& group) const;

 private:
  std::filesystem::path path_;
  int64_t file_ = -1;  // hid_t
};

}  // namespace ckv::test
