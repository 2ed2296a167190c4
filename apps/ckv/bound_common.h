#pragma once
// What `ckv bound` and `ckv check` share: the input flags (a model with prompt inputs, a
// JSONL batch, or a dump plus the model that made it), budgets, selection parameters, and
// the per-record driver that yields one BoundRecord per record.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "analysis/bound_layer.h"
#include "common.h"
#include "core/provenance.h"
#include "io/bound_schema.h"
#include "prompt_input.h"

namespace ckv::app {

struct AnalysisOptions {
  PromptOptions input;
  std::string question;        // --question, with --prompt/--prompt-file
  std::string input_jsonl;     // --input
  std::string dump;            // --dump FILE.h5
  std::string budgets = "0.025,0.05,0.1,0.2,0.4";
  int64_t keep = 0;            // --keep N
  std::string layers = "all";
  SelectionParams params;
  std::string pool = "max", gqa_reduce = "mean";
  std::string out = "bound";   // output prefix: <out>.h5, <out>.csv, <out>.json
  bool force = false;
  bool window_given = false;
};

void add_analysis_options(CLI::App& cmd, AnalysisOptions& o);

// Budgets per KV head for a context of c entries. Throws InputError for fractions outside
// (0, 1] or --keep above c, naming the record.
std::vector<int64_t> resolve_budgets(const AnalysisOptions& o, int64_t c, const std::string& record);
// Parses and checks --budgets / --pool / --gqa-reduce into o.params; throws InputError.
void finish_options(AnalysisOptions& o);

// One block of the first output axis: methods run with one parameter set.
struct AnalysisBlock {
  std::vector<MethodSpec> methods;
  SelectionParams params;
  bool oracle = false;
  int64_t oracle_max_n = 512;
  std::string selection_file;
};

// Runs every record; `on_record` gets each one (its layers' first axes are the blocks'
// methods, concatenated). The provenance gets the model and input keys.
void run_analysis(const AnalysisOptions& o, const GlobalOptions& g,
                  const std::vector<AnalysisBlock>& blocks, Provenance& provenance,
                  const std::function<void(const BoundRecord&)>& on_record);

}  // namespace ckv::app
