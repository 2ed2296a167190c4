// Attributes of the HDF5 layer, in the types h5py writes and reads natively: scalars and
// 1-D arrays of int64 / float64, variable-length UTF-8 strings, and bools as h5py's
// int8 enum {FALSE = 0, TRUE = 1}. Every attribute call on an object comes after
// check_object_header (h5_header.h): has_attr (which open_attr and write_attr call first),
// attr_names and remove_attr call it.
#include <cstring>

#include "io/h5.h"
#include "io/h5_detail.h"
#include "io/h5_header.h"
#include "io/h5_heap.h"

namespace ckv::h5 {

using detail::check;
using detail::check_id;

namespace {

Handle string_type(const std::string& where) {
  Handle t(check_id<Error>(H5Tcopy(H5T_C_S1), where, "copying the string type"));
  check<Error>(H5Tset_size(t.id(), H5T_VARIABLE), where, "making a variable-length string");
  check<Error>(H5Tset_cset(t.id(), H5T_CSET_UTF8), where, "setting UTF-8");
  return t;
}

Handle bool_type(const std::string& where) {
  Handle t(check_id<Error>(H5Tenum_create(H5T_NATIVE_INT8), where, "creating the bool type"));
  const int8_t no = 0;
  const int8_t yes = 1;
  check<Error>(H5Tenum_insert(t.id(), "FALSE", &no), where, "creating the bool type");
  check<Error>(H5Tenum_insert(t.id(), "TRUE", &yes), where, "creating the bool type");
  return t;
}

Handle scalar_space(const std::string& where) {
  return Handle(check_id<Error>(H5Screate(H5S_SCALAR), where, "creating a dataspace"));
}

Handle vector_space(size_t n, const std::string& where) {
  const hsize_t dims[1] = {static_cast<hsize_t>(n)};
  return Handle(check_id<Error>(H5Screate_simple(1, dims, nullptr), where, "creating a dataspace"));
}

// Creates (replacing any old one) and writes an attribute.
void write_attr(const Object& object, std::string_view name, hid_t file_type, hid_t space,
                hid_t memory_type, const void* data) {
  const std::string n(name);
  const std::string where = object.where() + " attribute " + n;
  if (object.has_attr(name))
    check(H5Adelete(object.id(), n.c_str()), where, "cannot replace the attribute");
  const Handle attr(
      check_id(H5Acreate2(object.id(), n.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
               where, "cannot create the attribute"));
  // An empty array still needs a non-null buffer.
  static const int64_t kNothing = 0;
  check(H5Awrite(attr.id(), memory_type, data != nullptr ? data : &kNothing), where,
        "cannot write the attribute");
}

struct OpenAttr {
  Handle attr;
  Handle type;
  H5T_class_t cls;
  size_t count;  // elements: 1 for a scalar
  std::string where;
};

OpenAttr open_attr(const Object& object, std::string_view name) {
  const std::string n(name);
  OpenAttr a;
  a.where = object.where() + " attribute " + n;
  if (!object.has_attr(name)) fail<FormatError>("{}: missing", a.where);
  a.attr = Handle(
      check_id<FormatError>(H5Aopen(object.id(), n.c_str(), H5P_DEFAULT), a.where, "cannot open"));
  a.type = Handle(check_id<FormatError>(H5Aget_type(a.attr.id()), a.where, "cannot read the type"));
  a.cls = H5Tget_class(a.type.id());
  const Handle space(
      check_id<FormatError>(H5Aget_space(a.attr.id()), a.where, "cannot read the dataspace"));
  const hssize_t count = H5Sget_simple_extent_npoints(space.id());
  if (count < 0) detail::fail_hdf5<FormatError>(a.where, "cannot read the size");
  a.count = static_cast<size_t>(count);
  return a;
}

[[noreturn]] void wrong_type(const OpenAttr& a, const char* expected) {
  fail<FormatError>("{}: holds {} {} value(s), expected {}", a.where, a.count,
                    detail::class_name(a.cls), expected);
}

template <typename T>
std::vector<T> read_numbers(const OpenAttr& a, hid_t memory_type) {
  std::vector<T> out(a.count);
  if (out.empty()) return out;
  check<FormatError>(H5Aread(a.attr.id(), memory_type, out.data()), a.where, "cannot read");
  return out;
}

std::vector<std::string> read_strings(const OpenAttr& a) {
  if (a.cls != H5T_STRING) wrong_type(a, "strings");
  std::vector<std::string> out;
  out.reserve(a.count);
  if (a.count == 0) return out;
  if (H5Tis_variable_str(a.type.id()) > 0) {
    check_vlen_attr(a.attr.id(), a.where);
    const Handle memory = string_type(a.where);
    std::vector<char*> pointers(a.count, nullptr);
    check<FormatError>(H5Aread(a.attr.id(), memory.id(), pointers.data()), a.where, "cannot read");
    for (char* p : pointers) {
      out.emplace_back(p != nullptr ? p : "");
      H5free_memory(p);
    }
    return out;
  }
  // Fixed-length strings (written by other tools): NUL-padded or NUL-terminated.
  const size_t size = H5Tget_size(a.type.id());
  std::vector<char> buffer(size * a.count);
  check<FormatError>(H5Aread(a.attr.id(), a.type.id(), buffer.data()), a.where, "cannot read");
  for (size_t i = 0; i < a.count; ++i) {
    const char* begin = buffer.data() + i * size;
    out.emplace_back(begin, strnlen(begin, size));
  }
  return out;
}

herr_t collect_attr_name(hid_t /*object*/, const char* name, const H5A_info_t* /*info*/,
                         void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}

}  // namespace

bool Object::has_attr(std::string_view name) const {
  const std::string n(name);
  check_object_header(id(), where());
  const htri_t found = H5Aexists(id(), n.c_str());
  if (found < 0) detail::fail_hdf5<FormatError>(where(), "cannot look up attribute " + n);
  return found > 0;
}

std::vector<std::string> Object::attr_names() const {
  std::vector<std::string> names;
  hsize_t index = 0;
  check_object_header(id(), where());
  check<FormatError>(
      H5Aiterate2(id(), H5_INDEX_NAME, H5_ITER_INC, &index, collect_attr_name, &names), where(),
      "cannot list attributes");
  return names;
}

void Object::remove_attr(std::string_view name) {
  const std::string n(name);
  check_object_header(id(), where());
  check(H5Adelete(id(), n.c_str()), where(), "cannot delete attribute " + n);
}

void Object::set_attr_string(std::string_view name, std::string_view value) {
  const std::string text(value);
  const char* pointer = text.c_str();
  const Handle type = string_type(where());
  write_attr(*this, name, type.id(), scalar_space(where()).id(), type.id(), &pointer);
}

void Object::set_attr_int(std::string_view name, int64_t value) {
  write_attr(*this, name, H5T_STD_I64LE, scalar_space(where()).id(), H5T_NATIVE_INT64, &value);
}

void Object::set_attr_double(std::string_view name, double value) {
  write_attr(*this, name, H5T_IEEE_F64LE, scalar_space(where()).id(), H5T_NATIVE_DOUBLE, &value);
}

void Object::set_attr_bool(std::string_view name, bool value) {
  const int8_t stored = value ? 1 : 0;
  const Handle type = bool_type(where());
  write_attr(*this, name, type.id(), scalar_space(where()).id(), type.id(), &stored);
}

void Object::set_attr_ints(std::string_view name, const std::vector<int64_t>& values) {
  write_attr(*this, name, H5T_STD_I64LE, vector_space(values.size(), where()).id(),
             H5T_NATIVE_INT64, values.data());
}

void Object::set_attr_doubles(std::string_view name, const std::vector<double>& values) {
  write_attr(*this, name, H5T_IEEE_F64LE, vector_space(values.size(), where()).id(),
             H5T_NATIVE_DOUBLE, values.data());
}

void Object::set_attr_strings(std::string_view name, const std::vector<std::string>& values) {
  std::vector<const char*> pointers;
  pointers.reserve(values.size());
  for (const std::string& v : values) pointers.push_back(v.c_str());
  const Handle type = string_type(where());
  write_attr(*this, name, type.id(), vector_space(values.size(), where()).id(), type.id(),
             pointers.data());
}

void Object::set_attr_json(std::string_view name, const nlohmann::json& value) {
  // Text from files may be invalid UTF-8 (merge's merged_from holds shards' hostnames and
  // command lines): such bytes are stored as U+FFFD rather than failing the write.
  set_attr_string(name, value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string Object::attr_string(std::string_view name) const {
  const OpenAttr a = open_attr(*this, name);
  std::vector<std::string> values = read_strings(a);
  if (values.size() != 1) wrong_type(a, "one string");
  return std::move(values[0]);
}

int64_t Object::attr_int(std::string_view name) const {
  const OpenAttr a = open_attr(*this, name);
  if (a.cls != H5T_INTEGER || a.count != 1) wrong_type(a, "one integer");
  return read_numbers<int64_t>(a, H5T_NATIVE_INT64)[0];
}

double Object::attr_double(std::string_view name) const {
  const OpenAttr a = open_attr(*this, name);
  if ((a.cls != H5T_FLOAT && a.cls != H5T_INTEGER) || a.count != 1) wrong_type(a, "one number");
  return read_numbers<double>(a, H5T_NATIVE_DOUBLE)[0];
}

bool Object::attr_bool(std::string_view name) const {
  const OpenAttr a = open_attr(*this, name);
  if (a.count != 1) wrong_type(a, "one bool");
  // A bool is 0 or 1: any other value (complete = 2) is damage, not "true".
  auto as_bool = [&](uint64_t v) {
    if (v > 1) fail<FormatError>("{}: holds {}, not a bool (0 or 1)", a.where, v);
    return v == 1;
  };
  if (a.cls == H5T_INTEGER) {
    const int64_t v = read_numbers<int64_t>(a, H5T_NATIVE_INT64)[0];
    return as_bool(v < 0 ? uint64_t{2} : static_cast<uint64_t>(v));
  }
  if (a.cls != H5T_ENUM) wrong_type(a, "a bool");
  // An enum converts only to an enum with the same names; read its raw integer instead.
  const size_t size = H5Tget_size(a.type.id());
  if (size > 8) wrong_type(a, "a bool");
  unsigned char raw[8] = {};
  check<FormatError>(H5Aread(a.attr.id(), a.type.id(), raw), a.where, "cannot read");
  uint64_t v = raw[0];  // ckv's bool enum is one byte; wider ones must hold 0 or 1 in the first
  for (size_t i = 1; i < size; ++i)
    if (raw[i] != 0) v = 2;
  return as_bool(v);
}

std::vector<int64_t> Object::attr_ints(std::string_view name) const {
  const OpenAttr a = open_attr(*this, name);
  if (a.cls != H5T_INTEGER) wrong_type(a, "integers");
  return read_numbers<int64_t>(a, H5T_NATIVE_INT64);
}

std::vector<double> Object::attr_doubles(std::string_view name) const {
  const OpenAttr a = open_attr(*this, name);
  if (a.cls != H5T_FLOAT && a.cls != H5T_INTEGER) wrong_type(a, "numbers");
  return read_numbers<double>(a, H5T_NATIVE_DOUBLE);
}

std::vector<std::string> Object::attr_strings(std::string_view name) const {
  return read_strings(open_attr(*this, name));
}

nlohmann::json Object::attr_json(std::string_view name) const {
  const std::string text = attr_string(name);
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded())
    fail<FormatError>("{} attribute {}: not valid JSON", where(), std::string(name));
  return value;
}

}  // namespace ckv::h5
