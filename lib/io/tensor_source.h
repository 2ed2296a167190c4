#pragma once
// A source of named tensors in a model file: a GGUF file or a safetensors directory.
// Loaders translate these file-specific names to the canonical table (io/tensor_names.h).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "io/dtype.h"

namespace ckv {

// The stored types (DType) and their table: io/dtype.h.
std::string_view dtype_name(DType t);

struct TensorInfo {
  std::string name;            // as written in the file
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // HF row-major order, outermost first (GGUF dims reversed)
  uint64_t offset = 0;         // absolute byte offset of the data in its file
  uint64_t nbytes = 0;         // bytes of data, checked against the shape and dtype
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual std::string_view format() const = 0;  // "gguf" or "safetensors"
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  // nullptr when absent.
  virtual const TensorInfo* find(std::string_view name) const = 0;
  // The tensor dequantised/converted to float32 with TensorInfo::shape. Throws FormatError
  // naming the file and tensor when absent or malformed.
  virtual Tensor load_f32(std::string_view name) const = 0;
  // The tensor's stored bytes (TensorInfo::nbytes of them) inside the mapped file: valid
  // while this source lives. Throws FormatError naming the file and tensor when absent.
  virtual std::span<const uint8_t> stored_bytes(std::string_view name) const = 0;
};

}  // namespace ckv
