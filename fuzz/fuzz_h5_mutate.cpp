// Structure-aware HDF5 fuzzer. Raw byte mutation of an HDF5 file mostly breaks HDF5's own
// metadata; this target instead drives edits of a valid ckv output, so the files reach
// ckv's readers with wrong attribute values and types, datasets of other shapes, types or
// values (NaN, Inf), missing, renamed or duplicated objects. The input picks a template
// (fuzz/corpus/templates/*.h5, written by scripts/fuzz_corpus.sh from real ckv runs) and
// a list of edits; the template is edited in memory (HDF5's core driver on a file image,
// no disk I/O), and the resulting image is then read by `ckv info`, `ckv merge` (with the
// template's other shard when it has one: NAME-shard0.h5 / NAME-shard1.h5) and, for dumps
// of the tiny model (names starting "tiny-dump"), `ckv bound --dump`. Edits of existing
// attributes go to a record's attributes two times in three (its sizes, spans, context:
// what bound --dump and merge check against the datasets), and change integers and
// strings near their values.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_h5_readers.h"

namespace {

namespace fs = std::filesystem;

struct Template {
  std::string name;
  std::vector<char> bytes;
  fs::path partner;  // the other shard of a pair, else empty
  bool tiny_dump = false;
};

std::vector<Template> load_templates() {
  const fs::path dir = ckv::fuzz::source_dir() / "fuzz/corpus/templates";
  std::vector<Template> out;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".h5") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    Template t;
    t.name = p.filename().string();
    std::ifstream in(p, std::ios::binary);
    t.bytes.assign(std::istreambuf_iterator<char>(in), {});
    for (const auto& [a, b] : {std::pair{"-shard0", "-shard1"}, std::pair{"-shard1", "-shard0"}}) {
      const auto at = t.name.find(a);
      if (at == std::string::npos) continue;
      std::string other = t.name;
      other.replace(at, 7, b);
      if (fs::exists(dir / other)) t.partner = dir / other;
    }
    t.tiny_dump = t.name.starts_with("tiny-dump");
    out.push_back(std::move(t));
  }
  if (out.empty()) {
    std::fprintf(stderr, "fuzz_h5_mutate: no templates in %s; run scripts/fuzz_corpus.sh\n", dir.c_str());
    std::exit(1);
  }
  return out;
}

const std::vector<Template>& templates() {
  static const std::vector<Template> t = load_templates();
  return t;
}

// Every object and attribute of the file, found once after opening.
struct Layout {
  std::vector<std::string> groups;    // "/", "/records", ...
  std::vector<std::string> datasets;  // "/records/0/layers/0/q", ...
  std::vector<std::string> attr_names;
  std::vector<std::pair<std::string, std::string>> attrs;  // (object, attribute) as found
  std::vector<std::pair<std::string, std::string>> record_attrs;  // those under /records
};

herr_t visit(hid_t obj, const char* name, const H5O_info_t* info, void* data) {
  auto* layout = static_cast<Layout*>(data);
  std::string path = name[0] == '.' && name[1] == 0 ? "/" : "/" + std::string(name);
  if (info->type == H5O_TYPE_GROUP) layout->groups.push_back(path);
  if (info->type == H5O_TYPE_DATASET) layout->datasets.push_back(path);
  const hid_t o = H5Oopen(obj, name, H5P_DEFAULT);
  if (o < 0) return 0;
  for (hsize_t i = 0; i < info->num_attrs; ++i) {
    char attr[256];
    if (H5Aget_name_by_idx(o, ".", H5_INDEX_NAME, H5_ITER_NATIVE, i, attr, sizeof attr, H5P_DEFAULT) > 0) {
      layout->attr_names.push_back(attr);
      layout->attrs.emplace_back(path, attr);
      if (path.starts_with("/records/")) layout->record_attrs.emplace_back(path, attr);
    }
  }
  H5Oclose(o);
  return 0;
}

Layout layout_of(hid_t file) {
  Layout l;
  H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_NATIVE, visit, &l, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS);
  std::sort(l.attr_names.begin(), l.attr_names.end());
  l.attr_names.erase(std::unique(l.attr_names.begin(), l.attr_names.end()), l.attr_names.end());
  return l;
}

template <class T>
const T& pick(FuzzedDataProvider& in, const std::vector<T>& items) {
  return items[in.ConsumeIntegralInRange<size_t>(0, items.size() - 1)];
}

int64_t interesting_int(FuzzedDataProvider& in) {
  static const std::vector<int64_t> values{0, 1, -1, 2, 3, 4, 7, 8, 16, 23, 24, 25, 31, 32, 33, 256, 4096,
                                           65536, int64_t{1} << 31, (int64_t{1} << 31) - 1, -(int64_t{1} << 31),
                                           int64_t{1} << 32, std::numeric_limits<int64_t>::max(),
                                           std::numeric_limits<int64_t>::min()};
  return in.ConsumeBool() ? pick(in, values) : in.ConsumeIntegral<int64_t>();
}

double interesting_double(FuzzedDataProvider& in) {
  static const std::vector<double> values{0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, 1e300, 1e38, 65504.0, 65536.0,
                                          std::numeric_limits<double>::quiet_NaN(),
                                          std::numeric_limits<double>::infinity(),
                                          -std::numeric_limits<double>::infinity()};
  return in.ConsumeBool() ? pick(in, values) : in.ConsumeFloatingPoint<double>();
}

std::string interesting_name(FuzzedDataProvider& in, const Layout& l) {
  static const std::vector<std::string> names{"0", "1", "2", "a", "records", "layers", "model", "q", "k", "v",
                                              "attn", "tokens", "complete", "index", "..", " ", "0 ", "-1"};
  switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0: return pick(in, names);
    case 1: return l.attr_names.empty() ? "x" : pick(in, l.attr_names);
    default: {
      std::string s = in.ConsumeRandomLengthString(12);
      std::replace(s.begin(), s.end(), '/', '_');
      return s.empty() || s == "." ? "x" : s;
    }
  }
}

// Writes attribute `name` on `obj` (replacing it) with a value of a type the input picks:
// integers, floats, strings (variable-length UTF-8, as ckv writes them), and 1-D arrays.
void write_attr(FuzzedDataProvider& in, hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  const int kind = in.ConsumeIntegralInRange(0, 5);
  const bool array = kind >= 3 || in.ConsumeBool();
  const hsize_t n = array ? in.ConsumeIntegralInRange<hsize_t>(0, 6) : 1;
  const hid_t space = array ? H5Screate_simple(1, &n, nullptr) : H5Screate(H5S_SCALAR);
  const int base = kind % 3;
  hid_t type = base == 0 ? H5Tcopy(H5T_NATIVE_INT64) : base == 1 ? H5Tcopy(H5T_NATIVE_DOUBLE) : H5Tcopy(H5T_C_S1);
  if (base == 2) {
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
  }
  if (base == 0 && in.ConsumeBool()) {  // narrower or unsigned integers
    H5Tclose(type);
    type = H5Tcopy(pick(in, std::vector<hid_t>{H5T_NATIVE_INT8, H5T_NATIVE_UINT8, H5T_NATIVE_INT32,
                                                H5T_NATIVE_UINT32, H5T_NATIVE_UINT64}));
  }
  const hid_t attr = H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (attr >= 0) {
    const size_t count = array ? n : 1;
    if (base == 0) {
      std::vector<int64_t> v(count);
      for (auto& x : v) x = interesting_int(in);
      H5Awrite(attr, H5T_NATIVE_INT64, v.data());  // converted (clipped) to the stored type
    } else if (base == 1) {
      std::vector<double> v(count);
      for (auto& x : v) x = interesting_double(in);
      H5Awrite(attr, H5T_NATIVE_DOUBLE, v.data());
    } else {
      std::vector<std::string> s(count);
      std::vector<const char*> p;
      for (auto& x : s) {
        x = in.ConsumeBool() ? in.ConsumeRandomLengthString(40) : std::string("{\"a\": 1}");
        p.push_back(x.c_str());
      }
      H5Awrite(attr, type, p.data());
    }
    H5Aclose(attr);
  }
  H5Tclose(type);
  H5Sclose(space);
}

// Copies every attribute of `from` to `to` (as stored, strings included).
void copy_attrs(hid_t from, hid_t to) {
  H5O_info_t info;
  if (H5Oget_info2(from, &info, H5O_INFO_NUM_ATTRS) < 0) return;
  for (hsize_t i = 0; i < info.num_attrs; ++i) {
    const hid_t a = H5Aopen_by_idx(from, ".", H5_INDEX_NAME, H5_ITER_NATIVE, i, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) continue;
    char name[256];
    H5Aget_name(a, sizeof name, name);
    const hid_t type = H5Aget_type(a), space = H5Aget_space(a);
    const hid_t mem = H5Tget_native_type(type, H5T_DIR_DEFAULT);
    const hssize_t n = H5Sget_simple_extent_npoints(space);
    const size_t size = H5Tget_size(mem);
    if (n >= 0 && mem >= 0 && size > 0) {
      std::vector<unsigned char> buf(static_cast<size_t>(std::max<hssize_t>(n, 1)) * size);
      if (H5Aread(a, mem, buf.data()) >= 0) {
        const hid_t b = H5Acreate2(to, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
        if (b >= 0) {
          H5Awrite(b, mem, buf.data());
          H5Aclose(b);
        }
        if (H5Tdetect_class(mem, H5T_VLEN) > 0 || H5Tis_variable_str(mem) > 0)
          H5Dvlen_reclaim(mem, space, H5P_DEFAULT, buf.data());
      }
    }
    if (mem >= 0) H5Tclose(mem);
    H5Tclose(type);
    H5Sclose(space);
    H5Aclose(a);
  }
}

// Replaces dataset `path` by one of another shape and/or element type, with the old
// attributes and values the input picks (a constant, or the input's bytes).
void replace_dataset(FuzzedDataProvider& in, hid_t file, const std::string& path) {
  const hid_t old = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (old < 0) return;
  const hid_t old_space = H5Dget_space(old);
  int rank = H5Sget_simple_extent_ndims(old_space);
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(old_space, dims.data(), nullptr);
  H5Sclose(old_space);
  if (in.ConsumeIntegralInRange(0, 4) == 0) {  // another rank
    if (in.ConsumeBool() && !dims.empty()) dims.pop_back();
    else dims.push_back(in.ConsumeIntegralInRange<hsize_t>(0, 4));
  }
  for (hsize_t& d : dims) {
    switch (in.ConsumeIntegralInRange(0, 7)) {
      case 0: d = 0; break;
      case 1: d = 1; break;
      case 2: d = d + 1; break;
      case 3: d = d > 0 ? d - 1 : 0; break;
      case 4: d = d * 2; break;
      case 5: d = in.ConsumeIntegralInRange<hsize_t>(0, 40); break;
      default: break;  // unchanged
    }
  }
  hsize_t numel = 1;
  for (hsize_t d : dims) numel *= d;
  if (numel > (hsize_t{1} << 16)) {
    H5Dclose(old);
    return;  // keep the files small
  }
  const hid_t type = H5Tcopy(pick(in, std::vector<hid_t>{H5T_NATIVE_FLOAT, H5T_NATIVE_DOUBLE, H5T_NATIVE_INT32,
                                                         H5T_NATIVE_INT64, H5T_NATIVE_UINT8, H5T_NATIVE_INT16}));
  const std::string tmp = path + ".fuzz-new";
  const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t ds = H5Dcreate2(file, tmp.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (ds >= 0) {
    std::vector<double> values(static_cast<size_t>(std::max<hsize_t>(numel, 1)));
    if (in.ConsumeBool()) {
      std::fill(values.begin(), values.end(), interesting_double(in));
    } else {
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(in.ConsumeIntegral<int8_t>()) / 8;
    }
    if (numel > 0) H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    copy_attrs(old, ds);
    H5Dclose(ds);
    H5Dclose(old);
    H5Ldelete(file, path.c_str(), H5P_DEFAULT);
    H5Lmove(file, tmp.c_str(), file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  } else {
    H5Dclose(old);
  }
  H5Sclose(space);
  H5Tclose(type);
}

// Writes special values into a few elements of a dataset, through type conversion.
void poke_values(FuzzedDataProvider& in, hid_t file, const std::string& path) {
  const hid_t ds = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (ds < 0) return;
  const hid_t space = H5Dget_space(ds);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  const int rank = H5Sget_simple_extent_ndims(space);
  if (n > 0 && rank >= 1) {
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    const size_t points = in.ConsumeIntegralInRange<size_t>(1, 4);
    std::vector<hsize_t> coords;
    for (size_t p = 0; p < points; ++p)
      for (hsize_t d : dims) coords.push_back(in.ConsumeIntegralInRange<hsize_t>(0, d - 1));
    std::vector<double> values(points);
    for (double& v : values) v = interesting_double(in);
    H5Sselect_elements(space, H5S_SELECT_SET, points, coords.data());
    const hsize_t count = points;
    const hid_t mem = H5Screate_simple(1, &count, nullptr);
    H5Dwrite(ds, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, values.data());
    H5Sclose(mem);
  }
  H5Sclose(space);
  H5Dclose(ds);
}

// Edits a scalar variable-length string attribute (ids, JSON settings and spans, contexts)
// near its value: a character changed, inserted or removed, the text cut, or a number in
// it replaced. Returns false when the attribute is not one.
bool perturb_string_attr(FuzzedDataProvider& in, hid_t obj, const std::string& name, hid_t a, hid_t type,
                         hid_t space) {
  if (H5Tis_variable_str(type) <= 0 || H5Sget_simple_extent_type(space) != H5S_SCALAR) return false;
  const hid_t mem = H5Tcopy(H5T_C_S1);
  H5Tset_size(mem, H5T_VARIABLE);
  H5Tset_cset(mem, H5T_CSET_UTF8);
  char* p = nullptr;
  const bool read = H5Aread(a, mem, &p) >= 0;
  std::string s = read && p != nullptr ? p : "";
  if (read) H5free_memory(p);
  if (!read) {
    H5Tclose(mem);
    return false;
  }
  const size_t at = s.empty() ? 0 : in.ConsumeIntegralInRange<size_t>(0, s.size() - 1);
  switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0: if (!s.empty()) s[at] = static_cast<char>(in.ConsumeIntegral<uint8_t>()); break;
    case 1: s.insert(at, 1, pick(in, std::vector<char>{'0', '9', '-', ',', '[', ']', '{', '"', '\\', ' '})); break;
    case 2: if (!s.empty()) s.erase(at, 1); break;
    case 3: s.resize(at); break;
    default: {  // the number starting at or after `at` replaced
      const size_t begin = s.find_first_of("-0123456789", at);
      if (begin == std::string::npos) break;
      const size_t end = s.find_first_not_of("0123456789", begin + 1);
      s.replace(begin, end == std::string::npos ? std::string::npos : end - begin,
                std::to_string(interesting_int(in)));
      break;
    }
  }
  H5Adelete(obj, name.c_str());
  const hid_t b = H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (b >= 0) {
    const char* q = s.c_str();
    H5Awrite(b, mem, &q);
    H5Aclose(b);
  }
  H5Tclose(mem);
  return true;
}

// Changes one element of an existing integer attribute near its value (record sizes such
// as n_tokens and context_end, layer and head lists, shard numbers), or a string attribute
// near its text (perturb_string_attr), keeping its type. Other attributes get a new value
// of any type.
void perturb_attr(FuzzedDataProvider& in, hid_t obj, const std::string& name) {
  const hid_t a = H5Aopen(obj, name.c_str(), H5P_DEFAULT);
  if (a < 0) return;
  const hid_t type = H5Aget_type(a), space = H5Aget_space(a);
  if (H5Tget_class(type) == H5T_STRING && in.ConsumeBool()) {
    const bool done = perturb_string_attr(in, obj, name, a, type, space);
    H5Aclose(a);
    H5Tclose(type);
    H5Sclose(space);
    if (!done) write_attr(in, obj, name);
    return;
  }
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  const bool integer = H5Tget_class(type) == H5T_INTEGER && n > 0 && n <= 4096;
  std::vector<int64_t> v(integer ? static_cast<size_t>(n) : 0);
  const bool read = integer && H5Aread(a, H5T_NATIVE_INT64, v.data()) >= 0;
  H5Aclose(a);
  if (read) {
    int64_t& x = v[in.ConsumeIntegralInRange<size_t>(0, v.size() - 1)];
    // Wrapping arithmetic (in uint64_t): the edit itself must not be undefined behaviour.
    const uint64_t u = static_cast<uint64_t>(x);
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0: x = static_cast<int64_t>(u + 1); break;
      case 1: x = static_cast<int64_t>(u - 1); break;
      case 2: x = static_cast<int64_t>(u * 2); break;
      case 3: x = static_cast<int64_t>(0 - u); break;
      case 4: x = static_cast<int64_t>(u + static_cast<uint64_t>(in.ConsumeIntegralInRange<int64_t>(-64, 64))); break;
      default: x = interesting_int(in); break;
    }
    H5Adelete(obj, name.c_str());
    const hid_t b = H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (b >= 0) {
      H5Awrite(b, H5T_NATIVE_INT64, v.data());
      H5Aclose(b);
    }
  }
  H5Tclose(type);
  H5Sclose(space);
  if (!read) write_attr(in, obj, name);
}

std::string parent_of(const std::string& path) {
  const auto at = path.rfind('/');
  return at == 0 ? "/" : path.substr(0, at);
}

void mutate(FuzzedDataProvider& in, hid_t file, const Layout& l) {
  std::vector<std::string> objects = l.groups;
  objects.insert(objects.end(), l.datasets.begin(), l.datasets.end());
  const int edits = in.ConsumeIntegralInRange(1, 6);
  for (int e = 0; e < edits && in.remaining_bytes() > 0; ++e) {
    switch (in.ConsumeIntegralInRange(0, 11)) {
      case 9:
      case 10:
      case 11: {  // change an existing attribute (the edit most likely to pass the schema checks),
                   // in two of three edits one of a record's (its sizes, spans, context)
        const auto& pool = !l.record_attrs.empty() && in.ConsumeIntegralInRange(0, 2) > 0 ? l.record_attrs : l.attrs;
        if (pool.empty()) break;
        const auto& [path, name] = pick(in, pool);
        const hid_t o = H5Oopen(file, path.c_str(), H5P_DEFAULT);
        if (o < 0) break;
        perturb_attr(in, o, name);
        H5Oclose(o);
        break;
      }
      case 0:
      case 1: {  // set an attribute (existing name or any name seen in the file)
        const hid_t o = H5Oopen(file, pick(in, objects).c_str(), H5P_DEFAULT);
        if (o < 0) break;
        write_attr(in, o, interesting_name(in, l));
        H5Oclose(o);
        break;
      }
      case 2: {  // delete an attribute
        const hid_t o = H5Oopen(file, pick(in, objects).c_str(), H5P_DEFAULT);
        if (o < 0) break;
        if (!l.attr_names.empty()) {
          const std::string name = pick(in, l.attr_names);
          if (H5Aexists(o, name.c_str()) > 0) H5Adelete(o, name.c_str());
        }
        H5Oclose(o);
        break;
      }
      case 3: {  // delete an object
        const std::string& p = pick(in, objects);
        if (p != "/") H5Ldelete(file, p.c_str(), H5P_DEFAULT);
        break;
      }
      case 4:
        if (!l.datasets.empty()) replace_dataset(in, file, pick(in, l.datasets));
        break;
      case 5:
        if (!l.datasets.empty()) poke_values(in, file, pick(in, l.datasets));
        break;
      case 6: {  // copy an object beside itself under another name (duplicate records, layers)
        const std::string& p = pick(in, objects);
        if (p == "/") break;
        const std::string to = parent_of(p) + (parent_of(p) == "/" ? "" : "/") + interesting_name(in, l);
        H5Ocopy(file, p.c_str(), file, to.c_str(), H5P_DEFAULT, H5P_DEFAULT);
        break;
      }
      case 7: {  // rename an object
        const std::string& p = pick(in, objects);
        if (p == "/") break;
        const std::string to = parent_of(p) + (parent_of(p) == "/" ? "" : "/") + interesting_name(in, l);
        H5Lmove(file, p.c_str(), file, to.c_str(), H5P_DEFAULT, H5P_DEFAULT);
        break;
      }
      default: {  // an empty group or a scalar dataset where something else was expected
        const std::string& g = pick(in, l.groups);
        const std::string to = g + (g == "/" ? "" : "/") + interesting_name(in, l);
        if (in.ConsumeBool()) {
          const hid_t c = H5Gcreate2(file, to.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
          if (c >= 0) H5Gclose(c);
        } else {
          const hid_t s = H5Screate(H5S_SCALAR);
          const hid_t d = H5Dcreate2(file, to.c_str(), H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
          if (d >= 0) H5Dclose(d);
          H5Sclose(s);
        }
        break;
      }
    }
  }
}

// The edited image of template `t`, or empty when HDF5 refused to open or save it.
std::vector<char> edited_image(FuzzedDataProvider& in, const Template& t) {
  std::vector<char> image;
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 16, /*backing_store=*/0);
  H5Pset_file_image(fapl, const_cast<char*>(t.bytes.data()), t.bytes.size());
  const hid_t file = H5Fopen(t.name.c_str(), H5F_ACC_RDWR, fapl);
  H5Pclose(fapl);
  if (file < 0) return image;
  mutate(in, file, layout_of(file));
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0) {
    const ssize_t size = H5Fget_file_image(file, nullptr, 0);
    if (size > 0) {
      image.resize(static_cast<size_t>(size));
      if (H5Fget_file_image(file, image.data(), image.size()) != size) image.clear();
    }
  }
  H5Fclose(file);
  return image;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckv::fuzz::silence_stdout();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  (void)templates();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const Template& t = pick(in, templates());
  const std::vector<char> image = edited_image(in, t);
  if (image.empty()) return 0;
  ckv::fuzz::check_no_open_h5_objects("editing a template");
  const auto h5 = ckv::fuzz::write_file("mutated.h5", reinterpret_cast<const uint8_t*>(image.data()), image.size());
  ckv::fuzz::read_with_info(h5);
  if (t.partner.empty()) {
    ckv::fuzz::read_with_merge(h5);
  } else {
    ckv::fuzz::read_with_merge(h5, {t.partner});
  }
  if (t.tiny_dump) ckv::fuzz::read_with_bound_dump(h5);
  return 0;
}
