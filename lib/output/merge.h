#pragma once
// `ckv merge`: shard outputs of a batch job (one `ckv dump|bound|check|mask|eval --shard
// i/N` each) into one file of the same schema: ckv.dump, ckv.bound (kind bound or check),
// ckv.mask or ckv.eval. All of them hold one group /records/<id> per record with `index` and `complete`
// (batch_output.h); the root attributes come from the first shard, /model (dumps) too.
// The side files of a schema (bound's CSV and JSON summary) are the caller's: they are
// regenerated from the merged file (MergeOptions::before_commit).
//
// Shards belong together when they have the same schema version, ckv build, model
// (sha256), settings, input (sha256 and record count), shard count, and the same command
// line once the flags that legitimately differ between shards are removed
// (shard_invariant_command in merge.cpp): with a value --shard, -o/--out, --csv (mask's CSV
// path), -t/--threads, --timing-json (dump's timing file); alone --resume, --force,
// -q/--quiet, --progress, -v/--verbose. The merged file must then hold every input record
// exactly once: a record index in [0, input_records) that no shard holds complete is
// missing; a record complete in two shards (two shard files of the same shard, or
// overlapping shards) is a duplicate. Unfinished record groups (no `complete`) count as
// absent. The kind (bound or check) must agree too.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/shard.h"

namespace ckv {

namespace h5 {
class File;
class Object;
}  // namespace h5

struct MergeOptions {
  bool allow_missing = false;  // write the merge even when records are missing
  bool force = false;          // replace an existing output
  std::string command_line;    // of the merge, stored in the output
  // Called with the merged file's partial path once it is written and closed, before it is
  // renamed to `out`: writes the schema's side files (which then commit after it).
  std::function<void(const std::filesystem::path&)> before_commit;
};

struct MergeReport {
  std::string schema;                      // of the shards: "ckv.dump", "ckv.bound", "ckv.mask"
  std::string kind;                        // root attribute `kind` when present ("bound", "check")
  int64_t input_records = 0;
  int64_t merged = 0;                      // records written
  std::vector<int64_t> missing;            // record indices held complete by no shard
  std::vector<std::string> missing_ids;    // their ids when the input file could be read
  std::vector<std::string> duplicates;     // "id (in a.h5, b.h5)"
  std::vector<std::string> incomplete;     // "id in a.h5": unfinished groups passed over
  std::vector<int64_t> shards_seen;        // shard indices present, increasing
  bool written = false;
};

// Checks the shards and writes `out` (atomically) unless records are missing (without
// allow_missing) or duplicated. Throws InputError naming the first shard that does not
// belong with the first one and what differs; FormatError for a file of none of the
// schemas above (or of another version).
MergeReport merge_shards(const std::filesystem::path& out,
                         const std::vector<std::filesystem::path>& shards,
                         const MergeOptions& options);

// The schema ("ckv.dump", ...) of a file `ckv merge` can merge, after checking it whole
// (validate_output, output/validate.h); FormatError naming the file and object otherwise.
std::string mergeable_schema(const h5::File& file);

// InputError when a shard is given twice or an output (or its partial file) is one of the
// shards, compared by device and inode (so also through other names and hard links).
void check_merge_paths(const std::vector<std::filesystem::path>& outputs,
                       const std::vector<std::filesystem::path>& shards);

// The command line (as Provenance stores it, shell-quoted) split into words with argv[0]
// and the per-shard flags listed above removed: what must agree between shards.
std::vector<std::string> shard_invariant_command(const std::string& command_line);
// Splits a POSIX shell-quoted command line as shell_quote() writes it.
std::vector<std::string> split_shell_words(const std::string& command_line);

// The shard recorded in a file's root attributes (0/1 when absent: an unsharded run).
Shard recorded_shard(const h5::Object& root);
// For --resume: InputError naming `path` unless the file was written by this shard.
void check_same_shard(const h5::Object& root, const Shard& shard, const std::filesystem::path& path);

}  // namespace ckv
