#include "core/input_file.h"
#include "output/batch_output.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "output/provenance.h"
#include "output/h5_copy.h"
#include "output/merge.h"
#include "output/validate.h"

namespace ckv {
namespace fs = std::filesystem;

int64_t count_input_records(const fs::path& jsonl) {
  require_regular_file(jsonl, "the input");
  std::ifstream in(jsonl, std::ios::binary);
  if (!in) fail<InputError>("{}: cannot read the input", jsonl.string());
  int64_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) ++n;
  return n;
}

void set_shard_provenance(Provenance& prov, const Shard& shard, int64_t input_records) {
  prov.set("shard", shard.to_string());
  prov.set("shard_index", shard.index);
  prov.set("shard_count", shard.count);
  prov.set("input_records", input_records);
}

void check_schema(const h5::File& f, std::string_view schema, int64_t version,
                  std::string_view what) {
  if (!f.has_attr("schema") || f.attr_string("schema") != schema)
    fail<FormatError>("{}: not a {} (no schema=\"{}\" attribute)", f.file_name(), what, schema);
  const int64_t had = f.attr_int("schema_version");
  if (had != version)
    fail<FormatError>("{}: {} schema version {}, this ckv reads version {}", f.file_name(), schema,
                      had, version);
}

void check_resumable_output(const h5::File& f, const ResumeExpectation& e) {
  const std::string name = f.file_name();
  check_schema(f, e.schema, e.schema_version, e.schema + " file");
  auto text = [&](const char* key) { return f.has_attr(key) ? f.attr_string(key) : std::string("(absent)"); };
  if (!e.kind.empty() && text("kind") != e.kind)
    fail<InputError>("{}: --resume of a `ckv {}` output with `ckv {}`", name, text("kind"), e.kind);
  if (text("model_sha256") != e.model_sha256)
    fail<InputError>("{}: --resume with another model (the file's model sha256 is {}, --model's is {})", name,
                     text("model_sha256"), e.model_sha256);
  if (text("input_sha256") != e.input_sha256)
    fail<InputError>("{}: --resume with another input (the file's input sha256 is {}, now {})", name,
                     text("input_sha256"), e.input_sha256);
  const nlohmann::json stored = f.has_attr("settings") ? f.attr_json("settings") : nlohmann::json::object();
  if (stored != e.settings) {
    std::string key = "(the set of settings)";
    for (const auto& [k, v] : e.settings.items())
      if (!stored.contains(k) || stored[k] != v) {
        key = k;
        break;
      }
    fail<InputError>("{}: --resume with different settings: {} was {}, now {}", name, key,
                     stored.value(key, nlohmann::json()).dump(), e.settings.value(key, nlohmann::json()).dump());
  }
  const std::vector<std::string> had = shard_invariant_command(text("command_line"));
  const std::vector<std::string> now = shard_invariant_command(e.command_line);
  if (had != now)
    fail<InputError>("{}: --resume with another command (beyond shard and output flags): '{}' was '{}'", name,
                     fmt::join(now, " "), fmt::join(had, " "));
  check_same_shard(f, e.shard, name);
}

void check_output_to_resume(const fs::path& out, const ResumeExpectation& e) {
  const fs::path partial = AtomicOutput::partial_path_for(out);
  std::error_code ec;
  if (fs::is_regular_file(fs::symlink_status(partial, ec))) {
    // What an interrupted run left: its header must match; its records are sorted out under
    // the lock (prepare_partial_for_resume), damaged ones dropped. A file whose root cannot
    // be read at all holds nothing to continue and is started over there.
    if (has_no_header(partial)) return;
    std::optional<h5::File> f;
    try {
      f.emplace(h5::File::open_read(partial));
    } catch (const Error&) {
      return;
    }
    check_schema(*f, e.schema, e.schema_version, e.schema + " file");
    check_resumable_output(*f, e);
    return;
  }
  if (!fs::is_regular_file(fs::symlink_status(out, ec))) return;  // AtomicOutput refuses the rest
  // A finished file: checked whole, its data read through, before AtomicOutput moves it.
  const h5::File f = h5::File::open_read(out);
  check_schema(f, e.schema, e.schema_version, e.schema + " file");
  validate_output(f, {.read_data = true});
  check_resumable_output(f, e);
}

bool has_no_header(const fs::path& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return false;
  if (size == 0) return true;
  {
    // An HDF5 file starts with its 8-byte signature (ckv writes no user block).
    std::ifstream in(path, std::ios::binary);
    char magic[8] = {};
    in.read(magic, sizeof magic);
    static constexpr char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
    if (!in || !std::equal(magic, magic + 8, kSignature)) return true;
  }
  try {
    const h5::File f = h5::File::open_read(path);
    return f.attr_names().empty() && f.children().empty();
  } catch (const Error&) {
    return false;  // damaged: refused by the checks, not silently thrown away
  }
}

namespace {

// The intact records of `src` (and its root, /model) copied into a fresh file that then
// replaces the partial file. On a failed write (the disk still full) the fresh file is
// removed and the partial file stays as it was.
void rebuild_partial(const h5::File& src, const std::vector<std::string>& intact, const fs::path& partial) {
  const fs::path fresh = partial.string() + ".rebuild";
  std::error_code ec;
  fs::remove(fresh, ec);
  try {
    h5::File dst = h5::File::create(fresh);
    try {
      copy_attrs(src, dst);
      if (src.is_group("model")) copy_object(src, "/model", dst);
      dst.require_group("records");
      for (const std::string& id : intact) copy_object(src, "/records/" + id, dst);
      dst.close();
    } catch (...) {
      dst.abandon();
      throw;
    }
  } catch (const Error& e) {
    fs::remove(fresh, ec);
    fail<IoError>("{}: cannot rebuild it from its complete records (the partial file is unchanged): {}",
                  partial.string(), e.what());
  }
  fs::rename(fresh, partial, ec);
  if (ec) fail<IoError>("{}: cannot replace it with its rebuilt copy: {}", partial.string(), ec.message());
}

}  // namespace

void prepare_partial_for_resume(AtomicOutput& out) {
  if (!out.continuing()) return;
  const fs::path partial = out.partial_path();
  if (has_no_header(partial)) {
    out.restart();
    return;
  }
  if (out.reopened_final()) return;  // a finished file, checked whole by check_output_to_resume
  std::optional<h5::File> f;
  RecordSalvage salvage;
  try {
    f.emplace(h5::File::open_read(partial));
    salvage = salvage_records(*f);
  } catch (const Error& e) {
    // Nothing of it can be read (a full disk can leave even the root unreadable): there is
    // no complete record to keep.
    fmt::print(stderr, "ckv: note: {}: nothing of it can be read ({}); starting over\n", partial.string(),
               e.what());
    f.reset();
    out.restart();
    return;
  }
  if (salvage.damaged.empty()) return;  // every record group reads: continued in place
  fmt::print(stderr,
             "ckv: note: {}: {} record group(s) damaged (first: {}); rebuilding it from its {} complete "
             "record(s)\n",
             partial.string(), salvage.damaged.size(), salvage.damaged.front(), salvage.intact.size());
  rebuild_partial(*f, salvage.intact, partial);
}

void restart_headerless(AtomicOutput& out) { prepare_partial_for_resume(out); }

void note_resumed(h5::File& f, const std::string& command_line) {
  nlohmann::json resumed = f.has_attr("resumed") ? f.attr_json("resumed") : nlohmann::json::array();
  resumed.push_back({{"command_line", command_line}, {"at", iso8601_utc_now()}});
  f.set_attr_json("resumed", resumed);
}

std::set<std::string> complete_record_ids(const h5::File& f) {
  std::set<std::string> done;
  if (!f.is_group("records")) return done;
  const h5::Group records = f.open_group("records");
  for (const std::string& id : records.children()) {
    // A record being written when the disk filled up can be left unreadable (its link was
    // flushed, its object header was not): it is not complete, and --resume rewrites it.
    try {
      const h5::Group r = records.open_group(id);
      if (r.has_attr("complete") && r.attr_bool("complete")) done.insert(id);
    } catch (const FormatError&) {
    }
  }
  return done;
}

std::vector<std::string> complete_records_in_input_order(const h5::File& f) {
  std::vector<std::pair<int64_t, std::string>> order;
  for (const std::string& id : complete_record_ids(f)) {
    const h5::Group r = f.open_group("records/" + id);
    order.emplace_back(r.has_attr("index") ? r.attr_int("index") : 0, id);
  }
  std::sort(order.begin(), order.end());
  std::vector<std::string> ids;
  for (auto& [index, id] : order) ids.push_back(std::move(id));
  return ids;
}

h5::Group begin_record_group(h5::File& f, const std::string& id, int64_t index) {
  h5::Group records = f.require_group("records");
  if (records.exists(id)) records.remove(id);  // unfinished: rewritten whole
  h5::Group g = records.create_group(id);
  g.set_attr_int("index", index);
  return g;
}

void finish_record_group(h5::File& f, h5::Group& record) {
  f.flush();  // every dataset on disk before the flag that says so
  record.set_attr_bool("complete", true);
  f.flush();
}

nlohmann::ordered_json attrs_as_json(const h5::Object& o, const std::set<std::string>& skip) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const std::string& name : o.attr_names()) {
    if (skip.count(name)) continue;
    h5::Handle a(H5Aopen(o.id(), name.c_str(), H5P_DEFAULT));
    h5::Handle type(a.valid() ? H5Aget_type(a.id()) : H5I_INVALID_HID);
    h5::Handle space(a.valid() ? H5Aget_space(a.id()) : H5I_INVALID_HID);
    if (!type.valid() || !space.valid()) fail<FormatError>("{}: cannot read attribute \"{}\"", o.where(), name);
    const bool scalar = H5Sget_simple_extent_ndims(space.id()) == 0;
    switch (H5Tget_class(type.id())) {
      case H5T_STRING:
        if (scalar) out[name] = o.attr_string(name);
        else out[name] = o.attr_strings(name);
        break;
      case H5T_INTEGER:
        if (scalar) out[name] = o.attr_int(name);
        else out[name] = o.attr_ints(name);
        break;
      case H5T_FLOAT:
        if (scalar) out[name] = o.attr_double(name);
        else out[name] = o.attr_doubles(name);
        break;
      case H5T_ENUM: out[name] = o.attr_bool(name); break;
      default: out[name] = nullptr;
    }
  }
  return out;
}

}  // namespace ckv
