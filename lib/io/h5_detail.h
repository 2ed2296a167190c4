#pragma once
// Internal to lib/io/h5*.cpp: checking HDF5 return codes and turning HDF5's error stack
// into one line of a typed ckv error.
#include <hdf5.h>

#include <chrono>
#include <string>
#include <string_view>

#include "core/error.h"
#include "io/h5.h"

namespace ckv::h5::detail {

// Once per process, before any other HDF5 call of ckv: switches off HDF5's automatic
// printing of its error stack, and its clean-up at exit (H5dont_atexit; see File::abandon
// in h5.cpp for why).
void init_hdf5();

// The most useful description on HDF5's current error stack ("file signature not found"),
// or "" when the stack is empty; clears the stack.
std::string take_hdf5_reason();

// Throws E with "<where>: <what> (<hdf5 reason>)".
template <typename E>
[[noreturn]] void fail_hdf5(std::string_view where, std::string_view what) {
  const std::string reason = take_hdf5_reason();
  if (reason.empty()) fail<E>("{}: {}", where, what);
  fail<E>("{}: {} ({})", where, what, reason);
}

// Returns id when valid, otherwise throws E.
template <typename E = IoError>
hid_t check_id(hid_t id, std::string_view where, std::string_view what) {
  if (id < 0) fail_hdf5<E>(where, what);
  return id;
}

template <typename E = IoError>
void check(herr_t status, std::string_view where, std::string_view what) {
  if (status < 0) fail_hdf5<E>(where, what);
}

// For WriteStats.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "integer", "float", "string"... for messages about unexpected element types.
const char* class_name(H5T_class_t cls);

// The IEEE binary16 little-endian file type (HDF5 1.10 has no predefined one).
Handle make_float16_type();
// The HDF5 type that stores a DType in files (little-endian).
Handle file_type(DType t);

}  // namespace ckv::h5::detail
