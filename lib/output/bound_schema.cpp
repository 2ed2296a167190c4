#include "output/bound_schema.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "output/provenance.h"
#include "output/batch_output.h"
#include "output/describe.h"

namespace ckv {

MetricRow query_mean(const LayerResult& r, int64_t method, int64_t budget, int64_t head) {
  MetricRow mean{};
  for (int64_t q = 0; q < r.n_query; ++q) {
    const MetricRow& row = r.at(method, budget, head, q);
    for (size_t k = 0; k < mean.size(); ++k) mean[k] += row[k];
  }
  for (double& x : mean) x /= static_cast<double>(r.n_query);
  return mean;
}

namespace {

// settings["budgets"] ("0.1,0.2" or "10%,20%") as fractions; none with --keep or no text.
std::vector<double> budget_fractions_of(const nlohmann::json& settings) {
  std::vector<double> out;
  if (settings.value("keep", int64_t{0}) > 0 || !settings.contains("budgets") || !settings["budgets"].is_string())
    return out;
  const std::string text = settings["budgets"].get<std::string>();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, end - start);
    const bool percent = !item.empty() && item.back() == '%';
    if (percent) item.pop_back();
    try {
      if (!item.empty()) out.push_back(std::stod(item) / (percent ? 100.0 : 1.0));
    } catch (const std::exception&) {
      return {};  // not a list of numbers: the settings' text stays the only record
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

BoundFile BoundFile::create(const std::filesystem::path& path, const Provenance& provenance,
                            const std::string& kind, const std::vector<std::string>& labels,
                            const nlohmann::json& settings) {
  h5::File file = h5::File::create(path);
  file.set_attr_string("schema", kBoundSchema);
  file.set_attr_int("schema_version", kBoundSchemaVersion);
  file.set_attr_string("kind", kind);
  provenance.write_attrs(file);
  file.set_attr_strings(kind == "check" ? "alphas" : "methods", labels);
  std::vector<std::string> metrics(kMetricNames.begin(), kMetricNames.end());
  file.set_attr_strings("metrics", metrics);
  file.set_attr_json("settings", settings);
  // The budgets as numbers beside the settings' text: fractions of the context (empty with
  // --keep, whose count is `budget_keep`); each record's `budgets` holds the kept counts.
  file.set_attr_doubles("budget_fractions", budget_fractions_of(settings));
  if (settings.value("keep", int64_t{0}) > 0) file.set_attr_int("budget_keep", settings.value("keep", int64_t{0}));
  return BoundFile(std::move(file));
}

BoundFile BoundFile::resume(const std::filesystem::path& path, const std::string& resumed_by) {
  h5::File file = h5::File::open_rw(path);
  check_bound_schema(file);
  note_resumed(file, resumed_by);
  return BoundFile(std::move(file));
}

std::set<std::string> BoundFile::complete_records() const { return complete_record_ids(file_); }

void BoundFile::write_record(const BoundRecord& rec) {
  if (rec.layers.empty()) fail<InputError>("bound: record \"{}\" has no layers", rec.id);
  h5::Group g = begin_record_group(file_, rec.id, rec.index);
  g.set_attr_int("n_tokens", rec.n);
  g.set_attr_int("context_end", rec.c);
  g.set_attr_int("question_start", rec.question_start);
  g.set_attr_int("eval_token", rec.eval_token);
  g.set_attr_ints("eval_rows", rec.eval_rows);
  g.set_attr_ints("budgets", rec.budgets);
  g.set_attr_ints("below_window", rec.below_window);
  g.set_attr_ints("layers", rec.layer_ids);
  const LayerResult& first = rec.layers.front();
  const int64_t nm = first.n_method, nb = first.n_budget, nl = static_cast<int64_t>(rec.layers.size());
  const int64_t nh = first.n_head, nq = first.n_query, ng = first.n_kv_head, c = first.c;
  const int64_t nk = kMetricCount;

  std::vector<double> metrics(static_cast<size_t>(nm * nb * nl * nh * nq * nk));
  std::vector<double> means(static_cast<size_t>(nm * nb * nl * nh * nk));
  std::vector<uint8_t> kept(static_cast<size_t>(nm * nb * nl * ng * c));
  std::vector<int64_t> counts(static_cast<size_t>(nm * nb * nl * ng));
  for (int64_t m = 0; m < nm; ++m)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t l = 0; l < nl; ++l) {
        const LayerResult& r = rec.layers[static_cast<size_t>(l)];
        const int64_t mbl = (m * nb + b) * nl + l;
        for (int64_t h = 0; h < nh; ++h) {
          for (int64_t q = 0; q < nq; ++q) {
            const MetricRow& row = r.at(m, b, h, q);
            std::copy(row.begin(), row.end(), metrics.begin() + ((mbl * nh + h) * nq + q) * nk);
          }
          const MetricRow mean = query_mean(r, m, b, h);
          std::copy(mean.begin(), mean.end(), means.begin() + (mbl * nh + h) * nk);
        }
        for (int64_t gi = 0; gi < ng; ++gi) {
          const int64_t src = (m * nb + b) * ng + gi;
          counts[static_cast<size_t>(mbl * ng + gi)] = r.kept_count[static_cast<size_t>(src)];
          std::copy_n(r.kept_mask.begin() + src * c, c, kept.begin() + (mbl * ng + gi) * c);
        }
      }
  // Uncompressed: gzip of these float64 metrics cost 0.45 s of serial CPU at 4K tokens for
  // a 23% smaller file (docs/PERF.md); the 0/1 kept masks below compress 40x for 0.03 s.
  const h5::DatasetOptions chunked{.chunk = {1, 1, nl, nh, nq, nk}};
  h5::Dataset ds = g.create_dataset("metrics", h5::DType::F64, {nm, nb, nl, nh, nq, nk}, chunked);
  ds.set_dims({"method", "budget", "layer", "head", "query", "metric"});
  describe(ds, "per evaluation query: each metric (root attribute `metrics` names them) of evicting "
               "per method (root `methods` or `alphas`) and budget (record attribute `budgets`: kept "
               "entries; root `budget_fractions`)");
  ds.write(metrics);
  ds = g.create_dataset("metrics_mean", h5::DType::F64, {nm, nb, nl, nh, nk});
  ds.set_dims({"method", "budget", "layer", "head", "metric"});
  describe(ds, "the metrics averaged over the evaluation queries (axis `query` of `metrics`)");
  ds.write(means);
  ds = g.create_dataset("kept_mask", h5::DType::U8, {nm, nb, nl, ng, c},
                        {.chunk = {1, 1, nl, ng, c}, .gzip_level = 4, .shuffle = false});
  ds.set_dims({"method", "budget", "layer", "kv_head", "pos"});
  describe(ds, "1 where the method keeps the context position in the KV head's cache, 0 where it evicts it");
  ds.write(kept);
  ds = g.create_dataset("kept_count", h5::DType::I64, {nm, nb, nl, ng});
  ds.set_dims({"method", "budget", "layer", "kv_head"});
  describe(ds, "kept context entries per KV head (the sum of `kept_mask` over `pos`)", "entries");
  ds.write(counts);
  finish_record_group(file_, g);
}

void check_bound_schema(const h5::File& file) {
  check_schema(file, kBoundSchema, kBoundSchemaVersion, "ckv bound/check output");
}

namespace {

// The inverse of BoundFile::write_record.
BoundRecord read_record(const h5::Group& g, const std::string& id) {
  BoundRecord rec;
  rec.id = id;
  rec.index = g.has_attr("index") ? g.attr_int("index") : 0;
  rec.n = g.attr_int("n_tokens");
  rec.c = g.attr_int("context_end");
  rec.question_start = g.attr_int("question_start");
  rec.eval_token = g.attr_int("eval_token");
  rec.eval_rows = g.attr_ints("eval_rows");
  rec.budgets = g.attr_ints("budgets");
  rec.below_window = g.attr_ints("below_window");
  if (rec.below_window.size() != rec.budgets.size())
    fail<FormatError>("{}: below_window and budgets differ in length", g.where());
  rec.layer_ids = g.attr_ints("layers");
  const h5::Dataset ds = g.open_dataset("metrics");  // [method, budget, layer, head, query, metric]
  const h5::Dataset mask_ds = g.open_dataset("kept_mask");  // [method, budget, layer, kv_head, pos]
  const std::vector<int64_t>& s = ds.shape();
  if (s.size() != 6 || s[5] != kMetricCount || s[2] != static_cast<int64_t>(rec.layer_ids.size()) ||
      mask_ds.shape().size() != 5)
    fail<FormatError>("{}: metrics or kept_mask of an unexpected shape", g.where());
  const int64_t nm = s[0], nb = s[1], nl = s[2], nh = s[3], nq = s[4], nk = s[5];
  const int64_t ng = mask_ds.shape()[3], c = mask_ds.shape()[4];
  const std::vector<double> metrics = ds.read<double>();
  const std::vector<uint8_t> kept = mask_ds.read<uint8_t>();
  const std::vector<int64_t> counts = g.open_dataset("kept_count").read<int64_t>();
  for (int64_t l = 0; l < nl; ++l) {
    LayerResult r;
    r.n_method = nm, r.n_budget = nb, r.n_head = nh, r.n_query = nq, r.n_kv_head = ng, r.c = c;
    r.metrics.resize(static_cast<size_t>(nm * nb * nh * nq));
    r.kept_mask.resize(static_cast<size_t>(nm * nb * ng * c));
    r.kept_count.resize(static_cast<size_t>(nm * nb * ng));
    for (int64_t m = 0; m < nm; ++m)
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t mbl = (m * nb + b) * nl + l, mb = m * nb + b;
        for (int64_t h = 0; h < nh; ++h)
          for (int64_t q = 0; q < nq; ++q)
            std::copy_n(metrics.begin() + ((mbl * nh + h) * nq + q) * nk, nk,
                        r.metrics[static_cast<size_t>((mb * nh + h) * nq + q)].begin());
        for (int64_t gi = 0; gi < ng; ++gi) {
          r.kept_count[static_cast<size_t>(mb * ng + gi)] = counts[static_cast<size_t>(mbl * ng + gi)];
          std::copy_n(kept.begin() + (mbl * ng + gi) * c, c, r.kept_mask.begin() + (mb * ng + gi) * c);
        }
      }
    rec.layers.push_back(std::move(r));
  }
  return rec;
}

}  // namespace

BoundHeader read_bound_records(const std::filesystem::path& path,
                               const std::function<void(const BoundHeader&, const BoundRecord&)>& on_record) {
  const h5::File f = h5::File::open_read(path);
  check_bound_schema(f);
  BoundHeader h;
  h.kind = f.attr_string("kind");
  h.labels = f.attr_strings(h.kind == "check" ? "alphas" : "methods");
  h.settings = f.attr_json("settings");
  h.budget_fractions = f.has_attr("budget_fractions") ? f.attr_doubles("budget_fractions") : budget_fractions_of(h.settings);
  h.provenance = attrs_as_json(f, {"schema", "schema_version", "kind", "methods", "alphas", "metrics", "settings"});
  const std::vector<std::string> ids = complete_records_in_input_order(f);
  h.records = static_cast<int64_t>(ids.size());
  for (const std::string& id : ids) on_record(h, read_record(f.open_group("records/" + id), id));
  return h;
}

void write_bound_csv_header(std::ostream& out) {
  out << "record,method,budget,layer,head,kv_head,n_query,eval,compress,nu_min_reading,below_window,sliding_window";
  for (const char* name : kMetricNames) out << ',' << name;
  out << '\n';
}

void write_bound_csv_rows(std::ostream& out, const BoundRecord& rec, const BoundHeader& header) {
  const std::vector<std::string>& labels = header.labels;
  const nlohmann::json& settings = header.settings;
  std::set<int64_t> sliding;  // the root attribute holds the JSON list as text (set_attr_json)
  if (const auto it = header.provenance.find("sliding_layers"); it != header.provenance.end()) {
    const nlohmann::json layers = it->is_string() ? nlohmann::json::parse(it->get<std::string>(), nullptr, false)
                                                  : nlohmann::json(*it);
    if (!layers.is_array()) fail<FormatError>("attribute \"sliding_layers\" is not a list of layers");
    for (const auto& l : layers) {
      if (!l.is_number_integer()) fail<FormatError>("attribute \"sliding_layers\" is not a list of layers");
      sliding.insert(l.get<int64_t>());
    }
  }
  int64_t window = 0;
  if (const auto it = header.provenance.find("sliding_window"); it != header.provenance.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0)
      fail<FormatError>("attribute \"sliding_window\" is not a number of keys");
    window = it->get<int64_t>();
  }
  const std::string protocol = fmt::format("{},{},{}", settings.value("eval", std::string("question")),
                                           settings.value("compress", std::string("context")),
                                           settings.value("nu_min", std::string("all")));
  for (size_t l = 0; l < rec.layers.size(); ++l) {
    const LayerResult& r = rec.layers[l];
    const int64_t group = r.n_head / r.n_kv_head;
    for (int64_t m = 0; m < r.n_method; ++m)
      for (int64_t b = 0; b < r.n_budget; ++b)
        for (int64_t h = 0; h < r.n_head; ++h) {
          const MetricRow mean = query_mean(r, m, b, h);
          // Method names hold commas only inside parentheses; quote them for CSV readers.
          out << fmt::format("{},\"{}\",{},{},{},{},{},{},{},{}", rec.id, labels[static_cast<size_t>(m)],
                             rec.budgets[static_cast<size_t>(b)], rec.layer_ids[l], h, h / group, r.n_query,
                             protocol, rec.below_window[static_cast<size_t>(b)],
                             sliding.count(rec.layer_ids[l]) ? window : 0);
          for (double x : mean) out << ',' << fmt::format("{:.9g}", x);
          out << '\n';
        }
  }
}

}  // namespace ckv
