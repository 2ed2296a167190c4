#pragma once
// A dense, owning, row-major float32 tensor: every activation, recording and small weight
// (norms, biases) is one. Weight matrices stay in their stored dtype (io/weight_matrix.h)
// and become float32 per tile. Compute goes through Eigen maps over data(); this type only
// holds memory and a shape.
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

namespace ckv {

// Index of the first NaN or infinity in `values`, or -1: one branch-free (vectorisable)
// pass, then a search only when something was found.
int64_t first_non_finite(std::span<const float> values);

// Throws FormatError "<name>: non-finite value <x> at element <i>" when `values` holds a NaN
// or an infinity. Called once per weight where it becomes float32 (model_loader.cpp).
void check_finite(std::string_view name, std::span<const float> values);

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;
using VectorMap = Eigen::Map<Eigen::VectorXf>;
using ConstVectorMap = Eigen::Map<const Eigen::VectorXf>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape) : shape_(std::move(shape)) {
    data_.assign(static_cast<size_t>(numel_of(shape_)), 0.0f);
  }
  Tensor(std::initializer_list<int64_t> shape) : Tensor(std::vector<int64_t>(shape)) {}
  Tensor(std::vector<int64_t> shape, std::vector<float> data)
      : shape_(std::move(shape)), data_(std::move(data)) {}

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }
  bool empty() const { return data_.empty(); }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::span<float> span() { return data_; }
  std::span<const float> span() const { return data_; }
  std::vector<float>& storage() { return data_; }

  // View of a rank-2 tensor (or a rank-1 one as a single row) as an Eigen row-major matrix.
  MatrixMap matrix() { return MatrixMap(data(), rows(), cols()); }
  ConstMatrixMap matrix() const { return ConstMatrixMap(data(), rows(), cols()); }

  std::string shape_string() const;
  static int64_t numel_of(const std::vector<int64_t>& shape);

 private:
  int64_t rows() const { return rank() == 1 ? 1 : shape_.at(0); }
  int64_t cols() const { return rank() == 1 ? shape_.at(0) : numel() / std::max<int64_t>(1, shape_.at(0)); }

  std::vector<int64_t> shape_;
  std::vector<float> data_;
};

}  // namespace ckv
