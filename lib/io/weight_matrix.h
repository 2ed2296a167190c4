#pragma once
// A weight matrix [rows, cols] in its stored dtype (F32, F16, BF16 or a ggml block format):
// a view into a memory-mapped model file (no copy) or bytes it owns. Row r of the HF layout
// is stored row row_map[r] when a row map is set: that is how GGUF's llama Q/K row
// permutation is undone without touching the bytes (a quantisation block never crosses a
// row). Consumers convert rows to float32 where they compute (ops/linear converts tiles;
// the embedding lookup converts one row; the analysis converts W_O of one layer).
//
//   WeightMatrix w = WeightMatrix::view(DType::Q4_K, rows, cols, bytes, owner);
//   w.rows_f32(begin, count, dst);   // dst [count, cols] float32
//   Tensor all = w.to_f32();         // [rows, cols], for small matrices and tests
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/tensor_source.h"

namespace ckv {

class WeightMatrix {
 public:
  WeightMatrix() = default;

  // A view of rows*cols elements of dtype at `bytes` (exactly storage_bytes(dtype, rows*cols)
  // bytes, checked); `owner` keeps them alive (the mapped file). cols must be a whole number
  // of blocks, so every row starts on a block boundary. Throws FormatError otherwise.
  static WeightMatrix view(DType dtype, int64_t rows, int64_t cols, std::span<const uint8_t> bytes,
                           std::shared_ptr<const void> owner);
  // A float32 matrix that owns its values (tests, dequantised-at-load weights). t: rank 2.
  static WeightMatrix from_tensor(Tensor t);
  // A non-owning float32 view of t (rank 2); t must outlive the view.
  static WeightMatrix borrow(const Tensor& t);

  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }  // out (HF row-major [out, in])
  int64_t cols() const { return cols_; }  // in
  std::vector<int64_t> shape() const { return {rows_, cols_}; }
  std::string shape_string() const;
  bool empty() const { return rows_ == 0 || cols_ == 0; }
  int64_t row_bytes() const { return row_bytes_; }
  uint64_t stored_bytes() const { return static_cast<uint64_t>(row_bytes_) * static_cast<uint64_t>(rows_); }

  // HF row r is stored row map[r]; map must be a permutation of [0, rows). Throws
  // FormatError otherwise.
  void set_row_map(std::vector<int32_t> map);
  bool has_row_map() const { return !row_map_.empty(); }

  // The stored bytes of HF row r ([row_bytes]).
  const uint8_t* row(int64_t r) const {
    return data_ + (row_map_.empty() ? r : row_map_[static_cast<size_t>(r)]) * row_bytes_;
  }
  // The float32 rows [begin, begin+count) themselves when they can be read in place (F32,
  // no row map), else nullptr.
  const float* f32_rows(int64_t begin) const;

  // Converts rows [begin, begin+count) to float32 into dst [count, cols] (row stride cols).
  void rows_f32(int64_t begin, int64_t count, float* dst) const;
  // The whole matrix as float32 [rows, cols].
  Tensor to_f32() const;

 private:
  DType dtype_ = DType::F32;
  int64_t rows_ = 0, cols_ = 0, row_bytes_ = 0;
  const uint8_t* data_ = nullptr;
  std::vector<int32_t> row_map_;        // [rows] HF row -> stored row, or empty
  std::shared_ptr<const void> owner_;  // keeps data_ alive
};

}  // namespace ckv
