#pragma once
// The CSV, JSON summary and console report of `ckv bound` / `ckv check`, regenerated from
// a complete bound HDF5 file (lib/output/bound_schema.h): one code path for a run, a resumed
// run and a merge of shards, so all three give the same CSV, JSON and console tables.
#include <cstdint>
#include <filesystem>
#include <string>

namespace ckv {

// Writes `csv` and `json` from the bound file `h5` and returns the console summary (Table 9
// layout for kind "bound", with Figure 4's share of heads where criticalkv lowers L, the
// share tied with its base and the share lower among the others; Assumption 3.4 fractions
// and violating heads for "check", at most `max_list` of them), for the command line to
// print. Budgets given as fractions show the mean kept count over records. `name` is the
// output prefix the messages mention.
std::string write_bound_summaries(const std::filesystem::path& h5, const std::filesystem::path& csv,
                                  const std::filesystem::path& json, const std::string& name,
                                  int64_t max_list = 40);

}  // namespace ckv
