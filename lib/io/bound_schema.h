#pragma once
// Outputs of `ckv bound` and `ckv check` (schema "ckv.bound" version 1, docs/BOUND.md):
// an HDF5 file with the full arrays, written record by record, and the tidy CSV rows
// (one per record/method/budget/layer/head, the mean over evaluation queries).
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/bound_layer.h"
#include "io/h5.h"

namespace ckv {

struct Provenance;

inline constexpr const char* kBoundSchema = "ckv.bound";
inline constexpr int64_t kBoundSchemaVersion = 1;

// One record's results: layers[i] is layer layer_ids[i].
struct BoundRecord {
  std::string id;
  int64_t n = 0, c = 0;
  std::vector<int64_t> eval_rows;   // [query]
  std::vector<int64_t> budgets;     // [budget] kept entries per KV head
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
  void write_record(const BoundRecord& record);
  void close() { file_.close(); }

 private:
  explicit BoundFile(h5::File file) : file_(std::move(file)) {}
  h5::File file_;
};

// Tidy CSV. `labels` are the method names (bound) or alpha values (check).
void write_bound_csv_header(std::ostream& out);
void write_bound_csv_rows(std::ostream& out, const BoundRecord& record,
                          const std::vector<std::string>& labels);

}  // namespace ckv
