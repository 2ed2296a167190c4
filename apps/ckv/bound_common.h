#pragma once
// What `ckv bound` and `ckv check` share: the input flags (a model with prompt inputs, a
// JSONL batch, or a dump plus the model that made it), budgets, selection parameters,
// sharding (--shard, lib/core/shard.h) and --resume, and the per-record driver that writes
// one BoundRecord per record into PREFIX.h5 and regenerates PREFIX.csv / PREFIX.json from it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "analysis/bound_layer.h"
#include "common.h"
#include "method_options.h"
#include "output/provenance.h"
#include "output/bound_schema.h"
#include "prompt_input.h"

namespace ckv::app {

struct AnalysisOptions {
  PromptOptions input;
  std::string question;        // --question, with --prompt/--prompt-file
  int64_t context_end = -1;    // --context-end C, with --tokens: positions >= C are the question
  std::string input_jsonl;     // --input
  std::string dump;            // --dump FILE.h5
  std::string budgets = "0.025,0.05,0.1,0.2,0.4";
  int64_t keep = 0;            // --keep N
  bool keep_given = false;     // --keep was on the command line (--keep 0 is refused, not ignored)
  std::string layers = "all";
  SelectionParams params;
  std::string pool = "max", gqa_reduce = "mean";
  MethodOptions method;        // --defensive-*
  std::string out = "bound";   // output prefix: <out>.h5, <out>.csv, <out>.json
  std::string shard;           // --shard i/N; empty: Slurm array variables, else 0/1
  bool force = false, resume = false;
  // The protocol (docs/BOUND.md "Protocol"): evaluation query, evictable span, nu_min.
  std::string eval = "question";     // question | last | first-decode
  std::string compress = "context";  // context | prompt
  std::string nu_min = "all";        // all | no-sink | stage2 | stage2-partial
  NuMinReading nu_min_reading = NuMinReading::All;
};

// The protocol settings as they go into every output's settings JSON.
nlohmann::json protocol_settings(const AnalysisOptions& o);

void add_analysis_options(CLI::App& cmd, AnalysisOptions& o);

// Budgets per KV head for a context of c entries. Throws UsageError for fractions outside
// (0, 1] and InputError for --keep above c, naming the record.
std::vector<int64_t> resolve_budgets(const AnalysisOptions& o, int64_t c, const std::string& record);
// Parses and checks --budgets / --keep / --pool / --gqa-reduce and the selection flags
// (validate_selection_params) into o.params; throws UsageError.
void finish_options(AnalysisOptions& o);

// One block of the first output axis: methods run with one parameter set.
struct AnalysisBlock {
  std::vector<MethodSpec> methods;
  SelectionParams params;
  bool oracle = false;
  int64_t oracle_max_n = 512;
  std::string selection_file;
  NuMinReading nu_min = NuMinReading::All;
};

// What a bound file of `ckv bound` or `ckv check` is: the root attributes that differ.
struct BoundJob {
  std::string kind;                 // "bound" or "check"
  std::vector<std::string> labels;  // names of the first axis: methods, or alphas
  nlohmann::json settings;
  int64_t max_list = 40;            // check: violating heads printed
};

// Runs the records of this shard (every record's layers' first axes are the blocks'
// methods, concatenated) into PREFIX.h5, continuing it with --resume (complete records
// are skipped; the file must have been written with the same model, input, settings,
// command and shard), then writes PREFIX.csv and PREFIX.json from the whole file and
// prints the summary (bound_report.h).
void run_bound_job(const AnalysisOptions& o, const GlobalOptions& g,
                   const std::vector<AnalysisBlock>& blocks, const BoundJob& job);

}  // namespace ckv::app
