#pragma once
// HF safetensors reader: one file, or a directory sharded by model.safetensors.index.json.
// Header JSON is parsed with nlohmann-json and every entry is checked (dtype, shape,
// data_offsets inside the buffer, size = numel * element size, no overlaps or holes).
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "io/tensor_source.h"

namespace ckv {

class SafetensorsFile final : public TensorSource {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  explicit SafetensorsFile(MappedFile file);  // for tests and fuzzers

  std::string_view format() const override { return "safetensors"; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const TensorInfo* find(std::string_view name) const override;
  Tensor load_f32(std::string_view name) const override;
  std::span<const uint8_t> stored_bytes(std::string_view name) const override;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void parse();
  MappedFile file_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

// Parses the text of a model.safetensors.index.json: tensor name -> shard file name. Shard
// names must be plain file names (no directories), so an index cannot point outside its
// folder. Throws FormatError naming `source`.
std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::string& source);

// A model directory: model.safetensors, or the shards named by model.safetensors.index.json.
class SafetensorsDir final : public TensorSource {
 public:
  explicit SafetensorsDir(const std::filesystem::path& dir);
  std::string_view format() const override { return "safetensors"; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const TensorInfo* find(std::string_view name) const override;
  Tensor load_f32(std::string_view name) const override;
  std::span<const uint8_t> stored_bytes(std::string_view name) const override;

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> owner_;  // tensor name -> shard index
};

}  // namespace ckv
