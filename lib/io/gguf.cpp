// GGUF v3 reader.
//
// On-disk layout (ggml docs/gguf.md), all little-endian, no padding unless stated:
//
//   u32    magic            "GGUF" = bytes 47 47 55 46
//   u32    version          3 (2 has the same layout and is accepted)
//   u64    tensor_count
//   u64    metadata_kv_count
//   metadata_kv_count times:
//     string key            u64 length + that many UTF-8 bytes, no NUL
//     u32    value_type     0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool,
//                           8 string, 9 array, 10 u64, 11 i64, 12 f64
//     value                 scalars in their width (bool one byte); an array is
//                           u32 element_type, u64 count, then count elements
//   tensor_count times:
//     string name
//     u32    n_dims         <= 4
//     u64    dims[n_dims]   dims[0] varies fastest, so {in, out} is HF [out, in]
//     u32    ggml_type      0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 12 Q4_K, 14 Q6_K, 30 BF16 ...
//     u64    offset         from the start of the data section; a multiple of alignment
//   padding to `general.alignment` (u32 power of two, default 32)
//   data section            tensor bytes, dims[0] a whole number of blocks per row
//
// Every count, length and offset is checked against the bytes that remain before it is
// used, so a hostile file cannot make us read outside the mapping or reserve memory it
// does not back with bytes.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"
#include "io/quant.h"

namespace ckv {
namespace {

constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kDefaultAlignment = 32;

enum ValueType : uint32_t {
  kU8 = 0,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kF32,
  kBool,
  kString,
  kArray,
  kU64,
  kI64,
  kF64,
  kTypeCount
};

// Smallest encoded size of one value of each type, used to bound counts by bytes left.
uint64_t min_value_bytes(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kString:
    case kU64:
    case kI64:
    case kF64:
      return 8;
    case kArray:
      return 12;
    default:
      return 1;
  }
}

// ggml type names for messages; ids that ggml retired are left empty.
std::string_view ggml_type_name(uint32_t id) {
  static constexpr std::string_view kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "",       "",      "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "",
      "",        "",       "TQ1_0",   "TQ2_0", "",       "",      "",      "MXFP4"};
  if (id < std::size(kNames) && !kNames[id].empty()) return kNames[id];
  return {};
}

std::optional<DType> dtype_from_ggml(uint32_t id) {
  for (const DTypeTraits& t : kDTypeTraits)
    if (t.ggml_type == id) return t.type;
  return std::nullopt;
}

// "F32, F16, ...": the stored types ckv reads (io/dtype.h), for messages.
std::string supported_type_names() {
  std::string names;
  for (const DTypeTraits& t : kDTypeTraits)
    names += (names.empty() ? "" : ", ") + std::string(t.name);
  return names;
}

// Bounds-checked little-endian reader over the mapping.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  void need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      fail<FormatError>("{}: truncated at byte {}: {} needs {} bytes, {} left", path_, pos_, what,
                        n, remaining());
    }
  }
  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(std::string_view what) {
    const auto len = read<uint64_t>(what);
    need(len, what);
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  // A count of items each at least min_bytes long: larger than the bytes left can hold
  // means the file lies, and we refuse before reserving memory for it.
  uint64_t read_count(std::string_view what, uint64_t min_bytes) {
    const auto n = read<uint64_t>(what);
    if (n > remaining() / min_bytes) {
      fail<FormatError>("{}: {} {} cannot fit in the {} bytes left at byte {}", path_, what, n,
                        remaining(), pos_);
    }
    return n;
  }
  const std::string& path() const { return path_; }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& path_;
  uint64_t pos_ = 0;
};

int64_t read_int_scalar(Cursor& c, uint32_t type, const std::string& key) {
  switch (type) {
    case kU8:
      return c.read<uint8_t>(key);
    case kI8:
      return c.read<int8_t>(key);
    case kU16:
      return c.read<uint16_t>(key);
    case kI16:
      return c.read<int16_t>(key);
    case kU32:
      return c.read<uint32_t>(key);
    case kI32:
      return c.read<int32_t>(key);
    case kI64:
      return c.read<int64_t>(key);
    case kU64:
      return static_cast<int64_t>(c.read<uint64_t>(key));
    case kBool:
      return c.read<uint8_t>(key) != 0 ? 1 : 0;
    default:
      fail<FormatError>("{}: key '{}': not an integer type {}", c.path(), key, type);
  }
}

GgufArray read_array(Cursor& c, const std::string& key) {
  GgufArray a;
  a.element_type = c.read<uint32_t>(key);
  if (a.element_type >= kTypeCount) {
    fail<FormatError>("{}: key '{}': unknown array element type {}", c.path(), key, a.element_type);
  }
  if (a.element_type == kArray) {
    fail<FormatError>("{}: key '{}': nested arrays are not supported", c.path(), key);
  }
  const uint64_t n = c.read_count(key + " array length", min_value_bytes(a.element_type));
  switch (a.element_type) {
    case kString:
      a.strings.reserve(n);
      for (uint64_t i = 0; i < n; ++i) a.strings.push_back(c.read_string(key));
      break;
    case kF32:
      a.floats.reserve(n);
      for (uint64_t i = 0; i < n; ++i) a.floats.push_back(c.read<float>(key));
      break;
    case kF64:
      a.floats.reserve(n);
      for (uint64_t i = 0; i < n; ++i) a.floats.push_back(c.read<double>(key));
      break;
    default:
      a.ints.reserve(n);
      for (uint64_t i = 0; i < n; ++i) a.ints.push_back(read_int_scalar(c, a.element_type, key));
  }
  return a;
}

GgufValue read_value(Cursor& c, uint32_t type, const std::string& key) {
  switch (type) {
    case kF32:
      return static_cast<double>(c.read<float>(key));
    case kF64:
      return c.read<double>(key);
    case kBool: {
      const auto b = c.read<uint8_t>(key);
      if (b > 1) fail<FormatError>("{}: key '{}': bool value {} is not 0 or 1", c.path(), key, b);
      return b == 1;
    }
    case kString:
      return c.read_string(key);
    case kArray:
      return read_array(c, key);
    case kU64:
      return c.read<uint64_t>(key);
    default:
      if (type >= kTypeCount) {
        fail<FormatError>("{}: key '{}': unknown value type {}", c.path(), key, type);
      }
      return read_int_scalar(c, type, key);
  }
}

// One tensor info: name, dims (innermost first in the file), ggml type and offset relative to
// the data section (into `relative_offset`); the element count, the type, the row's whole
// blocks and the offset's alignment checked.
TensorInfo read_tensor_info(Cursor& c, const std::string& path, uint64_t alignment, uint64_t& relative_offset) {
  TensorInfo t;
  t.name = c.read_string("tensor name");
  const auto n_dims = c.read<uint32_t>(t.name + " n_dims");
  if (n_dims > kMaxDims) {
    fail<FormatError>("{}: tensor '{}' has {} dimensions (at most {})", path, t.name, n_dims,
                      kMaxDims);
  }
  std::vector<int64_t> dims(n_dims);
  int64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    const auto dim = c.read<uint64_t>(t.name + " dims");
    if (dim > static_cast<uint64_t>(INT64_MAX) ||
        (dim != 0 && numel > INT64_MAX / static_cast<int64_t>(dim))) {
      fail<FormatError>("{}: tensor '{}': element count overflows", path, t.name);
    }
    dims[d] = static_cast<int64_t>(dim);
    numel *= dims[d];
  }
  const auto type_id = c.read<uint32_t>(t.name + " type");
  const std::optional<DType> dtype = dtype_from_ggml(type_id);
  if (!dtype) {
    const std::string_view name = ggml_type_name(type_id);
    if (name.empty()) {
      fail<FormatError>("{}: tensor '{}' has unknown ggml type id {}", path, t.name, type_id);
    }
    fail<UnsupportedError>(
        "{}: tensor '{}' has ggml type {} ({}), which ckv does not support ({})", path, t.name,
        type_id, name, supported_type_names());
  }
  t.dtype = *dtype;
  const int64_t row = n_dims == 0 ? 1 : dims[0];
  if (row % block_elements(t.dtype) != 0) {
    fail<FormatError>("{}: tensor '{}': row of {} elements is not a whole number of {} blocks",
                      path, t.name, row, dtype_name(t.dtype));
  }
  try {
    t.nbytes = storage_bytes(t.dtype, numel);
  } catch (const FormatError& e) {
    fail<FormatError>("{}: tensor '{}': {}", path, t.name, e.what());
  }
  t.shape.assign(dims.rbegin(), dims.rend());
  relative_offset = c.read<uint64_t>(t.name + " offset");
  if (relative_offset % alignment != 0) {
    fail<FormatError>("{}: tensor '{}': offset {} is not a multiple of the alignment {}", path,
                      t.name, relative_offset, alignment);
  }
  return t;
}

// Places the tensors in the data section, which starts at the next multiple of the alignment
// after the infos (byte `end_of_infos`): each inside the file, no two sharing a byte.
void place_tensors(std::vector<TensorInfo>& tensors, const std::vector<uint64_t>& relative_offsets,
                   uint64_t end_of_infos, uint64_t alignment, uint64_t file_size, const std::string& path) {
  const uint64_t data_start = end_of_infos + (alignment - end_of_infos % alignment) % alignment;
  if (data_start < end_of_infos || (!tensors.empty() && data_start > file_size)) {
    fail<FormatError>("{}: data section at byte {} starts past the end of the file ({} bytes)",
                      path, data_start, file_size);
  }
  const uint64_t data_size = !tensors.empty() ? file_size - data_start : 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TensorInfo& t = tensors[i];
    if (relative_offsets[i] > data_size || t.nbytes > data_size - relative_offsets[i]) {
      fail<FormatError>(
          "{}: tensor '{}': {} bytes at data offset {} run past the end of the "
          "file (data section holds {} bytes)",
          path, t.name, t.nbytes, relative_offsets[i], data_size);
    }
    t.offset = data_start + relative_offsets[i];
  }
  // Tensors may not share bytes: sort by offset and compare neighbours.
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors.size());
  for (const TensorInfo& t : tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* x, const TensorInfo* y) { return x->offset < y->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    if (prev.offset + prev.nbytes > by_offset[i]->offset) {
      fail<FormatError>("{}: tensors '{}' and '{}' overlap", path, prev.name, by_offset[i]->name);
    }
  }
}

}  // namespace

GgufFile::GgufFile(const std::filesystem::path& path) : file_(path) {
  parse();
}
GgufFile::GgufFile(MappedFile file) : file_(std::move(file)) {
  parse();
}

void GgufFile::parse() {
  const std::string path = file_.path().string();
  Cursor c(file_.bytes(), path);
  c.need(4, "magic");
  if (std::memcmp(file_.bytes().data(), "GGUF", 4) != 0) {
    fail<FormatError>("{}: not a GGUF file (magic is not 'GGUF')", path);
  }
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    fail<UnsupportedError>("{}: GGUF version {} is not supported (expected 3)", path, version_);
  }
  // Lower bounds on each record's size: a key/value is at least a string length and a
  // type; a tensor info at least a name length, n_dims, type and offset.
  const uint64_t tensor_count = c.read<uint64_t>("tensor_count");
  const uint64_t kv_count = c.read_count("metadata_kv_count", 8 + 4 + 1);
  if (tensor_count > c.remaining() / (8 + 4 + 4 + 8)) {
    fail<FormatError>("{}: tensor_count {} cannot fit in a file of {} bytes", path, tensor_count,
                      file_.size());
  }

  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = c.read_string("metadata key");
    const auto type = c.read<uint32_t>(key);
    GgufValue value = read_value(c, type, key);
    if (!metadata_.emplace(key, std::move(value)).second) {
      fail<FormatError>("{}: metadata key '{}' appears twice", path, key);
    }
  }

  uint64_t alignment = kDefaultAlignment;
  if (metadata_.contains("general.alignment")) {
    const int64_t a = get_int("general.alignment").value();
    if (a <= 0 || !std::has_single_bit(static_cast<uint64_t>(a))) {
      fail<FormatError>("{}: general.alignment {} is not a power of two", path, a);
    }
    alignment = static_cast<uint64_t>(a);
  }

  std::vector<uint64_t> relative_offsets;
  tensors_.reserve(tensor_count);
  relative_offsets.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    uint64_t offset = 0;
    TensorInfo t = read_tensor_info(c, path, alignment, offset);
    relative_offsets.push_back(offset);
    if (!index_.emplace(t.name, tensors_.size()).second) {
      fail<FormatError>("{}: tensor '{}' appears twice", path, t.name);
    }
    tensors_.push_back(std::move(t));
  }
  place_tensors(tensors_, relative_offsets, c.pos(), alignment, file_.size(), path);
}

const TensorInfo* GgufFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor GgufFile::load_f32(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail<FormatError>("{}: no tensor '{}'", path().string(), name);
  Tensor out(t->shape);
  dequantize(t->dtype, file_.bytes().subspan(t->offset, t->nbytes), out.span());
  return out;
}

std::span<const uint8_t> GgufFile::stored_bytes(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail<FormatError>("{}: no tensor '{}'", path().string(), name);
  return file_.bytes().subspan(t->offset, t->nbytes);
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (const auto* s = std::get_if<std::string>(&it->second)) return *s;
  fail<FormatError>("{}: metadata '{}' is not a string", path().string(), key);
}

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(&it->second)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&it->second)) {
    if (*u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(*u);
    fail<FormatError>("{}: metadata '{}' = {} is too large", path().string(), key, *u);
  }
  fail<FormatError>("{}: metadata '{}' is not an integer", path().string(), key);
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (const auto* d = std::get_if<double>(&it->second)) return *d;
  if (const auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&it->second)) return static_cast<double>(*u);
  fail<FormatError>("{}: metadata '{}' is not a number", path().string(), key);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return std::nullopt;
  if (const auto* b = std::get_if<bool>(&it->second)) return *b;
  fail<FormatError>("{}: metadata '{}' is not a bool", path().string(), key);
}

namespace {
const GgufArray* array_of(const std::map<std::string, GgufValue, std::less<>>& metadata,
                          std::string_view key, const std::filesystem::path& path) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return nullptr;
  if (const auto* a = std::get_if<GgufArray>(&it->second)) return a;
  fail<FormatError>("{}: metadata '{}' is not an array", path.string(), key);
}
}  // namespace

std::optional<std::vector<std::string>> GgufFile::get_string_array(std::string_view key) const {
  const GgufArray* a = array_of(metadata_, key, path());
  if (a == nullptr) return std::nullopt;
  if (a->element_type != kString && a->size() > 0) {
    fail<FormatError>("{}: metadata '{}' is not an array of strings", path().string(), key);
  }
  return a->strings;
}

std::optional<std::vector<double>> GgufFile::get_float_array(std::string_view key) const {
  const GgufArray* a = array_of(metadata_, key, path());
  if (a == nullptr) return std::nullopt;
  if (a->element_type == kString && a->size() > 0) {
    fail<FormatError>("{}: metadata '{}' is not an array of numbers", path().string(), key);
  }
  if (!a->floats.empty()) return a->floats;
  return std::vector<double>(a->ints.begin(), a->ints.end());
}

std::optional<std::vector<int64_t>> GgufFile::get_int_array(std::string_view key) const {
  const GgufArray* a = array_of(metadata_, key, path());
  if (a == nullptr) return std::nullopt;
  if (!a->strings.empty() || !a->floats.empty()) {
    fail<FormatError>("{}: metadata '{}' is not an array of integers", path().string(), key);
  }
  return a->ints;
}

}  // namespace ckv
