#pragma once
// Internal to lib/io/h5*.cpp: checking HDF5 return codes and turning HDF5's error stack
// into one line of a typed ckv error.
#include <hdf5.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

// The bytes of a file as they are on disk, read through the descriptor HDF5's sec2 driver
// itself reads: for the checks that look at what HDF5 is about to decode (h5_heap.cpp,
// h5_header.cpp). File addresses are relative to the userblock (`base`).
struct RawFile {
  int fd = -1;
  uint64_t base = 0;  // the userblock
  uint64_t size = 0;  // bytes on disk
  size_t sizeof_addr = 8;
  size_t sizeof_size = 8;
  // Reads n bytes at file offset `offset` (not an address); false when they are not all
  // there.
  bool read_at(uint64_t offset, uint8_t* out, uint64_t n) const;
};

// The groups on the way to `name` (a path below `group`, itself included) that do not
// exist yet, as paths relative to `group`; and after they were made (a create with
// intermediate groups), records them as made by ckv (trust_new_object, h5_header.h).
std::vector<std::string> missing_groups(const Group& group, std::string_view name);
void trust_made_groups(const Group& group, const std::vector<std::string>& paths);

// Object creation properties (of groups and datasets): attributes stay in the object header
// however many there are. In a file HDF5 writes with version 2 object headers (one reopened
// for --resume) it would otherwise move more than 8 into a fractal heap ("dense storage"),
// which the header check (h5_header.cpp) does not read.
void keep_attributes_compact(hid_t ocpl, const std::string& where);

// Little-endian unsigned integer of n <= 8 bytes.
uint64_t decode_le(const uint8_t* p, size_t n);

// x rounded up to a multiple of 8 (HDF5 pads version-1 messages and names to 8 bytes).
inline uint64_t align8(uint64_t x) {
  return (x + 7) / 8 * 8;
}

// Runs find_damage on the bytes of the file that `object` is in and returns the damage it
// reports. A file open for writing may have metadata that only HDF5's cache holds yet (ckv
// flushes between records, h5.cpp): there a reported damage is looked for once more after
// a flush, so a valid file being written never fails and the flush happens only when the
// disk is behind. Files on other drivers than sec2 (ckv opens none) are not looked at.
// FormatError (naming `where`) when the file's layout itself is impossible.
std::optional<std::string> find_damage_on_disk(
    hid_t object, const std::string& where,
    const std::function<std::optional<std::string>(const RawFile&)>& find_damage);

}  // namespace ckv::h5::detail
