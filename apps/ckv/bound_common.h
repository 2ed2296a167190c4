#pragma once
// What `ckv bound` and `ckv check` share: the input flags (a model with prompt inputs, a
// JSONL batch, or a dump plus the model that made it), budgets, the selection settings
// (selection_options.h), the protocol, and the job that writes one BoundRecord per record
// (lib/output/bound_run.h) into PREFIX.h5 and regenerates PREFIX.csv / PREFIX.json from it
// (lib/output/bound_report.h), run by the record-job driver (record_job.h).
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "analysis/bound_layer.h"
#include "common.h"
#include "output/bound_run.h"
#include "output/bound_schema.h"
#include "record_job.h"
#include "selection_options.h"

namespace ckv::app {

struct AnalysisOptions {
  JobInput input;              // the prompt flags, --input, --question
  int64_t context_end = -1;    // --context-end C, with --tokens: positions >= C are the question
  std::string dump;            // --dump FILE.h5
  std::string budgets = "0.025,0.05,0.1,0.2,0.4";
  bool keep_given = false;     // --keep was on the command line (--keep 0 is refused, not ignored)
  std::string layers = "all";
  SelectionParams selection;
  std::string out = "bound";   // output prefix: <out>.h5, <out>.csv, <out>.json
  JobFlags job;
  // The protocol (docs/BOUND.md "Protocol"): --eval, --compress and --keep N; its fractions
  // (--budgets parsed, empty with --keep) and window set by finish_options. And nu_min.
  BoundProtocol protocol;
  std::string nu_min = "all";        // all | no-sink | stage2 | stage2-partial
  NuMinReading nu_min_reading = NuMinReading::All;
};

// The input, budget, selection (with --alpha when `alpha`), protocol and output flags.
void add_analysis_options(CLI::App& cmd, AnalysisOptions& o, bool alpha);
// Parses and checks the budgets, the selection settings and the protocol; throws UsageError.
void finish_options(AnalysisOptions& o);
// The settings every bound file of `o` stores: the selection, budgets and protocol.
nlohmann::json analysis_settings(const AnalysisOptions& o);

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
// prints the summary.
void run_bound_job(const AnalysisOptions& o, const GlobalOptions& g,
                   const std::vector<AnalysisBlock>& blocks, const BoundJob& job);

}  // namespace ckv::app
