#include "output/mask_schema.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "output/provenance.h"
#include "output/batch_output.h"
#include "output/describe.h"

namespace ckv {

namespace {

// [n_layer, ...] from one vector per layer, picked by `field`.
std::vector<double> stack(const RunMetrics& m, std::vector<double> LayerMaskMetrics::*field) {
  std::vector<double> out;
  for (const LayerMaskMetrics& l : m.layers) out.insert(out.end(), (l.*field).begin(), (l.*field).end());
  return out;
}

std::vector<double> flatten(const std::vector<Tensor>& per_layer) {
  std::vector<double> out;
  for (const Tensor& t : per_layer) out.insert(out.end(), t.span().begin(), t.span().end());
  return out;
}

void write_generation(h5::Group& g, const std::string& prefix, const Generation& gen) {
  std::vector<int64_t> ids(gen.tokens.begin(), gen.tokens.end());
  g.set_attr_ints(prefix + "_tokens", ids);
  g.set_attr_string(prefix + "_text", gen.text);
  if (gen.has_answer) g.set_attr_bool(prefix + "_has_answer", *gen.has_answer);
}

struct Named {
  const char* name;
  std::vector<double> LayerMaskMetrics::*field;
  bool per_head;
  const char* description;
  const char* unit = "";
};
// Every per-row measurement, with the name it has in the HDF5 file and the CSV.
const std::vector<Named>& row_fields() {
  using M = LayerMaskMetrics;
  static const std::vector<Named> f = {
      {"resid_l1", &M::resid_l1, false, "L1 norm of the change of the residual stream after the layer at each "
       "evaluation row, masked against unmasked"},
      {"resid_l2", &M::resid_l2, false, "L2 norm of the same change"},
      {"head_l1", &M::head_l1, true, "L1 norm of the change of each head's W_O-projected output at each evaluation row"},
      {"head_l2", &M::head_l2, true, "L2 norm of the same per-head change"},
      {"retained", &M::retained, true, "S: the attention mass on the kept positions, from this run's own logits", "fraction"},
      {"sink_mass_full", &M::sink_full, true, "attention mass on the sink positions [0, sinks), unmasked",
       "fraction"},
      {"sink_mass_raw", &M::sink_raw, true, "attention mass on the sinks, masked, before renormalising", "fraction"},
      {"sink_mass_corrected", &M::sink_corrected, true, "attention mass on the sinks, masked and renormalised",
       "fraction"},
      {"content_mass_full", &M::content_full, true, "attention mass on the non-sink context, unmasked", "fraction"},
      {"content_mass_raw", &M::content_raw, true, "attention mass on the non-sink context, masked, before "
       "renormalising", "fraction"},
      {"content_mass_corrected", &M::content_corrected, true, "attention mass on the non-sink context, masked "
       "and renormalised", "fraction"},
  };
  return f;
}

}  // namespace

MaskFile MaskFile::create(const std::filesystem::path& path, const Provenance& prov,
                          const nlohmann::json& settings) {
  MaskFile f;
  f.file_ = h5::File::create(path);
  prov.write_attrs(f.file_);
  f.file_.set_attr_string("schema", kMaskSchema);
  f.file_.set_attr_int("schema_version", kMaskSchemaVersion);
  f.file_.set_attr_json("settings", settings);
  f.file_.create_group("records");
  return f;
}

MaskFile MaskFile::resume(const std::filesystem::path& path, const std::string& resumed_by) {
  MaskFile f;
  f.file_ = h5::File::open_rw(path);
  check_mask_schema(f.file_);
  note_resumed(f.file_, resumed_by);
  return f;
}

std::set<std::string> MaskFile::complete_records() const { return complete_record_ids(file_); }

void check_mask_schema(const h5::File& file) {
  check_schema(file, kMaskSchema, kMaskSchemaVersion, "ckv mask output");
}

void MaskFile::write_record(const MaskRecord& r) {
  h5::Group g = begin_record_group(file_, r.id, r.index);
  const auto n_eval = static_cast<int64_t>(r.eval_rows.size());
  const auto n_layer = static_cast<int64_t>(r.sinks.s_attn.size());
  const int64_t n_head = n_layer > 0 ? r.sinks.s_attn[0].dim(0) : 0;
  g.set_attr_int("context_end", r.c);
  g.set_attr_int("n_tokens", r.prompt_len);
  if (r.answer) g.set_attr_string("answer", *r.answer);
  if (r.logp_answer_full) g.set_attr_double("logp_answer_full", *r.logp_answer_full);
  if (r.generation_full) write_generation(g, "generation_full", *r.generation_full);
  if (!r.placebo.is_null()) g.set_attr_json("placebo", r.placebo);
  std::vector<std::string> run_names;
  for (const MaskRun& run : r.runs) run_names.push_back(run.name);
  g.set_attr_strings("runs", run_names);  // the runs' order (the group lists them by name)
  h5::Dataset tokens = put_described(
      g, "tokens", h5::DType::I32, {static_cast<int64_t>(r.tokens.size())}, r.tokens, {"pos"},
      "token ids of the prompt (context, then question), then the answer's when scored; "
      "attribute token_text: the tokens as text");
  set_token_text(tokens, r.token_text);
  put_described(g, "eval_rows", h5::DType::I64, {n_eval}, r.eval_rows, {"eval"},
                "the evaluation rows (positions >= context_end): the query positions every per-row "
                "measure is taken at");
  put_described(g, "logits_last_full", h5::DType::F32,
                {static_cast<int64_t>(r.logits_last_full.size())}, r.logits_last_full, {"vocab"},
                "next-token logits at the prompt's last position, unmasked", "logit");
  put_described(g, "s_attn", h5::DType::F32, {n_layer, n_head, r.c}, flatten(r.sinks.s_attn),
                {"layer", "head", "pos"},
                "sink score: the unmasked attention each context position receives, summed over "
                "the evaluation rows");
  put_described(g, "s_val", h5::DType::F32, {n_layer, n_head, r.c}, flatten(r.sinks.s_val),
                {"layer", "head", "pos"},
                "value-weighted sink score: s_attn times the position's value norm nu "
                "(docs/MATH.md section 6)");
  for (const MaskRun& run : r.runs) {
    h5::Group rg = g.create_group("runs/" + run.name);
    rg.set_attr_string("source", run.source);
    std::vector<int64_t> flat;
    for (const SpanRange& s : run.spans) flat.insert(flat.end(), {s.start, s.end});
    rg.set_attr_ints("spans", flat);
    rg.set_attr_double("kl", run.next.kl);
    rg.set_attr_bool("top1_agree", run.next.top1_agree);
    rg.set_attr_int("top1_full", run.next.top1_full);
    rg.set_attr_int("top1_masked", run.next.top1_masked);
    rg.set_attr_double("delta_theta_total", run.metrics.delta_theta_total);
    put_described(rg, "logits_last", h5::DType::F32, {static_cast<int64_t>(run.logits_last.size())},
                  run.logits_last, {"vocab"},
                  "next-token logits at the prompt's last position under this run's eviction",
                  "logit");
    if (run.logp_answer) rg.set_attr_double("logp_answer", *run.logp_answer);
    if (run.physical_max_diff) rg.set_attr_double("physical_max_diff", *run.physical_max_diff);
    if (run.physical_max_abs) rg.set_attr_double("physical_max_abs", *run.physical_max_abs);
    if (run.ratio) rg.set_attr_double("delta_theta_ratio", *run.ratio);
    if (run.generation) write_generation(rg, "generation", *run.generation);
    std::vector<uint8_t> evicted;  // [n_layer, n_kv_head, c]
    for (int64_t l = 0; l < run.plan.n_layer; ++l)
      for (int64_t kv = 0; kv < run.plan.n_kv_head; ++kv) {
        const std::vector<char> f = run.plan.evicted_flags(l, kv);
        evicted.insert(evicted.end(), f.begin(), f.end());
      }
    put_described(rg, "evicted", h5::DType::U8, {run.plan.n_layer, run.plan.n_kv_head, r.c},
                  evicted, {"layer", "kv_head", "pos"},
                  "1 where this run masks the context position out of the KV head, else 0");
    for (const Named& f : row_fields()) {
      if (f.per_head)
        put_described(rg, f.name, h5::DType::F64, {n_layer, n_head, n_eval},
                      stack(run.metrics, f.field), {"layer", "head", "eval"}, f.description,
                      f.unit);
      else
        put_described(rg, f.name, h5::DType::F64, {n_layer, n_eval}, stack(run.metrics, f.field),
                      {"layer", "eval"}, f.description, f.unit);
    }
    put_described(rg, "delta_theta", h5::DType::F64, {n_layer, n_head},
                  stack(run.metrics, &LayerMaskMetrics::delta_theta), {"layer", "head"},
                  "Delta_theta: the mean over evaluation rows of the sum over evicted positions of "
                  "attention times nu");
    std::vector<double> renorm;
    for (const LayerMaskMetrics& l : run.metrics.layers) renorm.push_back(l.renorm_max_err);
    put_described(rg, "renorm_max_err", h5::DType::F64, {n_layer}, renorm, {"layer"},
                  "largest |A' - N A / S| over the layer's heads and rows: Theorem 3.2 checked in "
                  "the run (0 unmasked)");
  }
  finish_record_group(file_, g);
}

void write_mask_csv_header(std::ostream& out) { out << "record,run,layer,head,position,metric,value\n"; }

void write_mask_csv(std::ostream& out, const MaskRecord& r, const std::map<int64_t, int64_t>& windows) {
  const auto n_eval = static_cast<int64_t>(r.eval_rows.size());
  const auto line = [&](const std::string& run, int64_t l, int64_t h, int64_t p, const char* m, double v) {
    out << fmt::format("{},{},{},{},{},{},{:.9g}\n", r.id, run, l, h, p, m, v);
  };
  for (const MaskRun& run : r.runs) {
    for (size_t l = 0; l < run.metrics.layers.size(); ++l) {
      const LayerMaskMetrics& m = run.metrics.layers[l];
      const auto L = static_cast<int64_t>(l);
      for (const Named& f : row_fields()) {
        const std::vector<double>& v = m.*f.field;
        for (size_t i = 0; i < v.size(); ++i) {
          const auto head = f.per_head ? static_cast<int64_t>(i) / n_eval : -1;
          line(run.name, L, head, r.eval_rows[i % static_cast<size_t>(n_eval)], f.name, v[i]);
        }
      }
      line(run.name, L, -1, -1, "resid_l1_mean", m.resid_l1_mean());
      line(run.name, L, -1, -1, "resid_l2_mean", m.resid_l2_mean());
      for (size_t h = 0; h < m.delta_theta.size(); ++h)
        line(run.name, L, static_cast<int64_t>(h), -1, "delta_theta", m.delta_theta[h]);
      if (!windows.empty())
        line(run.name, L, -1, -1, "sliding_window", windows.count(L) ? static_cast<double>(windows.at(L)) : 0.0);
    }
    line(run.name, -1, -1, -1, "delta_theta_total", run.metrics.delta_theta_total);
    line(run.name, -1, -1, r.prompt_len - 1, "kl", run.next.kl);
    line(run.name, -1, -1, r.prompt_len - 1, "top1_agree", run.next.top1_agree ? 1 : 0);
    if (run.logp_answer) line(run.name, -1, -1, -1, "logp_answer", *run.logp_answer);
    if (r.logp_answer_full) line(run.name, -1, -1, -1, "logp_answer_full", *r.logp_answer_full);
    if (run.ratio) line(run.name, -1, -1, -1, "delta_theta_ratio", *run.ratio);
    if (run.physical_max_diff) line(run.name, -1, -1, -1, "physical_max_diff", *run.physical_max_diff);
    if (run.generation && run.generation->has_answer)
      line(run.name, -1, -1, -1, "generation_has_answer", *run.generation->has_answer ? 1 : 0);
  }
}

namespace {

template <typename T>
std::optional<T> optional_attr(const h5::Group& g, const char* name, T (h5::Object::*get)(std::string_view) const) {
  if (!g.has_attr(name)) return std::nullopt;
  return (g.*get)(name);
}

// The runs in the order write_record wrote them (files before the `runs` attribute: the
// target, then the placebos by number).
std::vector<std::string> mask_run_names(const h5::Group& g) {
  if (g.has_attr("runs")) return g.attr_strings("runs");
  std::vector<std::string> names = g.open_group("runs").children();
  auto rank = [](const std::string& n) {
    return n == "target" ? -1 : n.starts_with("placebo") ? std::stoll(n.substr(7)) : INT64_MAX;
  };
  std::stable_sort(names.begin(), names.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return names;
}

// What write_mask_csv reads of a record, from its group (the eviction plans, spans and sink
// scores are not read back).
MaskRecord read_for_csv(const h5::Group& g, const std::string& id) {
  MaskRecord r;
  r.id = id;
  r.c = g.attr_int("context_end");
  r.prompt_len = g.attr_int("n_tokens");
  r.eval_rows = g.open_dataset("eval_rows").read<int64_t>();
  r.logp_answer_full = optional_attr<double>(g, "logp_answer_full", &h5::Object::attr_double);
  for (const std::string& name : mask_run_names(g)) {
    const h5::Group rg = g.open_group("runs/" + name);
    MaskRun run;
    run.name = name;
    const auto n_layer = rg.open_dataset("renorm_max_err").shape().at(0);
    run.metrics.layers.resize(static_cast<size_t>(n_layer));
    auto split = [&](const char* dataset, std::vector<double> LayerMaskMetrics::*field) {
      const std::vector<double> all = rg.open_dataset(dataset).read<double>();
      const size_t per = all.size() / static_cast<size_t>(std::max<int64_t>(n_layer, 1));
      for (size_t l = 0; l < run.metrics.layers.size(); ++l)
        run.metrics.layers[l].*field = std::vector<double>(all.begin() + static_cast<long>(l * per),
                                                           all.begin() + static_cast<long>((l + 1) * per));
    };
    for (const Named& f : row_fields()) split(f.name, f.field);
    split("delta_theta", &LayerMaskMetrics::delta_theta);
    run.metrics.delta_theta_total = rg.attr_double("delta_theta_total");
    run.next.kl = rg.attr_double("kl");
    run.next.top1_agree = rg.attr_bool("top1_agree");
    run.logp_answer = optional_attr<double>(rg, "logp_answer", &h5::Object::attr_double);
    run.ratio = optional_attr<double>(rg, "delta_theta_ratio", &h5::Object::attr_double);
    run.physical_max_diff = optional_attr<double>(rg, "physical_max_diff", &h5::Object::attr_double);
    if (rg.has_attr("generation_has_answer")) run.generation = Generation{.tokens = {}, .text = {},
                                                                          .has_answer = rg.attr_bool("generation_has_answer")};
    r.runs.push_back(std::move(run));
  }
  return r;
}

}  // namespace

void write_mask_csv_file(const std::filesystem::path& mask_h5, std::ostream& out) {
  const h5::File f = h5::File::open_read(mask_h5);
  check_mask_schema(f);
  write_mask_csv_header(out);
  // The sliding layers (root attributes, docs/MODELS.md "Sliding-window attention").
  std::map<int64_t, int64_t> windows;
  if (f.has_attr("sliding_layers") && f.has_attr("sliding_window"))
    for (const auto& l : f.attr_json("sliding_layers")) {
      if (!l.is_number_integer()) fail<FormatError>("{}: attribute \"sliding_layers\" is not a list of layers", mask_h5.string());
      windows[l.get<int64_t>()] = f.attr_int("sliding_window");
    }
  for (const std::string& id : complete_records_in_input_order(f))
    write_mask_csv(out, read_for_csv(f.open_group("records/" + id), id), windows);
}

}  // namespace ckv
