#include "io/weight_matrix.h"

#include <fmt/format.h>

#include "core/error.h"
#include "io/quant.h"

namespace ckv {

WeightMatrix WeightMatrix::view(DType dtype, int64_t rows, int64_t cols,
                                std::span<const uint8_t> bytes, std::shared_ptr<const void> owner) {
  if (rows < 0 || cols < 0) fail<FormatError>("weight matrix [{}, {}]: negative shape", rows, cols);
  if (cols % block_elements(dtype) != 0)
    fail<FormatError>("weight matrix [{}, {}] of {}: a row is not a whole number of {}-element blocks",
                      rows, cols, dtype_name(dtype), block_elements(dtype));
  const uint64_t row_bytes = storage_bytes(dtype, cols);
  if (rows > 0 && row_bytes > UINT64_MAX / static_cast<uint64_t>(rows))
    fail<FormatError>("weight matrix [{}, {}] of {}: size overflows", rows, cols, dtype_name(dtype));
  if (bytes.size() != row_bytes * static_cast<uint64_t>(rows))
    fail<FormatError>("weight matrix [{}, {}] of {}: {} bytes, expected {}", rows, cols,
                      dtype_name(dtype), bytes.size(), row_bytes * static_cast<uint64_t>(rows));
  WeightMatrix w;
  w.dtype_ = dtype;
  w.rows_ = rows;
  w.cols_ = cols;
  w.row_bytes_ = static_cast<int64_t>(row_bytes);
  w.data_ = bytes.data();
  w.owner_ = std::move(owner);
  return w;
}

WeightMatrix WeightMatrix::from_tensor(Tensor t) {
  if (t.rank() != 2) fail<InputError>("weight matrix from tensor {}: not rank 2", t.shape_string());
  auto owned = std::make_shared<const Tensor>(std::move(t));
  const auto* bytes = reinterpret_cast<const uint8_t*>(owned->data());
  return view(DType::F32, owned->dim(0), owned->dim(1),
              {bytes, static_cast<size_t>(owned->numel()) * sizeof(float)}, owned);
}

WeightMatrix WeightMatrix::borrow(const Tensor& t) {
  if (t.rank() != 2) fail<InputError>("weight matrix from tensor {}: not rank 2", t.shape_string());
  const auto* bytes = reinterpret_cast<const uint8_t*>(t.data());
  return view(DType::F32, t.dim(0), t.dim(1), {bytes, static_cast<size_t>(t.numel()) * sizeof(float)},
              nullptr);
}

std::string WeightMatrix::shape_string() const {
  return fmt::format("[{}, {}] {}", rows_, cols_, dtype_name(dtype_));
}

void WeightMatrix::set_row_map(std::vector<int32_t> map) {
  if (static_cast<int64_t>(map.size()) != rows_)
    fail<FormatError>("row map of {} entries for a matrix of {} rows", map.size(), rows_);
  std::vector<char> seen(map.size(), 0);
  for (int32_t r : map) {
    if (r < 0 || r >= rows_ || seen[static_cast<size_t>(r)])
      fail<FormatError>("row map is not a permutation of the {} rows", rows_);
    seen[static_cast<size_t>(r)] = 1;
  }
  row_map_ = std::move(map);
}

const float* WeightMatrix::f32_rows(int64_t begin) const {
  if (dtype_ != DType::F32 || !row_map_.empty()) return nullptr;
  // A float pointer into the file must be 4-byte aligned; GGUF aligns its tensors, a
  // safetensors F32 tensor after an odd-sized header may not be (then it is converted).
  if (reinterpret_cast<uintptr_t>(data_) % alignof(float) != 0) return nullptr;
  return reinterpret_cast<const float*>(data_) + begin * cols_;
}

void WeightMatrix::rows_f32(int64_t begin, int64_t count, float* dst) const {
  if (begin < 0 || count < 0 || begin + count > rows_)
    fail<InputError>("weight rows [{}, {}) outside a matrix of {} rows", begin, begin + count, rows_);
  const auto n = static_cast<size_t>(cols_);
  if (row_map_.empty()) {
    dequantize(dtype_, {data_ + begin * row_bytes_, static_cast<size_t>(count * row_bytes_)},
               {dst, n * static_cast<size_t>(count)});
    return;
  }
  for (int64_t r = 0; r < count; ++r)
    dequantize(dtype_, {row(begin + r), static_cast<size_t>(row_bytes_)},
               {dst + static_cast<size_t>(r) * n, n});
}

Tensor WeightMatrix::to_f32() const {
  Tensor out({rows_, cols_});
  rows_f32(0, rows_, out.data());
  return out;
}

}  // namespace ckv
