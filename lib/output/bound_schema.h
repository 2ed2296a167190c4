#pragma once
// Outputs of `ckv bound` and `ckv check` (schema "ckv.bound" version 2, docs/BOUND.md):
// an HDF5 file with the full arrays, written record by record, and the tidy CSV rows
// (one per record/method/budget/layer/head, the mean over evaluation queries).
//
// The HDF5 file is the source of truth: the CSV and JSON summary are regenerated from it
// (read_bound_records) once it is complete, so a resumed run and a merge of shards give
// the same CSV and JSON as one uninterrupted run.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/bound_layer.h"
#include "io/h5.h"

namespace ckv {

struct Provenance;

inline constexpr const char* kBoundSchema = "ckv.bound";
// 3: the record's token count `n` became `n_tokens`, as dump, mask and eval name it; version
// 2 files are refused by ckv (rerun) and read by the Python reader (python/ckv/reader.py).
inline constexpr int64_t kBoundSchemaVersion = 3;

// One record's results: layers[i] is layer layer_ids[i].
struct BoundRecord {
  std::string id;
  int64_t index = 0;                // position in the input (record i -> shard i mod N)
  int64_t n = 0;                    // tokens analysed (the prompt, plus the decoded token)
  int64_t c = 0;                    // evictable entries [0, c): the context, or the prompt
  int64_t question_start = 0;       // the input's context end (= c unless --compress prompt)
  int64_t eval_token = -1;          // --eval first-decode: the greedy token at position n - 1
  std::vector<int64_t> eval_rows;   // [query]
  std::vector<int64_t> budgets;     // [budget] kept entries per KV head
  std::vector<double> keep_shares;  // [budget] the fractions' keep shares (Budget, selection.h); empty: counts; not stored
  std::vector<int64_t> below_window;  // [budget] 1 where the budget is below the snapkv window
  std::vector<int64_t> layer_ids;   // [layer]
  std::vector<LayerResult> layers;  // [layer]
};

// Mean over evaluation queries of one (method, budget, head) of a layer.
MetricRow query_mean(const LayerResult& r, int64_t method, int64_t budget, int64_t head);

class BoundFile {
 public:
  // kind: "bound" or "check"; `labels` names the first axis (methods, or alphas for check).
  static BoundFile create(const std::filesystem::path& path, const Provenance& provenance,
                          const std::string& kind, const std::vector<std::string>& labels,
                          const nlohmann::json& settings);
  // Reopens an interrupted file (check_resumable_output first) and notes the resume.
  static BoundFile resume(const std::filesystem::path& path, const std::string& resumed_by);
  std::set<std::string> complete_records() const;
  // Replaces an unfinished group of the same id; `complete` is written last.
  void write_record(const BoundRecord& record);
  void close() { file_.close(); }

 private:
  explicit BoundFile(h5::File file) : file_(std::move(file)) {}
  h5::File file_;
};

// Throws FormatError unless the file is a ckv.bound of kBoundSchemaVersion.
void check_bound_schema(const h5::File& file);

// What the summaries need of a bound file besides its records.
struct BoundHeader {
  std::string kind;                 // "bound" or "check"
  std::vector<std::string> labels;  // methods, or alphas for check
  nlohmann::json settings;
  std::vector<double> budget_fractions;  // the --budgets fractions; empty with --keep
  nlohmann::ordered_json provenance;  // the root's other attributes
  int64_t records = 0;              // complete records
};
// Reads the header, then calls `on_record` for each complete record in input order (one
// record in memory at a time): the records exactly as write_record got them.
BoundHeader read_bound_records(const std::filesystem::path& path,
                               const std::function<void(const BoundHeader&, const BoundRecord&)>& on_record);

// Tidy CSV. `labels` are the method names (bound) or alpha values (check).
// `settings` gives the protocol columns (eval, compress, nu_min).
void write_bound_csv_header(std::ostream& out);
// The header's provenance gives the sliding_window column (the layer's window: the root
// attributes sliding_window and sliding_layers; 0 for a full-attention layer).
void write_bound_csv_rows(std::ostream& out, const BoundRecord& record, const BoundHeader& header);

}  // namespace ckv
