// Copies of HDF5 objects between ckv's files (h5_copy.h).
#include "output/h5_copy.h"

#include <hdf5.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "io/h5_heap.h"

namespace ckv {

// Copies every attribute of `src` onto `dst` whatever its type (HDF5 converts nothing:
// the file type is read into memory as its native equivalent and written back).
void copy_attrs(const h5::Object& src, h5::Object& dst) {
  for (const std::string& name : src.attr_names()) {
    h5::Handle a(H5Aopen(src.id(), name.c_str(), H5P_DEFAULT));
    h5::Handle ftype(H5Aget_type(a.id()));
    h5::Handle space(H5Aget_space(a.id()));
    h5::Handle mtype(H5Tget_native_type(ftype.id(), H5T_DIR_DEFAULT));
    if (!a.valid() || !ftype.valid() || !space.valid() || !mtype.valid())
      fail<FormatError>("{}: cannot read attribute \"{}\"", src.where(), name);
    // A damaged attribute can claim any size: ckv's attributes are far below this bound.
    constexpr double kMaxAttrBytes = double{size_t{256} << 20};
    const hssize_t n = H5Sget_simple_extent_npoints(space.id());
    const size_t element = H5Tget_size(mtype.id());
    if (n < 0 || element == 0 || static_cast<double>(n) * static_cast<double>(element) > kMaxAttrBytes)
      fail<FormatError>("{}: attribute \"{}\" claims {} elements of {} bytes: damaged", src.where(), name, n, element);
    // Variable-length values only at the top level, where their heap references are checked.
    const H5T_class_t cls = H5Tget_class(ftype.id());
    if ((cls == H5T_COMPOUND || cls == H5T_ARRAY) &&
        (H5Tdetect_class(ftype.id(), H5T_VLEN) != 0 || H5Tdetect_class(ftype.id(), H5T_STRING) != 0))
      fail<FormatError>("{}: attribute \"{}\" nests strings or variable-length data in a {}, which ckv does not write",
                        src.where(), name, cls == H5T_COMPOUND ? "compound" : "array");
    if (H5Tis_variable_str(ftype.id()) > 0) {
      // Strings go through ckv's reader (which checks their heap references) and writer, in
      // ckv's own string type: converting the shard's type straight back (as below) let a
      // damaged one overflow HDF5's buffers in the write (fuzz_h5_merge, H5HG_insert).
      const H5S_class_t shape = H5Sget_simple_extent_type(space.id());
      if (dst.has_attr(name)) dst.remove_attr(name);
      if (shape == H5S_SCALAR) {
        dst.set_attr_string(name, src.attr_string(name));
      } else if (shape == H5S_SIMPLE && H5Sget_simple_extent_ndims(space.id()) == 1) {
        dst.set_attr_strings(name, src.attr_strings(name));
      } else {
        fail<FormatError>("{}: attribute \"{}\" holds strings in a shape ckv does not write", src.where(), name);
      }
      continue;
    }
    h5::check_vlen_attr(a.id(), src.where() + " attribute " + name);
    std::vector<char> buffer(static_cast<size_t>(std::max<hssize_t>(n, 1)) * element);
    if (H5Aread(a.id(), mtype.id(), buffer.data()) < 0)
      fail<FormatError>("{}: cannot read attribute \"{}\"", src.where(), name);
    if (dst.has_attr(name)) dst.remove_attr(name);
    h5::Handle b(H5Acreate2(dst.id(), name.c_str(), ftype.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT));
    const bool ok = b.valid() && H5Awrite(b.id(), mtype.id(), buffer.data()) >= 0;
    if (H5Tdetect_class(mtype.id(), H5T_VLEN) > 0 || H5Tis_variable_str(mtype.id()) > 0)
      H5Dvlen_reclaim(mtype.id(), space.id(), H5P_DEFAULT, buffer.data());
    if (!ok) fail<IoError>("{}: cannot write attribute \"{}\"", dst.where(), name);
  }
}

// One dataset, one index of its first dimension at a time (a head: bounded memory), through
// the checked reads and writes of the h5 layer. Not H5Ocopy: HDF5 1.10 crashes inside it
// (H5T_close_real) when a write fails, e.g. on a full disk.
namespace {

template <typename T>
void copy_values(const h5::Dataset& from, h5::Dataset& to) {
  if (from.numel() == 0) return;
  if (from.shape().size() < 2) {
    to.write(from.read<T>());
    return;
  }
  for (int64_t i = 0; i < from.shape()[0]; ++i) to.write_index(i, from.read_index<T>(i));
}

void copy_dataset(const h5::Group& src, const std::string& name, h5::Group& dst) {
  const h5::Dataset from = src.open_dataset(name);
  h5::Dataset to = dst.create_dataset(name, from.dtype(), from.shape(), from.options());
  switch (from.dtype()) {
    case h5::DType::F16:  // float16 -> float32 -> float16 is exact
    case h5::DType::F32: copy_values<float>(from, to); break;
    case h5::DType::F64: copy_values<double>(from, to); break;
    case h5::DType::I32: copy_values<int32_t>(from, to); break;
    case h5::DType::I64: copy_values<int64_t>(from, to); break;
    case h5::DType::U8: copy_values<uint8_t>(from, to); break;
  }
  copy_attrs(from, to);
}

}  // namespace

// A group with its attributes, datasets and subgroups, recursively, to `path` in dst.
void copy_group(const h5::Group& src, h5::Group dst) {
  copy_attrs(src, dst);
  for (const std::string& name : src.children()) {
    if (src.is_group(name)) copy_group(src.open_group(name), dst.create_group(name));
    else if (src.is_dataset(name)) copy_dataset(src, name, dst);
    else fail<FormatError>("{}/{}: neither a group nor a dataset", src.where(), name);
  }
}

void copy_object(const h5::File& src, const std::string& path, h5::File& dst) {
  const std::string relative = path.starts_with('/') ? path.substr(1) : path;
  copy_group(src.open_group(relative), dst.create_group(relative));
}


}  // namespace ckv
