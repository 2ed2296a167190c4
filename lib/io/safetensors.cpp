// HF safetensors reader.
//
// File layout (huggingface/safetensors README): u64 little-endian N, then N bytes of UTF-8
// JSON (an object, possibly right-padded with spaces), then the data buffer. Each JSON entry
// "name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} locates a row-major,
// little-endian tensor at buffer[begin, end); "__metadata__" maps strings to strings. Like
// the reference implementation we require the entries to tile the buffer exactly: no
// overlaps, no holes, nothing after the last tensor.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/quant.h"

namespace ckv {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's cap

// nullopt for dtypes safetensors defines but ckv does not load; throws for unknown names.
std::optional<DType> parse_dtype(const std::string& s, const std::string& path,
                                 const std::string& tensor) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  static constexpr std::string_view kKnown[] = {
      "F64",  "I64",     "I32",     "I16",     "I8",      "U8",      "U16", "U32", "U64",
      "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};
  if (std::find(std::begin(kKnown), std::end(kKnown), s) != std::end(kKnown)) {
    fail<UnsupportedError>(
        "{}: tensor '{}' has dtype {}, which ckv does not support (F32, F16, "
        "BF16)",
        path, tensor, s);
  }
  fail<FormatError>("{}: tensor '{}' has unknown dtype '{}'", path, tensor, s);
}

uint64_t unsigned_field(const nlohmann::json& v, const std::string& path, const std::string& tensor,
                        std::string_view field) {
  if (!v.is_number_unsigned()) {
    fail<FormatError>("{}: tensor '{}': {} holds {} where a non-negative integer belongs", path,
                      tensor, field, v.dump());
  }
  return v.get<uint64_t>();
}

nlohmann::json parse_json(std::string_view text, const std::string& path, std::string_view what) {
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) fail<FormatError>("{}: {} is not valid JSON", path, what);
  if (!j.is_object()) fail<FormatError>("{}: {} is not a JSON object", path, what);
  return j;
}

// One tensor's header entry {"dtype", "shape", "data_offsets": [begin, end]}, with its
// element count, its dtype and its byte span inside the buffer checked; `begin`/`end` are the
// offsets in the buffer.
TensorInfo read_tensor_entry(const std::string& name, const nlohmann::json& entry, const std::string& path,
                             uint64_t buffer_size, uint64_t& begin, uint64_t& end) {
  if (!entry.is_object()) fail<FormatError>("{}: tensor '{}' is not a JSON object", path, name);
  const auto dtype_it = entry.find("dtype");
  const auto shape_it = entry.find("shape");
  const auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    fail<FormatError>("{}: tensor '{}' has no dtype string", path, name);
  }
  if (shape_it == entry.end() || !shape_it->is_array()) {
    fail<FormatError>("{}: tensor '{}' has no shape array", path, name);
  }
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    fail<FormatError>("{}: tensor '{}' needs data_offsets [begin, end]", path, name);
  }
  TensorInfo t;
  t.name = name;
  const std::optional<DType> dtype = parse_dtype(dtype_it->get<std::string>(), path, name);
  t.dtype = *dtype;
  uint64_t numel = 1;
  for (const auto& d : *shape_it) {
    const uint64_t dim = unsigned_field(d, path, name, "shape");
    if (dim > static_cast<uint64_t>(INT64_MAX) || (dim != 0 && numel > INT64_MAX / dim)) {
      fail<FormatError>("{}: tensor '{}': shape {} overflows", path, name, shape_it->dump());
    }
    numel *= dim;
    t.shape.push_back(static_cast<int64_t>(dim));
  }
  try {
    t.nbytes = storage_bytes(t.dtype, static_cast<int64_t>(numel));
  } catch (const FormatError& e) {
    fail<FormatError>("{}: tensor '{}': {}", path, name, e.what());
  }
  begin = unsigned_field((*offsets_it)[0], path, name, "data_offsets");
  end = unsigned_field((*offsets_it)[1], path, name, "data_offsets");
  if (begin > end || end > buffer_size) {
    fail<FormatError>("{}: tensor '{}': data_offsets [{}, {}] lie outside the {}-byte buffer",
                      path, name, begin, end, buffer_size);
  }
  if (end - begin != t.nbytes) {
    fail<FormatError>("{}: tensor '{}': data_offsets span {} bytes, but {} {} elements need {}",
                      path, name, end - begin, numel, dtype_name(t.dtype), t.nbytes);
  }
  return t;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : file_(path) {
  parse();
}
SafetensorsFile::SafetensorsFile(MappedFile file) : file_(std::move(file)) {
  parse();
}

void SafetensorsFile::parse() {
  const std::string path = file_.path().string();
  const std::span<const uint8_t> bytes = file_.bytes();
  if (bytes.size() < 8) {
    fail<FormatError>("{}: truncated: {} bytes, but the header length alone takes 8", path,
                      bytes.size());
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  if (header_bytes > kMaxHeaderBytes) {
    fail<FormatError>("{}: header of {} bytes exceeds the limit of {}", path, header_bytes,
                      kMaxHeaderBytes);
  }
  if (header_bytes > bytes.size() - 8) {
    fail<FormatError>("{}: truncated: header claims {} bytes, only {} follow", path, header_bytes,
                      bytes.size() - 8);
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), header_bytes);
  const nlohmann::json header = parse_json(text, path, "header");
  const uint64_t buffer_start = 8 + header_bytes;
  const uint64_t buffer_size = bytes.size() - buffer_start;

  struct Range {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail<FormatError>("{}: __metadata__ is not an object", path);
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          fail<FormatError>("{}: __metadata__ '{}' is not a string", path, key);
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    uint64_t begin = 0, end = 0;
    TensorInfo t = read_tensor_entry(name, entry, path, buffer_size, begin, end);
    t.offset = buffer_start + begin;
    ranges.push_back({begin, end, tensors_.size()});
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Range& r : ranges) {
    if (r.begin != covered) {
      fail<FormatError>(
          "{}: tensor '{}' starts at buffer byte {}, expected {} ({})", path,
          tensors_[r.tensor].name, r.begin, covered,
          r.begin < covered ? "it overlaps the tensor before it" : "a gap precedes it");
    }
    covered = r.end;
  }
  if (covered != buffer_size) {
    fail<FormatError>("{}: the tensors cover {} bytes of a {}-byte data buffer", path, covered,
                      buffer_size);
  }
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsFile::load_f32(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail<FormatError>("{}: no tensor '{}'", file_.path().string(), name);
  Tensor out(t->shape);
  dequantize(t->dtype, file_.bytes().subspan(t->offset, t->nbytes), out.span());
  return out;
}

std::span<const uint8_t> SafetensorsFile::stored_bytes(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail<FormatError>("{}: no tensor '{}'", file_.path().string(), name);
  return file_.bytes().subspan(t->offset, t->nbytes);
}

std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::string& source) {
  const nlohmann::json j = parse_json(json_text, source, "index");
  const auto map_it = j.find("weight_map");
  if (map_it == j.end() || !map_it->is_object()) {
    fail<FormatError>("{}: no weight_map object", source);
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string())
      fail<FormatError>("{}: weight_map['{}'] is not a string", source, tensor);
    const std::string file = shard.get<std::string>();
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\\') != std::string::npos || file.find('\0') != std::string::npos) {
      fail<FormatError>("{}: weight_map['{}'] = '{}' is not a plain file name", source, tensor,
                        file);
    }
    weight_map.emplace(tensor, file);
  }
  return weight_map;
}

SafetensorsDir::SafetensorsDir(const std::filesystem::path& dir) : dir_(dir) {
  const std::filesystem::path index_path = dir / "model.safetensors.index.json";
  const std::filesystem::path single_path = dir / "model.safetensors";
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> shard_names;
  if (std::filesystem::exists(index_path)) {
    const MappedFile index(index_path);
    const std::string_view text(reinterpret_cast<const char*>(index.bytes().data()), index.size());
    weight_map = parse_safetensors_index(text, index_path.string());
    for (const auto& [tensor, shard] : weight_map) shard_names.push_back(shard);
    std::sort(shard_names.begin(), shard_names.end());
    shard_names.erase(std::unique(shard_names.begin(), shard_names.end()), shard_names.end());
  } else if (std::filesystem::exists(single_path)) {
    shard_names.push_back("model.safetensors");
  } else {
    fail<FormatError>("{}: no model.safetensors or model.safetensors.index.json", dir.string());
  }

  for (const std::string& shard : shard_names) {
    shards_.push_back(std::make_unique<SafetensorsFile>(dir / shard));
    const size_t shard_index = shards_.size() - 1;
    for (const TensorInfo& t : shards_.back()->tensors()) {
      if (!owner_.emplace(t.name, shard_index).second) {
        fail<FormatError>("{}: tensor '{}' is in more than one shard", dir.string(), t.name);
      }
      tensors_.push_back(t);
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    const auto it = owner_.find(tensor);
    if (it == owner_.end() || shard_names[it->second] != shard) {
      fail<FormatError>("{}: weight_map puts '{}' in {}, which does not hold it",
                        index_path.string(), tensor, shard);
    }
  }
}

const TensorInfo* SafetensorsDir::find(std::string_view name) const {
  auto it = owner_.find(name);
  return it == owner_.end() ? nullptr : shards_[it->second]->find(name);
}

Tensor SafetensorsDir::load_f32(std::string_view name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail<FormatError>("{}: no tensor '{}'", dir_.string(), name);
  return shards_[it->second]->load_f32(name);
}

std::span<const uint8_t> SafetensorsDir::stored_bytes(std::string_view name) const {
  auto it = owner_.find(name);
  if (it == owner_.end()) fail<FormatError>("{}: no tensor '{}'", dir_.string(), name);
  return shards_[it->second]->stored_bytes(name);
}

}  // namespace ckv
