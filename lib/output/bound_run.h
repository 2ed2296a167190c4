#pragma once
// What `ckv bound` and `ckv check` compute for one record (docs/BOUND.md): for every block
// of methods, budget, layer and head, the actual output perturbation of eviction beside the
// CriticalKV bounds (analysis/bound_layer.h), from the model's forward pass over the record
// or from the Q/K/V of a `ckv dump` file, as the BoundRecord its file stores (bound_schema.h).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "analysis/bound_layer.h"
#include "analysis/perturbation.h"
#include "analysis/selection.h"
#include "core/thread_pool.h"
#include "io/h5.h"
#include "model/forward.h"
#include "model/model.h"
#include "output/bound_schema.h"

namespace ckv {

// One block of the first output axis: methods run with one parameter set.
struct AnalysisBlock {
  std::vector<MethodSpec> methods;
  SelectionParams params;
  bool oracle = false;
  int64_t oracle_max_n = 512;
  std::string selection_file;
  NuMinReading nu_min = NuMinReading::All;
};

// The protocol (docs/BOUND.md "Protocol") and the budgets of every record.
struct BoundProtocol {
  std::string eval = "question";     // evaluation queries: question | last | first-decode
  std::string compress = "context";  // evictable entries: context | prompt
  std::vector<double> fractions;     // budgets as fractions of the evictable entries; empty: keep
  int64_t keep = 0;                  // kept entries per KV head, without fractions
  int64_t window = 32;               // the snapkv window: a budget below it is marked, a context within it refused
};

// A selection file's kept positions: layer -> [n_kv_head][kept] (read_layer_selection_file).
using LayerSelection = std::map<int64_t, std::vector<std::vector<int64_t>>>;

class BoundAnalysis {
 public:
  // `layers`: the layers analysed; `files`: per block, its selection file's positions
  // (empty without one). The blocks and the pool must outlive the analysis.
  BoundAnalysis(const Model& model, const std::vector<AnalysisBlock>& blocks, BoundProtocol protocol,
                std::vector<int64_t> layers, std::vector<LayerSelection> files, ThreadPool& pool);

  // A record run through `forward`: its prompt [n] whose context ends at c (with --eval
  // first-decode, the greedy next token appended). Layer-global methods get a pre-pass over
  // the context first.
  BoundRecord analyse(Forward& forward, const std::string& id, int64_t index, const std::vector<int32_t>& prompt,
                      int64_t c) const;
  // The header of the dump at `path` against the model (of sha256 `model_sha256`) and the
  // analysis: its model, contents (q, k, v of all heads) and `dumped` layers. Throws InputError.
  void check_dump(const h5::File& f, const std::string& path, const std::string& model_sha256,
                  const std::vector<int64_t>& dumped) const;
  // A record of that dump, every dataset it reads checked against the record's attributes
  // and the model first (FormatError).
  BoundRecord analyse_dumped(const h5::Group& record, const std::string& path, const std::string& id, int64_t index,
                             const std::vector<int64_t>& dumped) const;

 private:
  const Model& model_;
  const std::vector<AnalysisBlock>& blocks_;
  BoundProtocol protocol_;
  std::vector<int64_t> layers_;
  std::vector<LayerSelection> files_;
  ThreadPool& pool_;
};

}  // namespace ckv
