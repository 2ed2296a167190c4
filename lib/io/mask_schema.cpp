#include "io/mask_schema.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/provenance.h"

namespace ckv {

namespace {

template <typename T>
void put(h5::Group& g, const std::string& name, h5::DType type, const std::vector<int64_t>& shape,
         const std::vector<T>& data, const std::vector<std::string>& dims) {
  h5::Dataset d = g.create_dataset(name, type, shape);
  d.write(data);
  d.set_dims(dims);
}

// [n_layer, ...] from one vector per layer, picked by `field`.
template <typename F>
std::vector<double> stack(const RunMetrics& m, F field) {
  std::vector<double> out;
  for (const LayerMaskMetrics& l : m.layers) {
    const std::vector<double>& v = field(l);
    out.insert(out.end(), v.begin(), v.end());
  }
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

using Field = const std::vector<double>& (*)(const LayerMaskMetrics&);
struct Named {
  const char* name;
  Field field;
  bool per_head;
};
// Every per-row measurement, with the name it has in the HDF5 file and the CSV.
const std::vector<Named>& row_fields() {
  static const std::vector<Named> f = {
      {"resid_l1", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.resid_l1; }, false},
      {"resid_l2", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.resid_l2; }, false},
      {"head_l1", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.head_l1; }, true},
      {"head_l2", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.head_l2; }, true},
      {"retained", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.retained; }, true},
      {"sink_mass_full", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.sink_full; }, true},
      {"sink_mass_raw", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.sink_raw; }, true},
      {"sink_mass_corrected", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.sink_corrected; }, true},
      {"content_mass_full", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.content_full; }, true},
      {"content_mass_raw", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.content_raw; }, true},
      {"content_mass_corrected", [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.content_corrected; }, true},
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

void MaskFile::write_record(const MaskRecord& r) {
  h5::Group g = file_.create_group("records/" + r.id);
  const auto n_eval = static_cast<int64_t>(r.eval_rows.size());
  const auto n_layer = static_cast<int64_t>(r.sinks.s_attn.size());
  const int64_t n_head = n_layer > 0 ? r.sinks.s_attn[0].dim(0) : 0;
  g.set_attr_int("context_end", r.c);
  g.set_attr_int("prompt_tokens", r.prompt_len);
  if (r.answer) g.set_attr_string("answer", *r.answer);
  if (r.logp_answer_full) g.set_attr_double("logp_answer_full", *r.logp_answer_full);
  if (r.generation_full) write_generation(g, "generation_full", *r.generation_full);
  if (!r.placebo.is_null()) g.set_attr_json("placebo", r.placebo);
  put(g, "tokens", h5::DType::I32, {static_cast<int64_t>(r.tokens.size())}, r.tokens, {"pos"});
  put(g, "eval_rows", h5::DType::I64, {n_eval}, r.eval_rows, {"eval"});
  put(g, "s_attn", h5::DType::F32, {n_layer, n_head, r.c}, flatten(r.sinks.s_attn), {"layer", "head", "pos"});
  put(g, "s_val", h5::DType::F32, {n_layer, n_head, r.c}, flatten(r.sinks.s_val), {"layer", "head", "pos"});
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
    put(rg, "evicted", h5::DType::U8, {run.plan.n_layer, run.plan.n_kv_head, r.c}, evicted,
        {"layer", "kv_head", "pos"});
    for (const Named& f : row_fields()) {
      if (f.per_head)
        put(rg, f.name, h5::DType::F64, {n_layer, n_head, n_eval}, stack(run.metrics, f.field),
            {"layer", "head", "eval"});
      else
        put(rg, f.name, h5::DType::F64, {n_layer, n_eval}, stack(run.metrics, f.field), {"layer", "eval"});
    }
    put(rg, "delta_theta", h5::DType::F64, {n_layer, n_head},
        stack(run.metrics, [](const LayerMaskMetrics& l) -> const std::vector<double>& { return l.delta_theta; }),
        {"layer", "head"});
    std::vector<double> renorm;
    for (const LayerMaskMetrics& l : run.metrics.layers) renorm.push_back(l.renorm_max_err);
    put(rg, "renorm_max_err", h5::DType::F64, {n_layer}, renorm, {"layer"});
  }
  g.set_attr_bool("complete", true);
  file_.flush();
}

void write_mask_csv_header(std::ostream& out) { out << "record,run,layer,head,position,metric,value\n"; }

void write_mask_csv(std::ostream& out, const MaskRecord& r) {
  const auto n_eval = static_cast<int64_t>(r.eval_rows.size());
  const auto line = [&](const std::string& run, int64_t l, int64_t h, int64_t p, const char* m, double v) {
    out << fmt::format("{},{},{},{},{},{},{:.9g}\n", r.id, run, l, h, p, m, v);
  };
  for (const MaskRun& run : r.runs) {
    for (size_t l = 0; l < run.metrics.layers.size(); ++l) {
      const LayerMaskMetrics& m = run.metrics.layers[l];
      const auto L = static_cast<int64_t>(l);
      for (const Named& f : row_fields()) {
        const std::vector<double>& v = f.field(m);
        for (size_t i = 0; i < v.size(); ++i) {
          const auto head = f.per_head ? static_cast<int64_t>(i) / n_eval : -1;
          line(run.name, L, head, r.eval_rows[i % static_cast<size_t>(n_eval)], f.name, v[i]);
        }
      }
      line(run.name, L, -1, -1, "resid_l1_mean", m.resid_l1_mean());
      line(run.name, L, -1, -1, "resid_l2_mean", m.resid_l2_mean());
      for (size_t h = 0; h < m.delta_theta.size(); ++h)
        line(run.name, L, static_cast<int64_t>(h), -1, "delta_theta", m.delta_theta[h]);
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

}  // namespace ckv
