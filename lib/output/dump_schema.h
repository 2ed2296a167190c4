#pragma once
// The HDF5 layout of `ckv dump` (schema "ckv.dump", version 1; docs/DUMP.md documents
// every object). This file writes it record by record; the root's shard and input
// attributes, the per-record `complete` flag and the --resume checks are those of every
// batch output (output/batch_output.h). It does not run the model.
//
//   DumpFile dump = DumpFile::create(out.partial_path(), prov, model, settings);
//   RecordWriter rec = dump.begin_record(meta);      // replaces an unfinished group
//   rec.write_qkv(layer, q, k, v); rec.write_attention(layer, probs); ...
//   dump.finish_record(rec);                         // `complete` written last, then flush
//
// Every float tensor is chunked one (query or KV) head per chunk, so one head of one layer
// reads alone; every dataset carries a "dims" attribute with TransformerLens-style names.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "io/h5.h"
#include "data/records.h"
#include "model/model.h"

namespace ckv {

struct Provenance;

inline constexpr const char* kDumpSchema = "ckv.dump";
inline constexpr int64_t kDumpSchemaVersion = 1;

// What `--what` selects. "nu" means both nu_l1 and nu_l2.
struct DumpContents {
  bool q = false, k = false, v = false, attn = false, nu_l1 = false, nu_l2 = false;
  bool attn_out = false, resid = false, logits = false, wo = false;

  // Comma-separated items of q,k,v,attn,nu,nu_l1,nu_l2,attn_out,resid,logits,wo. Throws
  // InputError "--what: unknown item 'x' (known: ...)".
  static DumpContents parse(std::string_view list);
  std::vector<std::string> names() const;  // canonical item names, in the order above
};

struct DumpSettings {
  DumpContents what;
  std::vector<int64_t> layers;  // recorded layers, increasing
  std::vector<int64_t> heads;   // recorded query heads, increasing
  h5::DType dtype = h5::DType::F16;
  int gzip_level = 0;           // 0: no compression
  std::string attn_rows = "window";  // the --attn-rows spec as given
  int64_t window = 32;

  // KV heads used by `heads` (GQA: h / group), increasing.
  std::vector<int64_t> kv_heads(int64_t group) const;
  // The root attribute `settings`: what --resume must find unchanged (check_resumable_output).
  nlohmann::json to_json() const;
};

// Attributes of one record group.
struct RecordMeta {
  std::string id;
  int64_t index = 0;
  int64_t line = 0;                     // JSONL line, 0 when not from a file
  std::string context;                  // text (empty for --tokens)
  std::optional<std::string> question;
  std::optional<std::string> answer;
  std::vector<int32_t> tokens;          // [pos]
  std::vector<std::string> token_text;  // [pos] or empty: each token as text (token_texts)
  int64_t context_end = 0;              // c
  NamedSpans token_spans;
  std::vector<int64_t> attn_rows;       // [row] query rows of attn / attn_out
};

class RecordWriter {
 public:
  // q: [n_head, pos, d_head]; k, v: [n_kv_head, pos, d_head] (all heads; the selected
  // ones are stored).
  void write_qkv(int64_t layer, const Tensor& q, const Tensor& k, const Tensor& v);
  // nu_l1 / nu_l2: [n_sel_head, pos] already restricted to the selected heads (may be empty).
  void write_nu(int64_t layer, const Tensor& nu_l1, const Tensor& nu_l2);
  void write_attention(int64_t layer, const Tensor& probs);    // [n_head, row, pos]
  void write_head_out(int64_t layer, const Tensor& head_out);  // [n_head, row, d_model]
  void write_resid(int64_t layer, const Tensor& resid);        // [pos, d_model]
  void write_logits_last(std::span<const float> logits);       // [vocab]
  h5::Group& group() { return group_; }

 private:
  friend class DumpFile;
  RecordWriter(h5::Group group, const DumpSettings& settings, int64_t group_size)
      : group_(std::move(group)), settings_(&settings), group_size_(group_size) {}
  h5::Group layer(int64_t l);
  // Stores rows `index` of the first dimension of x ([n, rest...]) as [index.size(), rest...].
  // `description` (and `unit` when not empty) become the dataset's attributes (describe.h).
  void write_selected(h5::Group& g, const std::string& name, const Tensor& x,
                      const std::vector<int64_t>& index, const std::vector<std::string>& dims,
                      std::string_view description, std::string_view unit = {});

  h5::Group group_;
  const DumpSettings* settings_;
  int64_t group_size_;
};

class DumpFile {
 public:
  // A new file with the root attributes (schema, provenance, settings) and /model; with
  // settings.what.wo also /model/layers/<l>/W_O. Throws IoError when it cannot be created.
  static DumpFile create(const std::filesystem::path& path, const Provenance& provenance,
                         const Model& model, const std::string& model_sha256,
                         const DumpSettings& settings);
  // Reopens an interrupted file for --resume (check_resumable_output (batch_output.h) first:
  // this checks only the schema) and appends `resumed_by` (a command line) to the root's
  // "resumed" list.
  static DumpFile resume(const std::filesystem::path& path, const DumpSettings& settings,
                         const std::string& resumed_by);

  std::set<std::string> complete_records() const;  // complete_record_ids
  // Creates /records/<id> (begin_record_group: an unfinished group of the id is replaced).
  RecordWriter begin_record(const RecordMeta& meta);
  // Writes the record's `complete` attribute (finish_record_group: last, after a flush).
  void finish_record(RecordWriter& record);
  void close() { file_.close(); }
  // The error path: releases the file without reporting errors (h5::File::abandon).
  void abandon() noexcept { file_.abandon(); }
  h5::File& file() { return file_; }

 private:
  DumpFile(h5::File file, DumpSettings settings, int64_t group_size)
      : file_(std::move(file)), settings_(std::move(settings)), group_size_(group_size) {}
  h5::File file_;
  DumpSettings settings_;
  int64_t group_size_;
};

// The model a dump carries (docs/DUMP.md "/model attributes"): its config from /model's
// attributes and the W_O of every recorded layer, so that `ckv bound --dump` and `ckv check
// --dump` run without the model file (a dump of `ckv dump --what ...,wo`, or of ckv.hf's
// bridge from any HF model). No tokenizer and no other weights: it runs no forward pass.
// nullopt when the dump holds no W_O; FormatError naming the dump for a header or W_O that
// is missing, mistyped or out of range, or W_O present for some recorded layers only.
std::optional<Model> model_from_dump(const h5::File& file, const std::string& path);

// "all" or comma-separated indices and inclusive ranges ("0-3,7,10-12") in [0, limit);
// returned sorted and unique. Throws InputError "<flag>: ..." naming the bad entry.
std::vector<int64_t> parse_index_list(std::string_view spec, int64_t limit, std::string_view flag);

// Query rows whose attention a record keeps (--attn-rows), for a prompt of n tokens whose
// context ends at c:
//   "window"  the observation window, the last `window` context positions [c-window, c),
//             plus every question position [c, n). When the window was not given
//             explicitly (window_given false) it is clipped to the context;
//   "last:N"  the last N positions;   "all"  every position (the full n x n matrix);
//   "3,7-9"   explicit positions.
// Throws InputError naming `record` for a window longer than the context and rows past the end.
std::vector<int64_t> attention_rows(std::string_view spec, int64_t window, bool window_given,
                                    int64_t c, int64_t n, std::string_view record);

// Throws FormatError naming the file unless it is a ckv dump of kDumpSchemaVersion.
void check_dump_schema(const h5::File& file);

}  // namespace ckv
