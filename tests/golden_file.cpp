#include "golden_file.h"

#include <hdf5.h>

#include <stdexcept>

namespace ckv::test {

namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error(path.string() + ": " + what);
}

// Closes an HDF5 handle with the right function when it leaves scope.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

template <typename T>
Array<T> read_dataset(hid_t file, const std::filesystem::path& path, const std::string& name,
                      hid_t mem_type) {
  Handle ds{H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose};
  if (ds.id < 0) fail(path, "no dataset " + name);
  Handle space{H5Dget_space(ds.id), H5Sclose};
  const int rank = H5Sget_simple_extent_ndims(space.id);
  if (rank < 0) fail(path, "bad dataspace of " + name);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.id, dims.data(), nullptr);
  Array<T> out;
  int64_t n = 1;
  for (hsize_t d : dims) {
    out.shape.push_back(static_cast<int64_t>(d));
    n *= static_cast<int64_t>(d);
  }
  out.data.resize(static_cast<size_t>(n));
  if (n > 0 && H5Dread(ds.id, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data.data()) < 0)
    fail(path, "cannot read " + name);
  return out;
}

}  // namespace

GoldenFile::GoldenFile(const std::filesystem::path& path) : path_(path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // errors are reported by exceptions
  file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file_ < 0) fail(path, "cannot open as HDF5");
}

GoldenFile::~GoldenFile() {
  if (file_ >= 0) H5Fclose(file_);
}

bool GoldenFile::has(const std::string& name) const {
  // Check each prefix: H5Lexists fails on a path whose parent is missing.
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = name.find('/', pos + 1);
    const std::string prefix = name.substr(0, pos);
    if (prefix.empty() || prefix == "/") continue;
    if (H5Lexists(file_, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

Array<float> GoldenFile::floats(const std::string& name) const {
  return read_dataset<float>(file_, path_, name, H5T_NATIVE_FLOAT);
}

Array<int32_t> GoldenFile::ints(const std::string& name) const {
  return read_dataset<int32_t>(file_, path_, name, H5T_NATIVE_INT32);
}

bool GoldenFile::has_attr(const std::string& object, const std::string& attr) const {
  return H5Aexists_by_name(file_, object.c_str(), attr.c_str(), H5P_DEFAULT) > 0;
}

std::string GoldenFile::attr_string(const std::string& object, const std::string& attr) const {
  Handle a{H5Aopen_by_name(file_, object.c_str(), attr.c_str(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose};
  if (a.id < 0) fail(path_, "no attribute " + object + "@" + attr);
  Handle type{H5Aget_type(a.id), H5Tclose};
  if (H5Tget_class(type.id) != H5T_STRING) fail(path_, object + "@" + attr + " is not a string");
  if (H5Tis_variable_str(type.id) > 0) {
    Handle mem{H5Tcopy(H5T_C_S1), H5Tclose};
    H5Tset_size(mem.id, H5T_VARIABLE);
    H5Tset_cset(mem.id, H5Tget_cset(type.id));
    char* value = nullptr;
    if (H5Aread(a.id, mem.id, &value) < 0) fail(path_, "cannot read " + object + "@" + attr);
    std::string out = value != nullptr ? value : "";
    H5free_memory(value);
    return out;
  }
  std::string out(H5Tget_size(type.id), '\0');
  if (H5Aread(a.id, type.id, out.data()) < 0) fail(path_, "cannot read " + object + "@" + attr);
  return out.substr(0, out.find('\0'));
}

int64_t GoldenFile::attr_int(const std::string& object, const std::string& attr) const {
  Handle a{H5Aopen_by_name(file_, object.c_str(), attr.c_str(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose};
  if (a.id < 0) fail(path_, "no attribute " + object + "@" + attr);
  int64_t value = 0;
  if (H5Aread(a.id, H5T_NATIVE_INT64, &value) < 0)
    fail(path_, "cannot read " + object + "@" + attr + " as an integer");
  return value;
}

std::vector<std::string> GoldenFile::members(const std::string& group) const {
  Handle g{H5Gopen2(file_, group.c_str(), H5P_DEFAULT), H5Gclose};
  if (g.id < 0) fail(path_, "no group " + group);
  H5G_info_t info;
  H5Gget_info(g.id, &info);
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t len =
        H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    std::string name(static_cast<size_t>(len) + 1, '\0');
    H5Lget_name_by_idx(g.id, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                       H5P_DEFAULT);
    name.resize(static_cast<size_t>(len));
    names.push_back(name);
  }
  return names;
}

}  // namespace ckv::test
