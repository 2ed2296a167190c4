#pragma once
// Shared pieces of the nanobind extension ckv._ckv (docs/PYTHON.md): arrays between ckv and
// numpy, and the registration functions of each part.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "analysis/selection.h"
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

// The selection methods' parameters, as ckv.bound and Model.eval take them (`ckv bound`'s
// flags and defaults, docs/BOUND.md).
struct SelectionArgs {
  int64_t window = 32, kernel = 7, h2o_rows = 256, sinks = 4;
  std::string pool = "max", gqa_reduce = "mean";
  double alpha = 0.5, eps = 1e-4, alpha_safe = 0.2;
};

// SelectionArgs as the library takes them, validated (UsageError for a bad pool or
// gqa_reduce, validate_selection_params for the rest).
inline SelectionParams selection_params(const SelectionArgs& a) {
  SelectionParams p;
  p.window = a.window;
  p.kernel = a.kernel;
  p.h2o_rows = a.h2o_rows;
  p.sinks = a.sinks;
  p.alpha = a.alpha;
  p.eps = a.eps;
  p.alpha_safe = a.alpha_safe;
  if (a.pool != "max" && a.pool != "avg") fail<UsageError>("pool '{}': max or avg", a.pool);
  if (a.gqa_reduce != "mean" && a.gqa_reduce != "max") fail<UsageError>("gqa_reduce '{}': mean or max", a.gqa_reduce);
  p.pool = a.pool == "avg" ? PoolKind::Avg : PoolKind::Max;
  p.gqa_reduce = a.gqa_reduce == "max" ? GqaReduce::Max : GqaReduce::Mean;
  validate_selection_params(p);
  return p;
}

// Registers SelectionArgs' fields on the arguments class T that derives from it.
template <typename T>
nb::class_<T>& def_selection_args(nb::class_<T>& c) {
  return c.def_rw("window", &T::window)
      .def_rw("kernel", &T::kernel)
      .def_rw("h2o_rows", &T::h2o_rows)
      .def_rw("sinks", &T::sinks)
      .def_rw("pool", &T::pool)
      .def_rw("gqa_reduce", &T::gqa_reduce)
      .def_rw("alpha", &T::alpha)
      .def_rw("eps", &T::eps)
      .def_rw("alpha_safe", &T::alpha_safe);
}

void register_errors(nb::module_& m);
void register_model(nb::module_& m);
void register_analysis(nb::module_& m);

}  // namespace ckv::py
