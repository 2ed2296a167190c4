#include "output/validate.h"

#include <algorithm>
#include <functional>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "analysis/perturbation.h"
#include "core/error.h"
#include "output/bound_schema.h"
#include "output/dump_schema.h"
#include "output/eval_schema.h"
#include "output/mask_schema.h"

namespace ckv {
namespace {

// Sizes no ckv output reaches; they keep products of dimensions far from overflow.
constexpr int64_t kMaxDim = int64_t{1} << 24;

template <typename... Args>
[[noreturn]] void bad(const h5::Object& o, fmt::format_string<Args...> f, Args&&... args) {
  fail<FormatError>("{}: {}", o.where(), fmt::format(f, std::forward<Args>(args)...));
}

void need_attr(const h5::Object& o, std::string_view name) {
  if (!o.has_attr(name)) bad(o, "no attribute \"{}\"", name);
}

int64_t int_attr(const h5::Object& o, std::string_view name, int64_t lo, int64_t hi) {
  need_attr(o, name);
  const int64_t v = o.attr_int(name);
  if (v < lo || v > hi) bad(o, "attribute \"{}\" is {}, outside [{}, {}]", name, v, lo, hi);
  return v;
}

std::vector<int64_t> ints_attr(const h5::Object& o, std::string_view name, int64_t lo, int64_t hi) {
  need_attr(o, name);
  std::vector<int64_t> v = o.attr_ints(name);
  for (int64_t x : v)
    if (x < lo || x > hi) bad(o, "attribute \"{}\" holds {}, outside [{}, {}]", name, x, lo, hi);
  return v;
}

std::string string_attr(const h5::Object& o, std::string_view name) {
  need_attr(o, name);
  return o.attr_string(name);
}

nlohmann::json json_attr(const h5::Object& o, std::string_view name) {
  need_attr(o, name);
  return o.attr_json(name);
}

void increasing(const h5::Object& o, std::string_view name, const std::vector<int64_t>& v) {
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] <= v[i - 1]) bad(o, "attribute \"{}\" is not strictly increasing", name);
}

// "file:/a/b/name" for a child of "file:/a/b".
std::string child_where(const h5::Group& parent, const std::string& name) {
  return fmt::format("{}:{}/{}", parent.file_name(), parent.path() == "/" ? "" : parent.path(), name);
}

h5::Group group(const h5::Group& parent, const std::string& name) {
  if (!parent.is_group(name)) {
    if (parent.exists(name)) fail<FormatError>("{}: not a group", child_where(parent, name));
    fail<FormatError>("{}: missing group", child_where(parent, name));
  }
  return parent.open_group(name);
}

std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// The dataset `name` of `g`, of one of `types` and of `shape` (-1: any size >= 0).
h5::Dataset dataset(const h5::Group& g, const std::string& name, std::initializer_list<h5::DType> types,
                    const std::vector<int64_t>& shape) {
  if (!g.is_dataset(name)) {
    if (g.exists(name)) fail<FormatError>("{}: not a dataset", child_where(g, name));
    fail<FormatError>("{}: missing dataset", child_where(g, name));
  }
  const h5::Dataset ds = g.open_dataset(name);
  if (std::find(types.begin(), types.end(), ds.dtype()) == types.end())
    bad(ds, "element type {} is not what this schema stores", h5::dtype_name(ds.dtype()));
  bool ok = ds.shape().size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || ds.shape()[i] == shape[i];
  const std::vector<int64_t> chunk = ds.chunk_shape();
  for (size_t i = 0; ok && i < chunk.size(); ++i)
    if (chunk[i] < 1 || chunk[i] > std::max<int64_t>(ds.shape()[i], 1))
      bad(ds, "chunk shape {} does not fit the shape {} (ckv clips chunks to the data)", shape_text(chunk),
          shape_text(ds.shape()));
  if (!ok) {
    std::vector<std::string> want;
    for (int64_t d : shape) want.push_back(d < 0 ? "*" : std::to_string(d));
    bad(ds, "shape {}, expected [{}]", shape_text(ds.shape()), fmt::join(want, ", "));
  }
  return ds;
}

template <typename T>
void values_in(const h5::Dataset& ds, const std::vector<T>& v, int64_t lo, int64_t hi) {
  for (const T x : v)
    if (static_cast<int64_t>(x) < lo || static_cast<int64_t>(x) > hi)
      bad(ds, "holds {}, outside [{}, {}]", static_cast<int64_t>(x), lo, hi);
}

// Spans as write_record stores them: {"name": [[start, end], ...]} with 0 <= start <= end <= n.
void check_spans(const h5::Object& o, const nlohmann::json& spans, int64_t n) {
  if (!spans.is_object()) bad(o, "attribute \"spans\" is not a JSON object");
  for (const auto& [name, ranges] : spans.items()) {
    if (!ranges.is_array()) bad(o, "span \"{}\" is not a list of [start, end] pairs", name);
    for (const auto& r : ranges) {
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer())
        bad(o, "span \"{}\" holds {}, not a [start, end] pair of integers", name, r.dump());
      const auto a = r[0].get<int64_t>(), b = r[1].get<int64_t>();
      if (a < 0 || a > b || b > n) bad(o, "span \"{}\" [{}, {}] is outside the record's {} tokens", name, a, b, n);
    }
  }
}

// What every batch output's root and record list hold (batch_output.h).
void check_batch_root(const h5::File& f) {
  string_attr(f, "command_line");
  json_attr(f, "settings");
  for (const char* key : {"model_sha256", "input_sha256"})
    if (f.has_attr(key)) f.attr_string(key);
  if (f.has_attr("input_records")) int_attr(f, "input_records", 0, int64_t{1} << 40);
  if (f.has_attr("shard_count") || f.has_attr("shard_index")) {
    // A merge keeps shard_count and drops shard_index.
    const int64_t n = int_attr(f, "shard_count", 1, int64_t{1} << 30);
    if (f.has_attr("shard_index")) int_attr(f, "shard_index", 0, n - 1);
  }
  if (f.has_attr("resumed") && !f.attr_json("resumed").is_array()) bad(f, "attribute \"resumed\" is not a JSON list");
  if (f.has_attr("merged_from") && !f.attr_json("merged_from").is_array())
    bad(f, "attribute \"merged_from\" is not a JSON list");
  if (f.exists("records")) group(f, "records");
}

// ---- ckv.dump ---------------------------------------------------------------------------

struct DumpShape {
  int64_t n_layer = 0, n_head = 0, n_kv_head = 0, d_head = 0, d_model = 0, vocab = 0;
  std::vector<int64_t> layers, heads, kv_heads;
  std::set<std::string> what;
  h5::DType dtype = h5::DType::F16;
};

DumpShape check_dump_root(const h5::File& f) {
  DumpShape d;
  const h5::Group m = group(f, "model");
  d.n_layer = int_attr(m, "n_layer", 1, 4096);
  d.n_head = int_attr(m, "n_head", 1, 4096);
  d.n_kv_head = int_attr(m, "n_kv_head", 1, d.n_head);
  if (d.n_head % d.n_kv_head != 0)
    bad(m, "n_head {} is not a multiple of n_kv_head {}", d.n_head, d.n_kv_head);
  d.d_head = int_attr(m, "d_head", 1, 65536);
  d.d_model = int_attr(m, "d_model", 1, kMaxDim);
  d.vocab = int_attr(m, "vocab", 1, kMaxDim);
  need_attr(f, "what");
  for (const std::string& w : f.attr_strings("what")) {
    static const std::set<std::string> known = {"q", "k", "v", "attn", "nu_l1", "nu_l2",
                                                "attn_out", "resid", "logits", "wo"};
    if (!known.count(w)) bad(f, "attribute \"what\" holds unknown item \"{}\"", w);
    d.what.insert(w);
  }
  d.layers = ints_attr(f, "layers", 0, d.n_layer - 1);
  d.heads = ints_attr(f, "heads", 0, d.n_head - 1);
  increasing(f, "layers", d.layers);
  increasing(f, "heads", d.heads);
  if (d.heads.empty()) bad(f, "attribute \"heads\" is empty");
  d.kv_heads = ints_attr(f, "kv_heads", 0, d.n_kv_head - 1);
  std::vector<int64_t> expected;
  for (int64_t h : d.heads)
    if (expected.empty() || expected.back() != h / (d.n_head / d.n_kv_head)) expected.push_back(h / (d.n_head / d.n_kv_head));
  if (d.kv_heads != expected) bad(f, "attribute \"kv_heads\" does not match heads and the model's n_kv_head");
  const std::string dtype = string_attr(f, "dtype");
  if (dtype != "float16" && dtype != "float32") bad(f, "attribute \"dtype\" is \"{}\"", dtype);
  d.dtype = dtype == "float32" ? h5::DType::F32 : h5::DType::F16;
  if (d.what.count("wo"))
    for (int64_t l : d.layers)
      dataset(m, fmt::format("layers/{}/W_O", l), {h5::DType::F32}, {d.d_model, d.n_head * d.d_head});
  return d;
}

void check_dump_record(const h5::Group& r, const DumpShape& d) {
  const int64_t n = int_attr(r, "n_tokens", 1, kMaxDim);
  int_attr(r, "context_end", 0, n);
  if (r.has_attr("id")) r.attr_string("id");
  check_spans(r, json_attr(r, "spans"), n);
  const h5::Dataset tokens = dataset(r, "tokens", {h5::DType::I32}, {n});
  values_in(tokens, tokens.read<int32_t>(), 0, d.vocab - 1);
  int64_t rows = -1;
  if (r.exists("attn_rows")) {
    const h5::Dataset ds = dataset(r, "attn_rows", {h5::DType::I32}, {-1});
    const std::vector<int32_t> v = ds.read<int32_t>();
    values_in(ds, v, 0, n - 1);
    rows = static_cast<int64_t>(v.size());
  }
  const auto nh = static_cast<int64_t>(d.heads.size()), ng = static_cast<int64_t>(d.kv_heads.size());
  const bool needs_rows = d.what.count("attn") || d.what.count("attn_out");
  if (needs_rows && rows < 0) fail<FormatError>("{}: missing dataset", child_where(r, "attn_rows"));
  const bool per_layer = d.what.count("q") || d.what.count("k") || d.what.count("v") || needs_rows ||
                         d.what.count("nu_l1") || d.what.count("nu_l2") || d.what.count("resid");
  if (per_layer) {
    const h5::Group layers = group(r, "layers");
    for (int64_t l : d.layers) {
      const h5::Group g = group(layers, std::to_string(l));
      const auto t = {d.dtype};
      if (d.what.count("q")) dataset(g, "q", t, {nh, n, d.d_head});
      if (d.what.count("k")) dataset(g, "k", t, {ng, n, d.d_head});
      if (d.what.count("v")) dataset(g, "v", t, {ng, n, d.d_head});
      if (d.what.count("attn")) dataset(g, "attn", t, {nh, rows, n});
      if (d.what.count("nu_l1")) dataset(g, "nu_l1", t, {nh, n});
      if (d.what.count("nu_l2")) dataset(g, "nu_l2", t, {nh, n});
      if (d.what.count("attn_out")) dataset(g, "attn_out", t, {nh, rows, d.d_model});
      if (d.what.count("resid")) dataset(g, "resid", t, {n, d.d_model});
    }
  }
  if (d.what.count("logits")) dataset(r, "logits_last", {h5::DType::F32}, {d.vocab});
}

// ---- ckv.bound --------------------------------------------------------------------------

// The model's layer count when the file states it (the "layers" setting's range), else the
// largest model ckv loads.
int64_t bound_model_layers(const h5::File& f) {
  (void)f;
  return 4096;
}

void check_bound_record(const h5::Group& r, int64_t n_labels, int64_t n_layer) {
  const int64_t n = int_attr(r, "n_tokens", 1, kMaxDim);
  const int64_t c = int_attr(r, "context_end", 1, n);
  const std::vector<int64_t> eval_rows = ints_attr(r, "eval_rows", 0, n - 1);
  const std::vector<int64_t> budgets = ints_attr(r, "budgets", 0, c);
  const std::vector<int64_t> layers = ints_attr(r, "layers", 0, n_layer - 1);
  increasing(r, "layers", layers);
  increasing(r, "eval_rows", eval_rows);
  int_attr(r, "question_start", 1, n);
  int_attr(r, "eval_token", -1, kMaxDim);  // the decoded token's id with --eval first-decode, else -1
  const std::vector<int64_t> below = ints_attr(r, "below_window", 0, 1);
  if (below.size() != budgets.size()) bad(r, "attribute \"below_window\" has {} entries for {} budgets", below.size(), budgets.size());
  if (eval_rows.empty()) bad(r, "attribute \"eval_rows\" is empty");
  if (budgets.empty()) bad(r, "attribute \"budgets\" is empty");
  if (layers.empty()) bad(r, "attribute \"layers\" is empty");
  const auto nb = static_cast<int64_t>(budgets.size()), nl = static_cast<int64_t>(layers.size());
  const auto nq = static_cast<int64_t>(eval_rows.size());
  const h5::Dataset metrics = dataset(r, "metrics", {h5::DType::F64}, {n_labels, nb, nl, -1, nq, kMetricCount});
  const int64_t nh = metrics.shape()[3];
  if (nh < 1 || nh > 4096) bad(metrics, "{} heads", nh);
  dataset(r, "metrics_mean", {h5::DType::F64}, {n_labels, nb, nl, nh, kMetricCount});
  const h5::Dataset mask = dataset(r, "kept_mask", {h5::DType::U8}, {n_labels, nb, nl, -1, c});
  const int64_t ng = mask.shape()[3];
  if (ng < 1 || nh % ng != 0) bad(mask, "{} KV heads for {} heads", ng, nh);
  dataset(r, "kept_count", {h5::DType::I64}, {n_labels, nb, nl, ng});
}

// ---- ckv.mask ---------------------------------------------------------------------------

void check_mask_record(const h5::Group& r) {
  const int64_t c = int_attr(r, "context_end", 1, kMaxDim);
  const int64_t p = int_attr(r, "n_tokens", c, kMaxDim);
  dataset(r, "tokens", {h5::DType::I32}, {-1});
  if (r.open_dataset("tokens").shape()[0] < p) bad(r, "fewer tokens than n_tokens {}", p);
  const h5::Dataset eval = dataset(r, "eval_rows", {h5::DType::I64}, {-1});
  const int64_t ne = eval.shape()[0];
  if (ne < 1) bad(eval, "no evaluation rows");
  values_in(eval, eval.read<int64_t>(), 0, p - 1);
  const h5::Dataset s_attn = dataset(r, "s_attn", {h5::DType::F32}, {-1, -1, c});
  const int64_t nl = s_attn.shape()[0], nh = s_attn.shape()[1];
  dataset(r, "s_val", {h5::DType::F32}, {nl, nh, c});
  const h5::Group runs = group(r, "runs");
  const std::vector<std::string> names = r.has_attr("runs") ? r.attr_strings("runs") : runs.children();
  for (const std::string& name : names) {
    if (!h5::is_valid_link_name(name)) bad(r, "run name \"{}\" is not a group name", name);
    const h5::Group g = group(runs, name);
    string_attr(g, "source");
    for (const char* key : {"kl", "delta_theta_total"}) {
      need_attr(g, key);
      g.attr_double(key);
    }
    need_attr(g, "top1_agree");
    g.attr_bool("top1_agree");
    const std::vector<int64_t> spans = ints_attr(g, "spans", 0, p);
    if (spans.size() % 2 != 0) bad(g, "attribute \"spans\" does not hold [start, end] pairs");
    const h5::Dataset evicted = dataset(g, "evicted", {h5::DType::U8}, {-1, -1, c});
    (void)evicted;
    dataset(g, "renorm_max_err", {h5::DType::F64}, {nl});
    for (const char* per_head : {"head_l1", "head_l2", "retained", "sink_mass_full", "sink_mass_raw",
                                 "sink_mass_corrected", "content_mass_full", "content_mass_raw",
                                 "content_mass_corrected"})
      dataset(g, per_head, {h5::DType::F64}, {nl, nh, ne});
    for (const char* per_row : {"resid_l1", "resid_l2"}) dataset(g, per_row, {h5::DType::F64}, {nl, ne});
    dataset(g, "delta_theta", {h5::DType::F64}, {nl, nh});
  }
}

using RecordCheck = std::function<void(const h5::Group&)>;

// The root of `f` checked against its schema; returns the check of one complete record.
RecordCheck check_root(const h5::File& f, OutputSummary& s) {
  s.schema = f.has_attr("schema") ? f.attr_string("schema") : "";
  if (s.schema == kDumpSchema) {
    check_dump_schema(f);
    check_batch_root(f);
    const DumpShape d = check_dump_root(f);
    group(f, "records");
    return [d](const h5::Group& r) { check_dump_record(r, d); };
  }
  if (s.schema == kBoundSchema) {
    check_bound_schema(f);
    s.kind = string_attr(f, "kind");
    if (s.kind != "bound" && s.kind != "check") bad(f, "attribute \"kind\" is \"{}\", not bound or check", s.kind);
    check_batch_root(f);
    const std::string labels_attr = s.kind == "check" ? "alphas" : "methods";
    need_attr(f, labels_attr);
    const auto n_labels = static_cast<int64_t>(f.attr_strings(labels_attr).size());
    if (n_labels < 1) bad(f, "attribute \"{}\" is empty", labels_attr);
    need_attr(f, "metrics");
    if (f.attr_strings("metrics").size() != kMetricCount)
      bad(f, "attribute \"metrics\" names {} metrics, this ckv writes {}", f.attr_strings("metrics").size(),
          kMetricCount);
    const int64_t n_layer = bound_model_layers(f);
    return [n_labels, n_layer](const h5::Group& r) { check_bound_record(r, n_labels, n_layer); };
  }
  if (s.schema == kMaskSchema) {
    check_mask_schema(f);
    check_batch_root(f);
    group(f, "records");
    return check_mask_record;
  }
  if (s.schema == kEvalSchema) {
    check_eval_schema(f);
    check_batch_root(f);
    for (const char* a : {"methods", "budget_fractions", "n_layer", "n_head", "n_kv_head"}) need_attr(f, a);
    const int64_t nl = f.attr_int("n_layer"), nh = f.attr_int("n_head"), nkv = f.attr_int("n_kv_head");
    if (nl < 1 || nh < 1 || nkv < 1 || nh % nkv != 0)
      bad(f, "model shape {} layers, {} heads, {} KV heads invalid", nl, nh, nkv);
    group(f, "records");
    return [nl, nh, nkv](const h5::Group& r) { check_eval_record(r, nl, nh, nkv); };
  }
  fail<FormatError>("{}: not an output of ckv dump, bound, check, mask or eval (schema \"{}\")", f.file_name(),
                    s.schema.empty() ? "(absent)" : s.schema);
}

// A record group's `complete` flag (a bool: 0 or 1, else FormatError).
bool is_complete(const h5::Group& r) { return r.has_attr("complete") && r.attr_bool("complete"); }

void check_complete_record(const h5::Group& r, const RecordCheck& check) {
  int_attr(r, "index", 0, int64_t{1} << 40);
  check(r);
}

OutputSummary validate(const h5::File& f) {
  OutputSummary s;
  const RecordCheck check = check_root(f, s);
  if (!f.exists("records")) return s;
  const h5::Group records = group(f, "records");
  for (const std::string& id : records.children()) {
    const h5::Group r = group(records, id);
    ++s.records;
    if (!is_complete(r)) continue;
    ++s.complete;
    check_complete_record(r, check);
  }
  return s;
}

template <typename T>
void read_through_as(const h5::Dataset& ds) {
  if (ds.numel() == 0) return;
  if (ds.shape().size() < 2) {
    (void)ds.read<T>();
    return;
  }
  for (int64_t i = 0; i < ds.shape()[0]; ++i) (void)ds.read_index<T>(i);
}

// Every dataset under `g`, read in full (bounded memory: one first-dimension index at a time).
void read_through(const h5::Group& g) {
  for (const std::string& name : g.children()) {
    if (g.is_group(name)) {
      read_through(g.open_group(name));
      continue;
    }
    if (!g.is_dataset(name)) continue;
    const h5::Dataset ds = g.open_dataset(name);
    switch (ds.dtype()) {
      case h5::DType::F16:
      case h5::DType::F32: read_through_as<float>(ds); break;
      case h5::DType::F64: read_through_as<double>(ds); break;
      case h5::DType::I32: read_through_as<int32_t>(ds); break;
      case h5::DType::I64: read_through_as<int64_t>(ds); break;
      case h5::DType::U8: read_through_as<uint8_t>(ds); break;
    }
  }
}

void read_all_data(const h5::File& f) {
  if (f.is_group("model")) read_through(f.open_group("model"));
  if (!f.is_group("records")) return;
  const h5::Group records = f.open_group("records");
  for (const std::string& id : records.children()) {
    const h5::Group r = records.open_group(id);
    if (r.has_attr("complete") && r.attr_bool("complete")) read_through(r);
  }
}

}  // namespace

RecordSalvage salvage_records(const h5::File& file) {
  RecordSalvage out;
  try {
    const RecordCheck check = check_root(file, out.summary);
    if (!file.exists("records")) return out;
    const h5::Group records = group(file, "records");
    for (const std::string& id : records.children()) {
      ++out.summary.records;
      try {
        const h5::Group r = group(records, id);
        if (!is_complete(r)) {
          out.unfinished.push_back(id);
          continue;
        }
        check_complete_record(r, check);
        read_through(r);
        out.intact.push_back(id);
        ++out.summary.complete;
      } catch (const Error& e) {
        out.damaged.push_back(e.what());
      } catch (const nlohmann::json::exception& e) {
        out.damaged.push_back(fmt::format("{}:/records/{}: {}", file.file_name(), id, e.what()));
      }
    }
  } catch (const UnsupportedError& e) {
    throw FormatError(e.what());
  } catch (const nlohmann::json::exception& e) {
    fail<FormatError>("{}: {}", file.file_name(), e.what());
  }
  return out;
}

OutputSummary validate_output(const h5::File& file, ValidateOptions options) {
  try {
    OutputSummary s = validate(file);
    if (options.read_data) read_all_data(file);
    return s;
  } catch (const UnsupportedError& e) {
    throw FormatError(e.what());
  } catch (const nlohmann::json::exception& e) {
    fail<FormatError>("{}: {}", file.file_name(), e.what());
  }
}

}  // namespace ckv
