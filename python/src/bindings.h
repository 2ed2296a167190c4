#pragma once
// Shared pieces of the nanobind extension ckv._ckv (docs/PYTHON.md): arrays between ckv and
// numpy, and the registration functions of each part.
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "core/error.h"
#include "core/tensor.h"

namespace ckv::py {

namespace nb = nanobind;

template <typename T>
using NumpyArray = nb::ndarray<nb::numpy, T>;
// A C-contiguous float32 array from Python (the Python layer converts other dtypes).
using FloatIn = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

// Hands `data` to numpy without a copy: the array owns the vector through a capsule.
// Needs the GIL.
template <typename T>
NumpyArray<T> to_numpy(std::vector<T>&& data, const std::vector<int64_t>& shape) {
  auto* owner = new std::vector<T>(std::move(data));
  nb::capsule keep(owner, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return NumpyArray<T>(owner->data(), dims.size(), dims.data(), keep);
}

inline NumpyArray<float> to_numpy(Tensor&& t) {
  const std::vector<int64_t> shape = t.shape();
  return to_numpy(std::move(t.storage()), shape);
}

// A copy of `a` as a Tensor of rank `rank`; InputError naming `name` for another rank.
inline Tensor tensor_from(const FloatIn& a, size_t rank, std::string_view name) {
  if (a.ndim() != rank) fail<InputError>("{}: expected {} dimensions, got {}", name, rank, a.ndim());
  std::vector<int64_t> shape(rank);
  for (size_t i = 0; i < rank; ++i) shape[i] = static_cast<int64_t>(a.shape(i));
  const float* p = a.data();
  return Tensor(std::move(shape), std::vector<float>(p, p + a.size()));
}

void register_errors(nb::module_& m);
void register_model(nb::module_& m);
void register_analysis(nb::module_& m);

}  // namespace ckv::py
