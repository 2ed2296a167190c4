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

// The selection methods' parameters, as ckv.bound and Model.eval take them: one property per
// entry of selection_param_table (analysis/selection_params.h), by its key, with `ckv bound`'s
// defaults; a new parameter reaches Python with its registration.
struct SelectionArgs {
  SelectionParams params;
};

// The parameter's value as Python holds it: int, float, bool or str (a choice's name, a path).
inline nb::object selection_param_value(const SelectionParams& p, const SelectionParam& s) {
  switch (s.type) {
    case SelectionParam::Type::Count: return nb::int_(p.*s.count);
    case SelectionParam::Type::Number: return nb::float_(p.*s.number);
    case SelectionParam::Type::Switch: return nb::bool_(p.*s.on);
    case SelectionParam::Type::Choice:
    case SelectionParam::Type::Path: return nb::str(s.value_text(p).c_str());
  }
  return nb::none();
}

// Sets the parameter from a Python value (TypeError for another type, UsageError for an
// unknown choice).
inline void set_selection_param(SelectionParams& p, const SelectionParam& s, nb::handle v) {
  switch (s.type) {
    case SelectionParam::Type::Count: p.*s.count = nb::cast<int64_t>(v); break;
    case SelectionParam::Type::Number: p.*s.number = nb::cast<double>(v); break;
    case SelectionParam::Type::Switch: p.*s.on = nb::cast<bool>(v); break;
    case SelectionParam::Type::Choice: s.set_choice_name(p, nb::cast<std::string>(v)); break;
    case SelectionParam::Type::Path: p.*s.path = nb::cast<std::string>(v); break;
  }
}

// SelectionArgs as the library takes them: validated (validate_selection_params) and with
// the files its paths name read (load_selection_files).
inline SelectionParams selection_params(const SelectionArgs& a) {
  SelectionParams p = a.params;
  validate_selection_params(p);
  load_selection_files(p);
  return p;
}

// Registers a property per selection parameter on the arguments class T that derives from
// SelectionArgs.
template <typename T>
nb::class_<T>& def_selection_args(nb::class_<T>& c) {
  for (const SelectionParam& s : selection_param_table()) {
    const SelectionParam* e = &s;  // the table is static
    c.def_prop_rw(
        e->key.data(), [e](const T& a) { return selection_param_value(a.params, *e); },
        [e](T& a, nb::handle v) { set_selection_param(a.params, *e, v); });
  }
  return c;
}

void register_errors(nb::module_& m);
void register_model(nb::module_& m);
void register_analysis(nb::module_& m);

}  // namespace ckv::py
