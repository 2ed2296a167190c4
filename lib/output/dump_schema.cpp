#include "output/dump_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/ranges.h>

#include "core/error.h"
#include "output/provenance.h"
#include "output/batch_output.h"
#include "output/describe.h"
#include "model/model.h"

namespace ckv {

namespace {

constexpr std::array<std::string_view, 11> kItems = {
    "q", "k", "v", "attn", "nu_l1", "nu_l2", "attn_out", "resid", "logits", "wo", "nu"};

std::vector<int32_t> to_i32(const std::vector<int64_t>& x) {
  return std::vector<int32_t>(x.begin(), x.end());
}

nlohmann::json spans_json(const NamedSpans& spans) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, ranges] : spans) {
    j[name] = nlohmann::json::array();
    for (const SpanRange& r : ranges) j[name].push_back({r.start, r.end});
  }
  return j;
}

void write_model_attrs(h5::Group g, const Model& model, const std::string& sha256) {
  const ModelConfig& c = model.config;
  g.set_attr_string("path", model.source.path.string());
  g.set_attr_string("sha256", sha256);
  g.set_attr_string("format", model.source.format);
  g.set_attr_string("arch", c.arch_name);
  g.set_attr_int("n_layer", c.n_layer);
  g.set_attr_int("n_head", c.n_head);
  g.set_attr_int("n_kv_head", c.n_kv_head);
  g.set_attr_int("d_head", c.d_head);
  g.set_attr_int("d_model", c.d_model);
  g.set_attr_int("d_ff", c.d_ff);
  g.set_attr_int("vocab", c.vocab);
  g.set_attr_int("context_length", c.context_length);
  g.set_attr_double("rms_eps", c.rms_eps);
  g.set_attr_double("rope_theta", c.rope_theta);
  g.set_attr_json("rope_scaling", {{"type", c.rope_scaling.type},
                                   {"factor", c.rope_scaling.factor},
                                   {"low_freq_factor", c.rope_scaling.low_freq_factor},
                                   {"high_freq_factor", c.rope_scaling.high_freq_factor},
                                   {"original_max_position", c.rope_scaling.original_max_position},
                                   {"freq_factors_tensor", !model.weights.rope_freq_factors.empty()},
                                   {"short_factor", c.rope_scaling.short_factor},
                                   {"long_factor", c.rope_scaling.long_factor},
                                   {"attention_factor", c.rope_scaling.attention_factor}});
  // What the analysis of the dump needs beyond the shapes, so that it runs without the model
  // file (model_from_dump): the rotated dims, Gemma 3's local base, the logit scale.
  g.set_attr_int("rope_dim", c.rope_dim > 0 ? c.rope_dim : c.d_head);
  g.set_attr_double("rope_local_theta", c.rope_local_theta);
  g.set_attr_double("attn_scale", c.attn_scale);
  g.set_attr_bool("attention_bias", c.attention_bias);
  g.set_attr_bool("tied_embeddings", c.tied_embeddings);
  // Layers whose attention is a sliding window (their keys before p - window never count):
  // a reader must not average them with the full layers unknowingly (issue 27).
  g.set_attr_int("sliding_window", c.sliding_window);
  nlohmann::json sliding = nlohmann::json::array();
  for (int64_t l = 0; l < c.n_layer; ++l)
    if (c.window_of(l) > 0) sliding.push_back(l);
  g.set_attr_json("sliding_layers", sliding);
  g.set_attr_json("weight_dtypes", model.source.dtype_counts);
}

// A number of the rope_scaling JSON, `fallback` when absent (a dump from an older ckv).
double scaling_number(const nlohmann::json& j, const char* key, double fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  if (!j[key].is_number()) fail<FormatError>("{}: rope_scaling.{} is not a number", where, key);
  return j[key].get<double>();
}

std::vector<float> scaling_factors(const nlohmann::json& j, const char* key, const std::string& where) {
  std::vector<float> out;
  if (!j.contains(key)) return out;
  if (!j[key].is_array()) fail<FormatError>("{}: rope_scaling.{} is not a list", where, key);
  for (const nlohmann::json& x : j[key]) {
    if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() <= 0)
      fail<FormatError>("{}: rope_scaling.{} holds a value that is not a positive number", where, key);
    out.push_back(x.get<float>());
  }
  return out;
}

ModelConfig config_from_model_attrs(const h5::Group& g, const std::string& where) {
  ModelConfig c;
  c.arch_name = g.attr_string("arch");  // only named: the dump's own tensors are what is analysed
  c.n_layer = g.attr_int("n_layer");
  c.n_head = g.attr_int("n_head");
  c.n_kv_head = g.attr_int("n_kv_head");
  c.d_head = g.attr_int("d_head");
  c.d_model = g.attr_int("d_model");
  c.d_ff = g.attr_int("d_ff");
  c.vocab = g.attr_int("vocab");
  c.context_length = g.attr_int("context_length");
  c.rms_eps = g.attr_double("rms_eps");
  c.rope_theta = g.attr_double("rope_theta");
  c.attention_bias = g.attr_bool("attention_bias");
  c.tied_embeddings = g.attr_bool("tied_embeddings");
  c.rope_dim = g.has_attr("rope_dim") ? g.attr_int("rope_dim") : c.d_head;
  c.rope_local_theta = g.has_attr("rope_local_theta") ? g.attr_double("rope_local_theta") : 0.0;
  c.attn_scale = g.has_attr("attn_scale") ? g.attr_double("attn_scale") : 0.0;
  if (!std::isfinite(c.rope_local_theta) || c.rope_local_theta < 0)
    fail<FormatError>("{}: rope_local_theta {} is not a non-negative number", where, c.rope_local_theta);
  const nlohmann::json sc = g.attr_json("rope_scaling");
  if (!sc.is_object() || !sc.contains("type") || !sc["type"].is_string())
    fail<FormatError>("{}: rope_scaling is not an object with a type", where);
  c.rope_scaling.type = sc["type"].get<std::string>();
  c.rope_scaling.factor = scaling_number(sc, "factor", 1.0, where);
  c.rope_scaling.low_freq_factor = scaling_number(sc, "low_freq_factor", 1.0, where);
  c.rope_scaling.high_freq_factor = scaling_number(sc, "high_freq_factor", 4.0, where);
  c.rope_scaling.original_max_position =
      static_cast<int64_t>(scaling_number(sc, "original_max_position", 8192, where));
  c.rope_scaling.attention_factor = scaling_number(sc, "attention_factor", 1.0, where);
  c.rope_scaling.short_factor = scaling_factors(sc, "short_factor", where);
  c.rope_scaling.long_factor = scaling_factors(sc, "long_factor", where);
  c.sliding_window = g.attr_int("sliding_window");
  const nlohmann::json sliding = g.attr_json("sliding_layers");
  if (!sliding.is_array()) fail<FormatError>("{}: sliding_layers is not a list", where);
  c.validate(where);  // the shapes first: n_layer bounds the sliding layers
  for (const nlohmann::json& l : sliding) {
    if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.n_layer)
      fail<FormatError>("{}: sliding_layers holds {}, not a layer in [0, {})", where, l.dump(), c.n_layer);
    if (c.sliding_layers.empty()) c.sliding_layers.assign(static_cast<size_t>(c.n_layer), 0);
    c.sliding_layers[static_cast<size_t>(l.get<int64_t>())] = 1;
  }
  if (!c.sliding_layers.empty() && c.sliding_window < 1)
    fail<FormatError>("{}: sliding layers with a window of {}", where, c.sliding_window);
  return c;
}

}  // namespace

std::optional<Model> model_from_dump(const h5::File& file, const std::string& path) {
  if (!file.exists("model/layers")) return std::nullopt;
  const h5::Group g = file.open_group("model");
  const std::string where = fmt::format("{}: /model", path);
  Model m;
  m.config = config_from_model_attrs(g, where);
  const ModelConfig& c = m.config;
  m.source.path = g.attr_string("path");
  m.source.format = g.attr_string("format");
  m.weights.layers.resize(static_cast<size_t>(c.n_layer));
  const std::vector<int64_t> want{c.d_model, c.n_head * c.d_head};
  std::vector<int64_t> with, without;
  for (int64_t l : file.attr_ints("layers")) {
    if (l < 0 || l >= c.n_layer) fail<FormatError>("{}: recorded layer {} is outside [0, {})", path, l, c.n_layer);
    const std::string name = fmt::format("model/layers/{}/W_O", l);
    if (!file.exists(name)) {
      without.push_back(l);
      continue;
    }
    const h5::Dataset ds = file.open_dataset(name);
    if (ds.shape() != want)
      fail<FormatError>("{}: W_O has shape [{}], expected [{}] from /model", ds.where(), fmt::join(ds.shape(), ", "),
                        fmt::join(want, ", "));
    m.weights.layers[static_cast<size_t>(l)].wo = WeightMatrix::from_tensor(Tensor(want, ds.read<float>()));
    with.push_back(l);
  }
  if (with.empty()) return std::nullopt;
  if (!without.empty())
    fail<FormatError>("{}: W_O is stored for layers {} but not for layer {}", path, fmt::join(with, ","),
                      without.front());
  if (file.exists("model/rope_freqs")) {
    const h5::Dataset ds = file.open_dataset("model/rope_freqs");
    if (ds.shape() != std::vector<int64_t>{c.rope_dim / 2})
      fail<FormatError>("{}: rope_freqs has shape [{}], expected [{}]", ds.where(), fmt::join(ds.shape(), ", "),
                        c.rope_dim / 2);
    m.weights.rope_freq_factors = ds.read<float>();
  } else if (const nlohmann::json sc = g.attr_json("rope_scaling"); sc.is_object() && sc.contains("freq_factors_tensor") &&
                                                                      sc["freq_factors_tensor"] == true) {
    fail<FormatError>("{}: the model rotates by GGUF rope_freqs, which this dump does not hold (an older ckv "
                      "wrote it): give --model", path);
  }
  return m;
}

DumpContents DumpContents::parse(std::string_view list) {
  DumpContents w;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = list.substr(pos, comma - pos);
    pos = comma + 1;
    if (item.empty()) continue;
    if (item == "q") w.q = true;
    else if (item == "k") w.k = true;
    else if (item == "v") w.v = true;
    else if (item == "attn") w.attn = true;
    else if (item == "nu") w.nu_l1 = w.nu_l2 = true;
    else if (item == "nu_l1") w.nu_l1 = true;
    else if (item == "nu_l2") w.nu_l2 = true;
    else if (item == "attn_out") w.attn_out = true;
    else if (item == "resid") w.resid = true;
    else if (item == "logits") w.logits = true;
    else if (item == "wo") w.wo = true;
    else fail<UsageError>("--what: unknown item '{}' (known: {})", item, fmt::join(kItems, ","));
  }
  if (w.names().empty()) fail<UsageError>("--what: nothing to record");
  return w;
}

std::vector<std::string> DumpContents::names() const {
  const bool flags[] = {q, k, v, attn, nu_l1, nu_l2, attn_out, resid, logits, wo};
  std::vector<std::string> out;
  for (size_t i = 0; i < std::size(flags); ++i)
    if (flags[i]) out.emplace_back(kItems[i]);
  return out;
}

std::vector<int64_t> DumpSettings::kv_heads(int64_t group) const {
  std::vector<int64_t> out;
  for (int64_t h : heads)
    if (out.empty() || out.back() != h / group) out.push_back(h / group);
  return out;
}

nlohmann::json DumpSettings::to_json() const {
  return {{"what", what.names()},    {"layers", layers},        {"heads", heads},
          {"dtype", h5::dtype_name(dtype)}, {"compression", gzip_level},
          {"attn_rows", attn_rows},  {"window", window}};
}

// ---- RecordWriter -------------------------------------------------------------------

// Layer groups are named by number ("0", "1", ..., "10"), which HDF5 lists in string order:
// sorted(g["layers"], key=int) lists them in layer order (the group's description says so).
h5::Group RecordWriter::layer(int64_t l) {
  if (!group_.is_group("layers")) {
    h5::Group layers = group_.require_group("layers");
    describe(layers, "one group per recorded layer, named by its index; list them in order with "
                     "sorted(group, key=int)");
  }
  return group_.require_group(fmt::format("layers/{}", l));
}

void RecordWriter::write_selected(h5::Group& g, const std::string& name, const Tensor& x,
                                  const std::vector<int64_t>& index,
                                  const std::vector<std::string>& dims, std::string_view description,
                                  std::string_view unit) {
  std::vector<int64_t> shape = x.shape();
  const int64_t stride = x.numel() / shape.at(0);
  shape[0] = static_cast<int64_t>(index.size());
  h5::DatasetOptions opt;
  opt.chunk = h5::chunk_by_first_dim(shape, h5::dtype_size(settings_->dtype));
  opt.gzip_level = settings_->gzip_level;
  opt.shuffle = settings_->gzip_level > 0;
  h5::Dataset ds = g.create_dataset(name, settings_->dtype, shape, opt);
  ds.set_dims(dims);
  describe(ds, description, unit);
  for (size_t i = 0; i < index.size(); ++i)
    ds.write_index(static_cast<int64_t>(i), x.data() + index[i] * stride, static_cast<size_t>(stride));
}

void RecordWriter::write_qkv(int64_t l, const Tensor& q, const Tensor& k, const Tensor& v) {
  h5::Group g = layer(l);
  const std::vector<int64_t> kv = settings_->kv_heads(group_size_);
  if (settings_->what.q)
    write_selected(g, "q", q, settings_->heads, {"head", "pos", "d_head"}, "queries after RoPE, per selected head");
  if (settings_->what.k)
    write_selected(g, "k", k, kv, {"kv_head", "pos", "d_head"}, "keys after RoPE, per KV head of the selected heads");
  if (settings_->what.v) write_selected(g, "v", v, kv, {"kv_head", "pos", "d_head"}, "values, per KV head");
}

void RecordWriter::write_nu(int64_t l, const Tensor& nu_l1, const Tensor& nu_l2) {
  h5::Group g = layer(l);
  std::vector<int64_t> all(settings_->heads.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  if (!nu_l1.empty())
    write_selected(g, "nu_l1", nu_l1, all, {"head", "pos"}, "value norm nu = ||v W_O^h||_1 of each position, per head");
  if (!nu_l2.empty())
    write_selected(g, "nu_l2", nu_l2, all, {"head", "pos"}, "value norm ||v W_O^h||_2 of each position, per head");
}

void RecordWriter::write_attention(int64_t l, const Tensor& probs) {
  h5::Group g = layer(l);
  write_selected(g, "attn", probs, settings_->heads, {"head", "row", "pos"},
                 "attention probabilities of the recorded query rows (record dataset `attn_rows`) over positions",
                 "probability");
}

void RecordWriter::write_head_out(int64_t l, const Tensor& head_out) {
  h5::Group g = layer(l);
  write_selected(g, "attn_out", head_out, settings_->heads, {"head", "row", "d_model"},
                 "each head's output projected by its slice of W_O, at the recorded rows");
}

void RecordWriter::write_resid(int64_t l, const Tensor& resid) {
  h5::Group g = layer(l);
  h5::DatasetOptions opt;
  opt.chunk = {std::min<int64_t>(resid.dim(0), 256), resid.dim(1)};  // position blocks
  opt.gzip_level = settings_->gzip_level;
  opt.shuffle = settings_->gzip_level > 0;
  h5::Dataset ds = g.create_dataset("resid", settings_->dtype, resid.shape(), opt);
  ds.set_dims({"pos", "d_model"});
  describe(ds, "the residual stream after the layer");
  ds.write(std::vector<float>(resid.data(), resid.data() + resid.numel()));
}

void RecordWriter::write_logits_last(std::span<const float> logits) {
  // float32 always: logits feed KL and argmax comparisons, where float16 rounding shows.
  h5::Dataset ds = group_.create_dataset("logits_last", h5::DType::F32,
                                         {static_cast<int64_t>(logits.size())});
  ds.set_dims({"vocab"});
  describe(ds, "next-token logits at the last position", "logit");
  ds.write(std::vector<float>(logits.begin(), logits.end()));
}

// ---- DumpFile -------------------------------------------------------------------------

DumpFile DumpFile::create(const std::filesystem::path& path, const Provenance& provenance,
                          const Model& model, const std::string& model_sha256,
                          const DumpSettings& settings) {
  h5::File file = h5::File::create(path);
  file.set_attr_string("schema", kDumpSchema);
  file.set_attr_int("schema_version", kDumpSchemaVersion);
  provenance.write_attrs(file);
  file.set_attr_strings("what", settings.what.names());
  file.set_attr_ints("layers", settings.layers);
  file.set_attr_ints("heads", settings.heads);
  file.set_attr_ints("kv_heads", settings.kv_heads(model.config.group_size()));
  file.set_attr_string("dtype", h5::dtype_name(settings.dtype));
  file.set_attr_int("compression", settings.gzip_level);
  file.set_attr_string("attn_rows", settings.attn_rows);
  file.set_attr_int("window", settings.window);
  file.set_attr_json("settings", settings.to_json());
  write_model_attrs(file.create_group("model"), model, model_sha256);
  if (settings.what.wo) {
    for (int64_t l : settings.layers) {
      const Tensor wo = model.weights.layers.at(static_cast<size_t>(l)).wo.to_f32();  // [d_model, n_head*d_head]
      // float32 always, contiguous: the exact weights that nu was computed from.
      h5::Dataset ds = file.create_dataset(fmt::format("model/layers/{}/W_O", l), h5::DType::F32, wo.shape());
      ds.set_dims({"d_model", "head_d_head"});
      describe(ds, "the layer's attention output projection W_O (float32), as nu was computed from");
      ds.write(std::vector<float>(wo.data(), wo.data() + wo.numel()));
    }
    const std::vector<float>& factors = model.weights.rope_freq_factors;
    if (!factors.empty()) {  // GGUF's rope_freqs: the rotary frequencies are not in the config
      h5::Dataset ds = file.create_dataset("model/rope_freqs", h5::DType::F32, {static_cast<int64_t>(factors.size())});
      ds.set_dims({"rope_pair"});
      describe(ds, "the model's RoPE frequency divisors (GGUF rope_freqs): inv_freq[i] / rope_freqs[i]");
      ds.write(factors);
    }
  }
  file.create_group("records");
  file.flush();
  return DumpFile(std::move(file), settings, model.config.group_size());
}

std::vector<int64_t> parse_index_list(std::string_view spec, int64_t limit, std::string_view flag) {
  std::vector<int64_t> out;
  if (spec == "all") {
    for (int64_t i = 0; i < limit; ++i) out.push_back(i);
    return out;
  }
  auto number = [&](std::string_view text, std::string_view item) {
    int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
      fail<UsageError>("{}: '{}' is not an index or a range a-b", flag, item);
    if (value < 0 || value >= limit)
      fail<UsageError>("{}: {} is outside [0, {})", flag, value, limit);
    return value;
  };
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    const size_t dash = item.find('-', 1);
    if (dash == std::string_view::npos) {
      out.push_back(number(item, item));
    } else {
      const int64_t a = number(item.substr(0, dash), item), b = number(item.substr(dash + 1), item);
      if (b < a) fail<UsageError>("{}: range '{}' is empty", flag, item);
      for (int64_t i = a; i <= b; ++i) out.push_back(i);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int64_t> attention_rows(std::string_view spec, int64_t window, bool window_given,
                                    int64_t c, int64_t n, std::string_view record) {
  std::vector<int64_t> rows;
  if (spec == "window") {
    if (window <= 0) fail<UsageError>("--window: {} must be positive", window);
    if (window > c) {
      if (window_given)
        fail<InputError>("{}: --window {} is longer than the context ({} tokens)", record, window, c);
      window = c;
    }
    for (int64_t i = c - window; i < n; ++i) rows.push_back(i);
  } else if (spec.starts_with("last:")) {
    int64_t count = 0;
    const std::string_view digits = spec.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
    if (ec != std::errc() || end != digits.data() + digits.size() || count <= 0)
      fail<UsageError>("--attn-rows: '{}' is not last:N with N > 0", spec);
    if (count > n)
      fail<InputError>("{}: --attn-rows {} asks for rows past the start ({} tokens)", record, spec, n);
    for (int64_t i = n - count; i < n; ++i) rows.push_back(i);
  } else if (spec == "all") {
    for (int64_t i = 0; i < n; ++i) rows.push_back(i);
  } else {
    try {
      rows = parse_index_list(spec, n, "--attn-rows");
    } catch (const InputError& e) {
      fail<InputError>("{}: {} (rows past the end of its {} tokens)", record, e.what(), n);
    }
  }
  return rows;
}

void check_dump_schema(const h5::File& file) {
  check_schema(file, kDumpSchema, kDumpSchemaVersion, "ckv dump");
}

DumpFile DumpFile::resume(const std::filesystem::path& path, const DumpSettings& settings,
                          const std::string& resumed_by) {
  h5::File file = h5::File::open_rw(path);
  // Everything checked before the file is modified (check_output_to_resume checked it
  // whole already; this keeps the division below safe for any caller).
  check_dump_schema(file);
  const h5::Group model = file.open_group("model");
  const int64_t n_head = model.attr_int("n_head"), n_kv_head = model.attr_int("n_kv_head");
  if (n_head < 1 || n_kv_head < 1 || n_head % n_kv_head != 0)
    fail<FormatError>("{}: n_head {} is not a positive multiple of n_kv_head {}", model.where(), n_head, n_kv_head);
  note_resumed(file, resumed_by);
  return DumpFile(std::move(file), settings, n_head / n_kv_head);
}

std::set<std::string> DumpFile::complete_records() const { return complete_record_ids(file_); }

RecordWriter DumpFile::begin_record(const RecordMeta& meta) {
  h5::Group g = begin_record_group(file_, meta.id, meta.index);
  g.set_attr_string("id", meta.id);
  if (meta.line > 0) g.set_attr_int("line", meta.line);
  g.set_attr_string("context", meta.context);
  if (meta.question) g.set_attr_string("question", *meta.question);
  if (meta.answer) g.set_attr_string("answer", *meta.answer);
  g.set_attr_int("n_tokens", static_cast<int64_t>(meta.tokens.size()));
  g.set_attr_int("context_end", meta.context_end);
  g.set_attr_json("spans", spans_json(meta.token_spans));
  h5::Dataset tokens = g.create_dataset("tokens", h5::DType::I32, {static_cast<int64_t>(meta.tokens.size())});
  tokens.set_dims({"pos"});
  describe(tokens, "token ids of the prompt; attribute token_text: them as text");
  set_token_text(tokens, meta.token_text);
  tokens.write(meta.tokens);
  if (!meta.attn_rows.empty()) {
    h5::Dataset rows = g.create_dataset("attn_rows", h5::DType::I32, {static_cast<int64_t>(meta.attn_rows.size())});
    rows.set_dims({"row"});
    describe(rows, "the positions of the query rows recorded in attn and attn_out");
    rows.write(to_i32(meta.attn_rows));
  }
  return RecordWriter(std::move(g), settings_, group_size_);
}

void DumpFile::finish_record(RecordWriter& record) { finish_record_group(file_, record.group()); }

}  // namespace ckv
