#pragma once
// `ckv merge`: shard outputs of a batch job (one `ckv dump --shard i/N` each) into one file
// of the same schema.
//
// Shards belong together when they have the same schema version, ckv build, model
// (sha256), settings, input (sha256 and record count), shard count, and the same command
// line once the flags that legitimately differ between shards are removed (--shard, -o/--out,
// --resume, --force, -q/--quiet, --progress, -v/--verbose, -t/--threads). The merged file
// must then hold every input record exactly once: a record index in [0, input_records)
// that no shard holds complete is missing; a record complete in two shards (two shard files
// of the same shard, or overlapping shards) is a duplicate. Unfinished record groups
// (no `complete`) count as absent.
#include <cstdint>
#include <filesystem>
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
};

struct MergeReport {
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
// belong with the first one and what differs; FormatError for a file that is not a dump.
MergeReport merge_dumps(const std::filesystem::path& out,
                        const std::vector<std::filesystem::path>& shards,
                        const MergeOptions& options);

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
