#pragma once
// The outputs of `ckv mask` (schema "ckv.mask", version 2: version 1 named the record's
// n_tokens `prompt_tokens`, refused by ckv and read by the Python reader; docs/MASK.md
// documents every object): one HDF5 file with a group per record and, inside it, a group per run (the
// target eviction and each placebo), plus a tidy CSV (one measurement per line). The CSV
// of a file is regenerated from it (write_mask_csv_file), so a resumed run and a merge of
// shards give the CSV of one uninterrupted run.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/mask_metrics.h"
#include "analysis/mask_plan.h"
#include "io/h5.h"
#include "data/records.h"

namespace ckv {

struct Provenance;

inline constexpr const char* kMaskSchema = "ckv.mask";
inline constexpr int64_t kMaskSchemaVersion = 2;

struct Generation {
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<bool> has_answer;  // set when the record has an answer
};

// One masked run against the record's unmasked one.
struct MaskRun {
  std::string name;                // "target", "placebo0", ...
  std::string source;              // how the eviction was chosen ("spans", "span-name needle", ...)
  std::vector<SpanRange> spans;    // the evicted ranges when the source is spans
  EvictionPlan plan;
  RunMetrics metrics;
  NextToken next;
  std::vector<float> logits_last;     // [vocab] the masked run's logits at row prompt_len - 1
  std::optional<double> logp_answer;  // Σ log p(answer tokens), masked
  std::optional<double> physical_max_diff, physical_max_abs;  // --verify-physical
  std::optional<double> ratio;        // placebo: Delta_theta / target's
  std::optional<Generation> generation;
};

struct MaskRecord {
  std::string id;
  int64_t index = 0;               // position in the input (record i -> shard i mod N)
  std::vector<int32_t> tokens;     // [seq] prompt (+ answer tokens when scored)
  std::vector<std::string> token_text;  // [seq] or empty: each token as text (token_texts)
  int64_t c = 0, prompt_len = 0;   // context end; prompt length (next-token row = prompt_len-1)
  std::vector<int64_t> eval_rows;  // [n_eval]
  std::optional<std::string> answer;
  std::optional<double> logp_answer_full;
  std::vector<float> logits_last_full;  // [vocab] the unmasked run's logits at row prompt_len - 1
  std::optional<Generation> generation_full;
  SinkScores sinks;                // of the unmasked run
  nlohmann::json placebo;          // {requested, found, candidates, searched, tolerance, seed, best_ratio}
  std::vector<MaskRun> runs;
};

class MaskFile {
 public:
  static MaskFile create(const std::filesystem::path& path, const Provenance& prov,
                         const nlohmann::json& settings);
  // Reopens an interrupted file (check_resumable_output first) and notes the resume.
  static MaskFile resume(const std::filesystem::path& path, const std::string& resumed_by);
  std::set<std::string> complete_records() const;
  // Replaces an unfinished group of the same id; `complete` is written last.
  void write_record(const MaskRecord& record);
  void close() { file_.close(); }

 private:
  h5::File file_;
};

// Tidy CSV: record,run,layer,head,position,metric,value (head/position -1 when the value
// is not per head / per position; layer -1 for end-of-model values).
void write_mask_csv_header(std::ostream& out);
// `windows`: the sliding layers' window (layer -> W); for a model with sliding layers each
// layer of each run gets a `sliding_window` line (its window, 0 on a full-attention layer).
void write_mask_csv(std::ostream& out, const MaskRecord& record, const std::map<int64_t, int64_t>& windows = {});
// The header and the rows of every complete record of a mask file, in input order: what
// write_mask_csv wrote for them (the values are read back from the file).
void write_mask_csv_file(const std::filesystem::path& mask_h5, std::ostream& out);

// Throws FormatError unless the file is a ckv.mask of kMaskSchemaVersion.
void check_mask_schema(const h5::File& file);

}  // namespace ckv
