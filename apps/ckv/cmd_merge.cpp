// ckv merge OUT.h5 SHARD.h5...: one dump from the shard outputs of a batch job, after
// checking that they belong together and hold every input record exactly once
// (lib/io/merge.h).
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common.h"
#include "core/error.h"
#include "core/provenance.h"
#include "io/merge.h"

namespace ckv::app {
namespace {

struct MergeCliOptions {
  std::string out;
  std::vector<std::string> shards;
  bool allow_missing = false, force = false;
};

// At most `limit` entries of a list, then how many more.
std::string head_of(const std::vector<std::string>& items, size_t limit = 20) {
  std::vector<std::string> shown(items.begin(), items.begin() + static_cast<long>(std::min(limit, items.size())));
  std::string s = fmt::format("{}", fmt::join(shown, ", "));
  if (items.size() > limit) s += fmt::format(", ... ({} more)", items.size() - limit);
  return s;
}

void run_merge(const MergeCliOptions& o, const GlobalOptions& g) {
  std::vector<std::filesystem::path> shards(o.shards.begin(), o.shards.end());
  const MergeReport r = merge_dumps(o.out, shards, {.allow_missing = o.allow_missing, .force = o.force,
                                                    .command_line = join_command_line(g.argc, g.argv)});
  for (const std::string& s : r.incomplete)
    fmt::print(stderr, "ckv: warning: unfinished record {} passed over\n", s);
  if (!r.duplicates.empty())
    fail<InputError>("{}: not written: {} record(s) held by more than one shard: {}", o.out,
                     r.duplicates.size(), head_of(r.duplicates));
  if (!r.missing.empty()) {
    const std::string msg = fmt::format("{} of {} input records missing from the shards: {}", r.missing.size(),
                                        r.input_records, head_of(r.missing_ids));
    if (!o.allow_missing) fail<InputError>("{}: not written (--allow-missing writes it anyway): {}", o.out, msg);
    fmt::print(stderr, "ckv: warning: {}\n", msg);
  }
  if (!g.quiet)
    fmt::print("{}: {} records from {} files (shards {})\n", o.out, r.merged, o.shards.size(),
               fmt::join(r.shards_seen, ","));
}

}  // namespace

void register_merge(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<MergeCliOptions>();
  CLI::App* cmd = app.add_subcommand("merge", "Merge the shard outputs of a batch job into one file");
  cmd->add_option("out", o->out, "Merged output (HDF5)")->required();
  cmd->add_option("shards", o->shards, "Shard outputs (ckv dump --shard i/N)")->required()->check(CLI::ExistingFile);
  cmd->add_flag("--allow-missing", o->allow_missing,
                "Write the merge (exit status 0) even when input records are missing");
  cmd->add_flag("--force", o->force, "Replace an existing output");
  cmd->callback([o, &g] { run_merge(*o, g); });
}

}  // namespace ckv::app
