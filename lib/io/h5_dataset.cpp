// Datasets of the HDF5 layer: creation with chunking and filters, whole and hyperslab
// reads and writes, float16 storage.
#include <algorithm>
#include <chrono>
#include <sstream>
#include <type_traits>

#include "io/h5.h"
#include "io/h5_detail.h"
#include "io/h5_float16.h"
#include "io/h5_header.h"
#include "io/quant.h"

namespace ckv::h5 {
namespace detail {

Handle make_float16_type() {
  // binary16: sign bit 15, exponent bits 10..14 (bias 15), mantissa bits 0..9. h5py
  // recognises exactly this layout as numpy float16.
  Handle t(check_id<Error>(H5Tcopy(H5T_IEEE_F32LE), "hdf5", "copying the float type"));
  check<Error>(H5Tset_fields(t.id(), 15, 10, 5, 0, 10), "hdf5", "defining float16 fields");
  check<Error>(H5Tset_size(t.id(), 2), "hdf5", "defining float16 size");
  check<Error>(H5Tset_ebias(t.id(), 15), "hdf5", "defining float16 exponent bias");
  return t;
}

Handle file_type(DType t) {
  hid_t base = H5I_INVALID_HID;
  switch (t) {
    case DType::F16:
      return make_float16_type();
    case DType::F32:
      base = H5T_IEEE_F32LE;
      break;
    case DType::F64:
      base = H5T_IEEE_F64LE;
      break;
    case DType::I32:
      base = H5T_STD_I32LE;
      break;
    case DType::I64:
      base = H5T_STD_I64LE;
      break;
    case DType::U8:
      base = H5T_STD_U8LE;
      break;
  }
  return Handle(check_id<Error>(H5Tcopy(base), "hdf5", "copying a predefined type"));
}

const char* class_name(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER:
      return "integer";
    case H5T_FLOAT:
      return "float";
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_VLEN:
      return "variable-length";
    default:
      return "other";
  }
}

}  // namespace detail

using detail::check;
using detail::check_id;
using detail::seconds_since;

namespace {

template <typename T>
hid_t memory_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  if constexpr (std::is_same_v<T, int32_t>) return H5T_NATIVE_INT32;
  if constexpr (std::is_same_v<T, int64_t>) return H5T_NATIVE_INT64;
  if constexpr (std::is_same_v<T, uint8_t>) return H5T_NATIVE_UINT8;
  if constexpr (std::is_same_v<T, uint16_t>) return H5T_NATIVE_UINT16;
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::vector<hsize_t> to_hsize(const std::vector<int64_t>& dims) {
  return {dims.begin(), dims.end()};
}

DType dtype_of(hid_t type, const std::string& where) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) {
    if (size == 2) return DType::F16;
    if (size == 4) return DType::F32;
    if (size == 8) return DType::F64;
  } else if (cls == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    if (is_signed && size == 4) return DType::I32;
    if (is_signed && size == 8) return DType::I64;
    if (!is_signed && size == 1) return DType::U8;
  }
  fail<UnsupportedError>("{}: elements are {} of {} bytes, not a type ckv reads", where,
                         detail::class_name(cls), size);
}

// The file dataspace with [offset, offset + count) selected, or everything when offset is
// empty; checks bounds and that n elements fill the selection.
Handle select(hid_t dataset, const std::string& where, const std::vector<int64_t>& shape,
              const std::vector<int64_t>& offset, const std::vector<int64_t>& count, size_t n,
              std::vector<hsize_t>& memory_dims) {
  Handle space(check_id(H5Dget_space(dataset), where, "cannot get the dataspace"));
  if (offset.empty()) {
    if (static_cast<int64_t>(n) != product(shape))
      fail<Error>("{}: {} values given for shape {}", where, n, dims_string(shape));
    memory_dims = to_hsize(shape);
    return space;
  }
  if (offset.size() != shape.size() || count.size() != shape.size())
    fail<Error>("{}: slab of rank {} for shape {}", where, offset.size(), dims_string(shape));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (offset[d] < 0 || count[d] < 0 || offset[d] + count[d] > shape[d])
      fail<Error>("{}: slab at {} of size {} is outside shape {}", where, dims_string(offset),
                  dims_string(count), dims_string(shape));
  }
  if (static_cast<int64_t>(n) != product(count))
    fail<Error>("{}: {} values given for a slab of size {}", where, n, dims_string(count));
  const std::vector<hsize_t> start = to_hsize(offset);
  memory_dims = to_hsize(count);
  check(H5Sselect_hyperslab(space.id(), H5S_SELECT_SET, start.data(), nullptr, memory_dims.data(),
                            nullptr),
        where, "cannot select the slab");
  return space;
}

Handle memory_space(const std::vector<hsize_t>& dims, const std::string& where) {
  if (dims.empty()) return Handle(check_id(H5Screate(H5S_SCALAR), where, "creating a dataspace"));
  return Handle(check_id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                         where, "creating a dataspace"));
}

}  // namespace

std::vector<int64_t> chunk_by_first_dim(const std::vector<int64_t>& shape, size_t element_bytes,
                                        size_t max_chunk_bytes) {
  std::vector<int64_t> chunk = shape;
  if (chunk.empty()) return chunk;
  chunk[0] = 1;
  if (chunk.size() >= 2) {
    int64_t inner = 1;  // elements per index of the second dimension
    for (size_t d = 2; d < chunk.size(); ++d) inner *= std::max<int64_t>(1, chunk[d]);
    const auto row_bytes = static_cast<int64_t>(element_bytes) * inner;
    const int64_t max_rows =
        std::max<int64_t>(1, static_cast<int64_t>(max_chunk_bytes) / row_bytes);
    chunk[1] = std::min(chunk[1], max_rows);
  }
  for (int64_t& c : chunk) c = std::max<int64_t>(1, c);
  return chunk;
}

// --- Group: dataset creation ---------------------------------------------------------

Dataset Group::create_dataset(std::string_view name, DType dtype, const std::vector<int64_t>& shape,
                              const DatasetOptions& options) {
  const std::string path = child_path(name);
  const std::string where = file_ + ":" + path;
  if (exists(name)) fail<Error>("{}: cannot create dataset, the name exists", where);
  for (const int64_t d : shape)
    if (d < 0) fail<Error>("{}: negative dimension in shape {}", where, dims_string(shape));
  if (options.gzip_level < 0 || options.gzip_level > 9)
    fail<Error>("{}: gzip level {} is not in 0..9", where, options.gzip_level);
  const bool filtered = options.gzip_level > 0 || options.shuffle;
  if (filtered && options.chunk.empty()) fail<Error>("{}: compression needs a chunk shape", where);

  Handle dcpl(check_id(H5Pcreate(H5P_DATASET_CREATE), where, "creating dataset properties"));
  check(H5Pset_obj_track_times(dcpl.id(), 0), where, "setting dataset properties");
  detail::keep_attributes_compact(dcpl.id(), where);
  // An empty dataset (no attention rows) cannot be chunked; it stays contiguous.
  if (!options.chunk.empty() && product(shape) > 0) {
    if (options.chunk.size() != shape.size())
      fail<Error>("{}: chunk {} does not match shape {}", where, dims_string(options.chunk),
                  dims_string(shape));
    std::vector<hsize_t> chunk(shape.size());
    for (size_t d = 0; d < shape.size(); ++d)
      chunk[d] = static_cast<hsize_t>(std::clamp<int64_t>(options.chunk[d], 1, shape[d]));
    check(H5Pset_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()), where,
          "cannot set the chunk shape");
    // Shuffle must run before deflate to help it.
    if (options.shuffle) check(H5Pset_shuffle(dcpl.id()), where, "cannot add the shuffle filter");
    if (options.gzip_level > 0)
      check(H5Pset_deflate(dcpl.id(), static_cast<unsigned>(options.gzip_level)), where,
            "cannot add the gzip filter");
  }
  const Handle type = detail::file_type(dtype);
  const Handle space = memory_space(to_hsize(shape), where);
  Handle lcpl(check_id(H5Pcreate(H5P_LINK_CREATE), where, "creating link properties"));
  check(H5Pset_create_intermediate_group(lcpl.id(), 1), where, "setting link properties");
  // No chunk cache: ckv writes whole chunks, so caching only adds a copy, and a chunk
  // left in the cache is written when the dataset is closed, where a failure (a full disk)
  // cannot be reported and leaves HDF5 1.10 in a state that crashes at exit (h5.h).
  Handle dapl(check_id(H5Pcreate(H5P_DATASET_ACCESS), where, "creating dataset access properties"));
  check(H5Pset_chunk_cache(dapl.id(), 1, 0, 1.0), where, "switching off the chunk cache");
  const std::string n(name);
  std::vector<std::string> made = detail::missing_groups(*this, name);
  if (!made.empty()) made.pop_back();  // the dataset itself
  Handle dataset(check_id(
      H5Dcreate2(id(), n.c_str(), type.id(), space.id(), lcpl.id(), dcpl.id(), dapl.id()), where,
      "cannot create dataset"));
  detail::trust_made_groups(*this, made);
  trust_new_object(dataset.id());
  return Dataset(std::move(dataset), file_, path);
}

Dataset Group::open_dataset(std::string_view name) const {
  const std::string path = child_path(name);
  const std::string where = file_ + ":" + path;
  if (!exists(name)) fail<FormatError>("{}: no such dataset", where);
  const std::string n(name);
  Handle dataset(check_id<FormatError>(H5Dopen2(id(), n.c_str(), H5P_DEFAULT), where,
                                       "cannot open as a dataset"));
  return Dataset(std::move(dataset), file_, path);
}

// --- Dataset -------------------------------------------------------------------------

Dataset::Dataset(Handle handle, std::string file, std::string path)
    : Object(std::move(handle), std::move(file), std::move(path)) {
  const std::string w = where();
  const Handle space(check_id<FormatError>(H5Dget_space(id()), w, "cannot read the dataspace"));
  const int rank = H5Sget_simple_extent_ndims(space.id());
  if (rank < 0) detail::fail_hdf5<FormatError>(w, "cannot read the rank");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr) < 0)
    detail::fail_hdf5<FormatError>(w, "cannot read the shape");
  // A hostile file's dimensions: each must fit int64 and so must their product (every
  // element count below is computed from shape_).
  uint64_t count = 1;
  for (const hsize_t d : dims) {
    if (d > static_cast<hsize_t>(INT64_MAX) || (d != 0 && count > static_cast<uint64_t>(INT64_MAX) / d))
      fail<FormatError>("{}: shape overflows ({} dimensions, one of {})", w, rank, static_cast<uint64_t>(d));
    count *= d;
  }
  shape_.assign(dims.begin(), dims.end());
  const Handle type(check_id<FormatError>(H5Dget_type(id()), w, "cannot read the element type"));
  dtype_ = dtype_of(type.id(), w);
}

int64_t Dataset::numel() const {
  return product(shape_);
}

std::vector<int64_t> Dataset::chunk_shape() const {
  const Handle dcpl(check_id<FormatError>(H5Dget_create_plist(id()), where(),
                                          "cannot read the creation properties"));
  if (H5Pget_layout(dcpl.id()) != H5D_CHUNKED) return {};
  std::vector<hsize_t> chunk(shape_.size());
  if (H5Pget_chunk(dcpl.id(), static_cast<int>(chunk.size()), chunk.data()) < 0)
    detail::fail_hdf5<FormatError>(where(), "cannot read the chunk shape");
  return {chunk.begin(), chunk.end()};
}

DatasetOptions Dataset::options() const {
  DatasetOptions o;
  o.chunk = chunk_shape();
  const Handle dcpl(check_id<FormatError>(H5Dget_create_plist(id()), where(), "cannot read the creation properties"));
  const int n = H5Pget_nfilters(dcpl.id());
  if (n < 0) detail::fail_hdf5<FormatError>(where(), "cannot read the filters");
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, values[8] = {};
    size_t n_values = 8;
    const H5Z_filter_t filter =
        H5Pget_filter2(dcpl.id(), static_cast<unsigned>(i), &flags, &n_values, values, 0, nullptr, nullptr);
    if (filter == H5Z_FILTER_DEFLATE && n_values >= 1 && values[0] >= 1 && values[0] <= 9)
      o.gzip_level = static_cast<int>(values[0]);
    else if (filter == H5Z_FILTER_SHUFFLE)
      o.shuffle = true;
    else
      fail<UnsupportedError>("{}: stored with a filter ckv does not write ({})", where(), static_cast<int>(filter));
  }
  return o;
}

void Dataset::set_dims(const std::vector<std::string>& names) {
  if (names.size() != shape_.size())
    fail<Error>("{}: {} dimension names for rank {}", where(), names.size(), shape_.size());
  std::string joined;
  for (const std::string& n : names) {
    if (n.empty() || n.find(' ') != std::string::npos)
      fail<Error>("{}: dimension name '{}' is empty or has a space", where(), n);
    joined += (joined.empty() ? "" : " ") + n;
  }
  set_attr_string("dims", joined);
}

std::vector<std::string> Dataset::dims() const {
  std::istringstream in(attr_string("dims"));
  std::vector<std::string> names;
  for (std::string n; in >> n;) names.push_back(n);
  return names;
}

std::vector<int64_t> Dataset::index_offset(int64_t i) const {
  if (shape_.empty()) fail<Error>("{}: a scalar dataset has no first dimension", where());
  if (i < 0 || i >= shape_[0])
    fail<Error>("{}: index {} outside the first dimension of {}", where(), i, dims_string(shape_));
  std::vector<int64_t> offset(shape_.size(), 0);
  offset[0] = i;
  return offset;
}

std::vector<int64_t> Dataset::index_count() const {
  std::vector<int64_t> count = shape_;
  if (!count.empty()) count[0] = 1;
  return count;
}

template <typename T>
void Dataset::write_raw(const T* data, size_t n, const std::vector<int64_t>& offset,
                        const std::vector<int64_t>& count) {
  const std::string w = where();
  std::vector<hsize_t> memory_dims;
  const Handle file_space = select(id(), w, shape_, offset, count, n, memory_dims);
  const Handle mem_space = memory_space(memory_dims, w);
  WriteStats& stats = write_stats();
  if constexpr (std::is_same_v<T, float>) {
    if (dtype_ == DType::F16) {
      auto start = std::chrono::steady_clock::now();
      std::vector<uint16_t> half(n);  // same shape as data
      f32_to_f16(std::span<const float>(data, n), half);
      const Handle f16 = detail::make_float16_type();
      stats.convert_seconds += seconds_since(start);
      start = std::chrono::steady_clock::now();
      const herr_t status =
          H5Dwrite(id(), f16.id(), mem_space.id(), file_space.id(), H5P_DEFAULT, half.data());
      stats.write_seconds += seconds_since(start);
      stats.bytes += static_cast<int64_t>(n * sizeof(uint16_t));
      check(status, w, "cannot write");
      return;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const herr_t status =
      H5Dwrite(id(), memory_type<T>(), mem_space.id(), file_space.id(), H5P_DEFAULT, data);
  stats.write_seconds += seconds_since(start);
  stats.bytes += static_cast<int64_t>(n * dtype_size(dtype_));
  check(status, w, "cannot write");
}

template <typename T>
std::vector<T> Dataset::read() const {
  return read_slab<T>({}, {});
}

template <typename T>
std::vector<T> Dataset::read_slab(const std::vector<int64_t>& offset,
                                  const std::vector<int64_t>& count) const {
  const std::string w = where();
  const size_t n = static_cast<size_t>(offset.empty() ? product(shape_) : product(count));
  std::vector<hsize_t> memory_dims;
  const Handle file_space = select(id(), w, shape_, offset, count, n, memory_dims);
  const Handle mem_space = memory_space(memory_dims, w);
  std::vector<T> out(n);
  if constexpr (std::is_same_v<T, float>) {
    if (dtype_ == DType::F16) {
      std::vector<uint16_t> half(n);
      const Handle f16 = detail::make_float16_type();
      check<FormatError>(
          H5Dread(id(), f16.id(), mem_space.id(), file_space.id(), H5P_DEFAULT, half.data()), w,
          "cannot read");
      std::transform(half.begin(), half.end(), out.begin(), f16_to_f32);
      return out;
    }
  }
  check<FormatError>(
      H5Dread(id(), memory_type<T>(), mem_space.id(), file_space.id(), H5P_DEFAULT, out.data()), w,
      "cannot read");
  return out;
}

#define CKV_H5_INSTANTIATE(T)                                                        \
  template void Dataset::write_raw<T>(const T*, size_t, const std::vector<int64_t>&, \
                                      const std::vector<int64_t>&);                  \
  template std::vector<T> Dataset::read<T>() const;                                  \
  template std::vector<T> Dataset::read_slab<T>(const std::vector<int64_t>&,         \
                                                const std::vector<int64_t>&) const;
CKV_H5_INSTANTIATE(float)
CKV_H5_INSTANTIATE(double)
CKV_H5_INSTANTIATE(int32_t)
CKV_H5_INSTANTIATE(int64_t)
CKV_H5_INSTANTIATE(uint8_t)
#undef CKV_H5_INSTANTIATE

}  // namespace ckv::h5
