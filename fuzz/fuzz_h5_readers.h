#pragma once
// The readers of ckv's HDF5 outputs, run through ckv's own command line on a file in the
// fuzz work directory (fuzz_util.h): `ckv info` (text and --json), `ckv merge` (the file
// alone, and with a second shard when given), and `ckv bound --dump` with the tiny model
// of tests/data (the dump must have been made with it, or bound stops at the sha256
// check). Outputs go to the work directory, cleared before each command.
#include <string>
#include <vector>

#include "fuzz_util.h"

namespace ckv::fuzz {

inline void read_with_info(const fs::path& h5) {
  clean_work_dir({h5.filename().string()});
  (void)run_cli({"info", h5.string()});
  (void)run_cli({"info", "--json", h5.string()});
  check_no_open_h5_objects("ckv info");
}

// `others` are further shards (paths outside the work directory or kept names in it).
inline void read_with_merge(const fs::path& h5, const std::vector<fs::path>& others = {}) {
  std::vector<std::string> keep{h5.filename().string()};
  for (const fs::path& o : others) keep.push_back(o.filename().string());
  clean_work_dir(keep);
  std::vector<std::string> args{"merge", "-q", "--force", "--allow-missing", (work_dir() / "merged.h5").string(),
                                h5.string()};
  for (const fs::path& o : others) args.push_back(o.string());
  (void)run_cli(args);
  check_no_open_h5_objects("ckv merge");
}

inline void read_with_bound_dump(const fs::path& h5) {
  clean_work_dir({h5.filename().string()});
  (void)run_cli({"bound", "-q", "--force", "--dump", h5.string(), "-m", tiny_model().string(), "-o",
                 (work_dir() / "bound").string(), "--window", "2", "--kernel", "3", "--budgets", "0.3,0.6",
                 "--methods", "attn,snapkv,h2o,streaming,criticalkv(snapkv),adakv(snapkv),criticalkv(adakv(snapkv))"});
  check_no_open_h5_objects("ckv bound --dump");
}

}  // namespace ckv::fuzz
