// ckv merge OUT SHARD.h5...: one file from the shard outputs of a batch job (ckv dump,
// bound, check or mask with --shard), after checking that they belong together and hold
// every input record exactly once (lib/output/merge.h). The schema decides the side files: a
// bound/check merge also writes OUT's .csv and .json, regenerated from the merged HDF5
// exactly as a single run writes them (output/bound_report.h); a mask merge writes --csv.
#include <fstream>
#include <functional>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "output/provenance.h"
#include "output/bound_report.h"
#include "output/bound_schema.h"
#include "output/eval_schema.h"
#include "io/h5.h"
#include "output/mask_schema.h"
#include "output/merge.h"

namespace ckv::app {
namespace {

namespace fs = std::filesystem;

struct MergeCliOptions {
  std::string out, csv;
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

// The side files a schema's merge writes besides the HDF5 file, regenerated from it.
struct SideFiles {
  fs::path h5;                               // the merged HDF5 file
  std::vector<AtomicOutput> outputs;         // committed after the HDF5 file
  std::function<void(const fs::path&)> write;  // from the merged file's partial path
};

SideFiles side_files(const MergeCliOptions& o, const std::string& schema) {
  SideFiles s;
  s.h5 = o.out;
  // Not resumable: a failed merge removes its partial files (and replaces stale ones).
  const AtomicOutputOptions opt{.force = o.force, .resumable = false};
  if (schema == kEvalSchema) {
    // As `ckv eval -o PREFIX`: OUT is PREFIX or PREFIX.h5.
    const std::string prefix = o.out.ends_with(".h5") ? o.out.substr(0, o.out.size() - 3) : o.out;
    s.h5 = prefix + ".h5";
    s.outputs.emplace_back(prefix + ".csv", opt);
    s.outputs.emplace_back(prefix + ".json", opt);
    s.write = [csv = s.outputs[0].partial_path(), json = s.outputs[1].partial_path()](const fs::path& h5) {
      write_eval_summaries(h5, csv, json);
    };
  } else if (schema == kBoundSchema) {
    // As `ckv bound -o PREFIX`: OUT is PREFIX or PREFIX.h5.
    const std::string prefix = o.out.ends_with(".h5") ? o.out.substr(0, o.out.size() - 3) : o.out;
    s.h5 = prefix + ".h5";
    s.outputs.emplace_back(prefix + ".csv", opt);
    s.outputs.emplace_back(prefix + ".json", opt);
    s.write = [csv = s.outputs[0].partial_path(), json = s.outputs[1].partial_path(), prefix](const fs::path& h5) {
      fmt::print("{}", write_bound_summaries(h5, csv, json, prefix));
    };
  } else if (schema == kMaskSchema && !o.csv.empty()) {
    s.outputs.emplace_back(o.csv, opt);
    s.write = [partial = s.outputs[0].partial_path(), csv = o.csv](const fs::path& h5) {
      std::ofstream out(partial, std::ios::binary | std::ios::trunc);
      write_mask_csv_file(h5, out);
      out.close();
      if (!out) fail<IoError>("{}: write failed", csv);
    };
  } else if (!o.csv.empty()) {
    fail<InputError>("--csv: only a merge of `ckv mask` shards writes a CSV ({} is {})", o.shards.front(), schema);
  }
  return s;
}

void run_merge(const MergeCliOptions& o, const GlobalOptions& g) {
  std::vector<fs::path> shards(o.shards.begin(), o.shards.end());
  const std::string schema = mergeable_schema(h5::File::open_read(shards.front()));
  {
    // Every output refused (an input, a busy or special file) before any is opened.
    std::vector<fs::path> outputs{o.out};
    if (schema == kBoundSchema || schema == kEvalSchema) {
      const std::string prefix = o.out.ends_with(".h5") ? o.out.substr(0, o.out.size() - 3) : o.out;
      outputs = {prefix + ".h5", prefix + ".csv", prefix + ".json"};
    } else if (!o.csv.empty()) {
      outputs.push_back(o.csv);
    }
    check_merge_paths(outputs, shards);
    for (const fs::path& p : outputs) AtomicOutput::check(p, {.force = o.force, .resumable = false});
  }
  SideFiles side = side_files(o, schema);
  const MergeReport r = merge_shards(side.h5, shards,
                                     {.allow_missing = o.allow_missing, .force = o.force,
                                      .command_line = join_command_line(g.argc, g.argv), .before_commit = side.write});
  for (const std::string& s : r.incomplete)
    fmt::print(stderr, "ckv: warning: unfinished record {} passed over\n", s);
  if (!r.duplicates.empty())
    fail<InputError>("{}: not written: {} record(s) held by more than one shard: {}", side.h5.string(),
                     r.duplicates.size(), head_of(r.duplicates));
  if (!r.missing.empty()) {
    const std::string msg = fmt::format("{} of {} input records missing from the shards: {}", r.missing.size(),
                                        r.input_records, head_of(r.missing_ids));
    if (!o.allow_missing)
      fail<InputError>("{}: not written (--allow-missing writes it anyway): {}", side.h5.string(), msg);
    fmt::print(stderr, "ckv: warning: {}\n", msg);
  }
  for (AtomicOutput& out : side.outputs) out.commit();
  if (!g.quiet) {
    std::string also;
    for (const AtomicOutput& out : side.outputs) also += ", " + out.final_path().string();
    fmt::print("{}{}: {} records from {} files (shards {})\n", side.h5.string(), also, r.merged, o.shards.size(),
               fmt::join(r.shards_seen, ","));
  }
}

}  // namespace

void register_merge(CLI::App& app, GlobalOptions& g) {
  auto o = std::make_shared<MergeCliOptions>();
  CLI::App* cmd = app.add_subcommand("merge", "Merge the shard outputs of a batch job into one file");
  cmd->add_option("out", o->out,
                  "Merged output (HDF5); for bound/check/eval shards a prefix as their -o (PREFIX[.h5], PREFIX.csv, "
                  "PREFIX.json)")->required();
  cmd->add_option("shards", o->shards, "Shard outputs (ckv dump|bound|check|mask|eval --shard i/N)")
      ->required()->check(CLI::ExistingFile);
  cmd->add_option("--csv", o->csv, "Mask shards: also write the merged tidy CSV (as `ckv mask --csv`)");
  cmd->add_flag("--allow-missing", o->allow_missing,
                "Write the merge (exit status 0) even when input records are missing");
  cmd->add_flag("--force", o->force, "Replace existing outputs");
  cmd->callback([o, &g] { run_merge(*o, g); });
}

}  // namespace ckv::app
