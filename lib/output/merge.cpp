// ckv merge: the checks that shards belong together, and the copy into one file.
#include "output/merge.h"

#include <hdf5.h>
#include <sys/stat.h>

#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/sha256.h"
#include "data/records.h"
#include "io/h5.h"
#include "io/h5_heap.h"
#include "output/batch_output.h"
#include "output/h5_copy.h"
#include "output/bound_schema.h"
#include "output/dump_schema.h"
#include "output/mask_schema.h"
#include "output/provenance.h"
#include "output/validate.h"

namespace ckv {
namespace fs = std::filesystem;
namespace {

// Root attributes that must be equal in every shard (command_line is compared separately).
constexpr const char* kSameAttrs[] = {"schema",       "schema_version", "kind",          "ckv_version",
                                      "git_commit",   "model_sha256",   "settings",      "input_sha256",
                                      "input_records", "shard_count",   "chat",          "dtype"};

std::string attr_text(const h5::Object& o, const char* name) {
  if (!o.has_attr(name)) return "(absent)";
  try {
    return o.attr_string(name);
  } catch (const Error&) {
  }
  try {
    return std::to_string(o.attr_int(name));
  } catch (const Error&) {
  }
  try {
    return o.attr_bool(name) ? "true" : "false";
  } catch (const Error&) {
  }
  return fmt::format("{}", o.attr_double(name));
}

struct ShardFile {
  fs::path path;
  h5::File file;
  Shard shard;
  std::map<int64_t, std::string> complete;  // record index -> id
};

// Index -> id of the input file, when it is still there with the hash the shards recorded.
std::map<int64_t, std::string> input_ids(const h5::Object& root) {
  std::map<int64_t, std::string> ids;
  if (!root.has_attr("input_file") || !root.has_attr("input_sha256")) return ids;
  const fs::path input = root.attr_string("input_file");
  std::error_code ec;
  if (input.empty() || !fs::is_regular_file(input, ec)) return ids;
  try {
    if (sha256_file(input) != root.attr_string("input_sha256")) return ids;
    RecordReader reader(input, true);
    while (std::optional<InputRecord> r = reader.next()) ids[r->index] = r->id;
  } catch (const Error&) {
    ids.clear();
  }
  return ids;
}

}  // namespace

std::vector<std::string> split_shell_words(const std::string& s) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  char quote = 0;  // the open quote character, 0 outside quotes
  for (const char c : s) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ') {
      if (in_word) words.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(cur);
  return words;
}

std::vector<std::string> shard_invariant_command(const std::string& command_line) {
  static const std::set<std::string> with_value = {"--shard", "-o",       "--out",    "--csv",
                                                   "-t",      "--threads", "--timing-json"};
  static const std::set<std::string> flags = {"--resume", "--force", "-q", "--quiet", "--progress",
                                              "-v", "--verbose"};
  const std::vector<std::string> words = split_shell_words(command_line);
  std::vector<std::string> kept;
  for (size_t i = 1; i < words.size(); ++i) {  // argv[0] is where the binary was, not what it did
    const std::string& w = words[i];
    if (with_value.count(w)) {
      ++i;
      continue;
    }
    const size_t eq = w.find('=');
    if (flags.count(w) || (eq != std::string::npos && with_value.count(w.substr(0, eq)))) continue;
    if (w.size() > 2 && (w.starts_with("-o") || w.starts_with("-t")) && w[1] != '-') continue;  // -oX
    kept.push_back(w);
  }
  return kept;
}

Shard recorded_shard(const h5::Object& root) {
  if (!root.has_attr("shard_index") || !root.has_attr("shard_count")) return {};
  return {root.attr_int("shard_index"), root.attr_int("shard_count")};
}

void check_same_shard(const h5::Object& root, const Shard& shard, const fs::path& path) {
  const Shard had = recorded_shard(root);
  if (!(had == shard))
    fail<InputError>("{}: written by shard {}, not {}: resume it with --shard {}", path.string(),
                     had.to_string(), shard.to_string(), had.to_string());
}

std::string mergeable_schema(const h5::File& file) {
  return validate_output(file).schema;
}

void check_merge_paths(const std::vector<fs::path>& outputs, const std::vector<fs::path>& shards) {
  struct Id {
    dev_t dev;
    ino_t ino;
    bool operator<(const Id& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
  };
  auto id_of = [](const fs::path& p) -> std::optional<Id> {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return std::nullopt;
    return Id{st.st_dev, st.st_ino};
  };
  std::map<Id, fs::path> inputs;
  for (const fs::path& p : shards) {
    const std::optional<Id> id = id_of(p);
    if (!id) continue;  // reported when it is opened
    const auto [it, added] = inputs.emplace(*id, p);
    if (!added) fail<InputError>("{}: given twice as a shard (also as {})", p.string(), it->second.string());
  }
  for (const fs::path& out : outputs) {
    for (const fs::path& name : {out, AtomicOutput::partial_path_for(out)}) {
      const std::optional<Id> id = id_of(name);
      if (!id) continue;
      if (auto it = inputs.find(*id); it != inputs.end())
        fail<InputError>("{}: the output is the shard {}: merging would overwrite an input", out.string(),
                         it->second.string());
    }
  }
}

namespace {
// InputError unless every shard is of the first one's job: the same root attributes
// (kSameAttrs) and the same command beyond the shard and output flags.
void check_same_job(const std::vector<ShardFile>& shards) {
  const ShardFile& first = shards.front();
  if (!first.file.has_attr("input_records"))
    fail<InputError>("{}: has no input_records attribute (written before sharding support): cannot "
                     "check that the shards are complete", first.path.string());
  const std::vector<std::string> command = shard_invariant_command(first.file.attr_string("command_line"));
  for (const ShardFile& s : shards) {
    for (const char* name : kSameAttrs) {
      if (attr_text(s.file, name) != attr_text(first.file, name))
        fail<InputError>("{}: does not belong with {}: {} differs ({} vs {})", s.path.string(),
                         first.path.string(), name, attr_text(s.file, name), attr_text(first.file, name));
    }
    const std::vector<std::string> c = shard_invariant_command(s.file.attr_string("command_line"));
    if (c != command)
      fail<InputError>("{}: does not belong with {}: the command differs (beyond shard and output flags): "
                       "'{}' vs '{}'", s.path.string(), first.path.string(), fmt::join(c, " "),
                       fmt::join(command, " "));
  }
}

// Writes the merged file's contents and closes it.
void write_merged(h5::File& dst, const std::vector<ShardFile>& shards,
                  const std::map<int64_t, std::vector<size_t>>& holders, const MergeOptions& options,
                  MergeReport& report);
}  // namespace

MergeReport merge_shards(const fs::path& out, const std::vector<fs::path>& paths, const MergeOptions& options) {
  if (paths.empty()) fail<InputError>("ckv merge: no shard files given");
  check_merge_paths({out}, paths);
  // A merge is not resumable: a failed one removes its partial file (a stale one is
  // replaced), so nothing of it stays to block the next run.
  AtomicOutput output(out, {.force = options.force, .resumable = false});
  std::vector<ShardFile> shards;
  for (const fs::path& p : paths) {
    // Every shard is checked whole before anything is written: what is copied is what the
    // readers of the merged file can read.
    ShardFile s{p, h5::File::open_read(p), {}, {}};
    validate_output(s.file);
    s.shard = recorded_shard(s.file);
    shards.push_back(std::move(s));
  }
  const ShardFile& first = shards.front();
  check_same_job(shards);

  MergeReport report;
  report.schema = first.file.attr_string("schema");
  report.kind = first.file.has_attr("kind") ? first.file.attr_string("kind") : "";
  report.input_records = first.file.attr_int("input_records");
  std::map<int64_t, std::vector<size_t>> holders;  // record index -> shards holding it complete
  std::map<int64_t, std::string> id_of;
  std::set<int64_t> seen_shards;
  for (size_t k = 0; k < shards.size(); ++k) {
    ShardFile& s = shards[k];
    seen_shards.insert(s.shard.index);
    const std::set<std::string> complete = complete_record_ids(s.file);
    if (!s.file.exists("records")) continue;
    const h5::Group records = s.file.open_group("records");
    for (const std::string& id : records.children()) {
      if (!complete.count(id)) {
        report.incomplete.push_back(fmt::format("{} in {}", id, s.path.string()));
        continue;
      }
      const int64_t index = records.open_group(id).attr_int("index");
      if (index < 0 || index >= report.input_records || !s.shard.contains(index))
        fail<InputError>("{}: record \"{}\" has index {}, which is not in shard {} of {} records",
                         s.path.string(), id, index, s.shard.to_string(), report.input_records);
      s.complete[index] = id;
      holders[index].push_back(k);
      id_of[index] = id;
    }
  }
  report.shards_seen.assign(seen_shards.begin(), seen_shards.end());
  for (const auto& [index, where] : holders) {
    if (where.size() < 2) continue;
    std::vector<std::string> names;
    for (size_t k : where) names.push_back(shards[k].path.string());
    report.duplicates.push_back(fmt::format("{} (index {}, in {})", id_of[index], index, fmt::join(names, ", ")));
  }
  for (int64_t i = 0; i < report.input_records; ++i)
    if (!holders.count(i)) report.missing.push_back(i);
  if (!report.missing.empty()) {
    const std::map<int64_t, std::string> ids = input_ids(first.file);
    for (int64_t i : report.missing) {
      auto it = ids.find(i);
      report.missing_ids.push_back(it == ids.end() ? fmt::format("#{}", i) : it->second);
    }
  }
  if (!report.duplicates.empty() || (!report.missing.empty() && !options.allow_missing)) return report;

  h5::File dst = h5::File::create(output.partial_path());
  try {
    write_merged(dst, shards, holders, options, report);
  } catch (const IoError&) {
    // A failed write (a full disk) leaves HDF5 unable to flush: release the file without
    // writing again (h5::File::abandon); `output` removes the partial file.
    dst.abandon();
    throw;
  } catch (...) {
    // A shard found damaged while copying (writes so far succeeded): close the output as
    // usual, so HDF5 frees it (an abandoned file's memory is kept until exit); `output`
    // removes it.
    try {
      dst.close();
    } catch (const Error&) {
      dst.abandon();
    }
    throw;
  }
  if (options.before_commit) options.before_commit(output.partial_path());
  output.commit();
  report.written = true;
  return report;
}

namespace {

void write_merged(h5::File& dst, const std::vector<ShardFile>& shards,
                  const std::map<int64_t, std::vector<size_t>>& holders, const MergeOptions& options,
                  MergeReport& report) {
  const ShardFile& first = shards.front();
  copy_attrs(first.file, dst);
  for (const char* drop : {"shard", "shard_index", "resumed"})
    if (dst.has_attr(drop)) dst.remove_attr(drop);
  nlohmann::json from = nlohmann::json::array();
  for (const ShardFile& s : shards) {
    nlohmann::json e = {{"file", s.path.string()}, {"shard", s.shard.to_string()},
                        {"records", s.complete.size()}};
    for (const char* key : {"command_line", "hostname", "created", "resumed"})
      if (s.file.has_attr(key)) e[key] = s.file.attr_string(key);
    from.push_back(std::move(e));
  }
  dst.set_attr_json("merged_from", from);
  dst.set_attr_string("merge_command_line", options.command_line);
  dst.set_attr_string("merged_at", iso8601_utc_now());
  if (first.file.exists("model")) {
    copy_object(first.file, "/model", dst);
  }
  dst.require_group("records");
  for (const auto& [index, where] : holders) {
    const ShardFile& s = shards[where.front()];
    copy_object(s.file, "/records/" + s.complete.at(index), dst);
    ++report.merged;
  }
  dst.close();
}

}  // namespace

}  // namespace ckv
