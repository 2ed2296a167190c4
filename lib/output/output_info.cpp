#include "output/output_info.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "output/dump_schema.h"
#include "io/h5.h"
#include "output/validate.h"

namespace ckv {
namespace {

using Out = std::back_insert_iterator<std::string>;  // the description, as it is written

struct KindSize {
  int64_t datasets = 0;
  int64_t bytes = 0;       // on disk (after compression)
  int64_t raw_bytes = 0;   // uncompressed
};

// The file's provenance attributes among `keys` (strings, or integers where stored so).
nlohmann::ordered_json provenance_json(const h5::File& f, std::initializer_list<const char*> keys) {
  nlohmann::ordered_json prov;
  for (const char* key : keys) {
    if (!f.has_attr(key)) continue;
    try {
      prov[key] = f.attr_string(key);
    } catch (const FormatError&) {
      prov[key] = f.attr_int(key);
    }
  }
  return prov;
}

std::string human(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(bytes);
  int u = 0;
  while (x >= 1024 && u < 4) x /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", x, units[u]);
}

void add_sizes(const h5::Group& g, const std::string& kind_prefix, std::map<std::string, KindSize>& sizes) {
  for (const std::string& name : g.children()) {
    if (g.is_group(name)) {
      add_sizes(g.open_group(name), kind_prefix, sizes);
    } else if (g.is_dataset(name)) {
      const h5::Dataset ds = g.open_dataset(name);
      KindSize& k = sizes[kind_prefix + name];
      ++k.datasets;
      k.bytes += static_cast<int64_t>(H5Dget_storage_size(ds.id()));
      k.raw_bytes += ds.numel() * static_cast<int64_t>(h5::dtype_size(ds.dtype()));
    }
  }
}

// The sizes into j["size_per_kind"]; with `json`, writes `j` and returns true.
bool put_sizes_and_write_json(Out out, nlohmann::ordered_json& j, const std::map<std::string, KindSize>& sizes,
                              bool json) {
  nlohmann::ordered_json kinds;
  for (const auto& [kind, s] : sizes)
    kinds[kind] = {{"datasets", s.datasets}, {"bytes", s.bytes}, {"raw_bytes", s.raw_bytes}};
  j["size_per_kind"] = kinds;
  if (json) fmt::format_to(out, "{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));  // text from the file may be invalid UTF-8
  return json;
}

void write_sizes(Out out, std::string_view what, const std::map<std::string, KindSize>& sizes) {
  fmt::format_to(out, "size per {} kind:\n", what);
  for (const auto& [kind, s] : sizes)
    fmt::format_to(out, "  {:<22} {:>6} datasets  {:>10}  (raw {})\n", kind, s.datasets, human(s.bytes), human(s.raw_bytes));
}

std::string shape_text(const h5::Dataset& ds) {
  std::vector<std::string> parts;
  const auto dims = ds.dims();
  for (size_t i = 0; i < ds.shape().size(); ++i)
    parts.push_back(i < dims.size() ? fmt::format("{}={}", dims[i], ds.shape()[i]) : std::to_string(ds.shape()[i]));
  return fmt::format("{} [{}]", h5::dtype_name(ds.dtype()), fmt::join(parts, ", "));
}

// The shapes of the datasets of a record group and of its subgroups, by relative path.
void record_shapes(const h5::Group& g, const std::string& prefix, nlohmann::ordered_json& shapes) {
  for (const std::string& name : g.children()) {
    if (g.is_dataset(name)) shapes[prefix + name] = shape_text(g.open_dataset(name));
    else if (g.is_group(name)) record_shapes(g.open_group(name), prefix + name + "/", shapes);
  }
}

// bound, check and mask outputs (shards and merges too).
void describe_output(Out out, const std::string& path, const h5::File& f, const OutputSummary& summary, bool json) {
  nlohmann::ordered_json j;
  j["file"] = path;
  j["size_bytes"] = std::filesystem::file_size(path);
  j["schema"] = summary.schema;
  j["schema_version"] = f.attr_int("schema_version");
  if (!summary.kind.empty()) j["kind"] = summary.kind;
  const nlohmann::ordered_json prov = provenance_json(f, {"ckv_version", "git_commit", "created", "command_line", "model_path",
                                         "model_sha256", "input_file", "input_sha256", "shard", "input_records",
                                         "threads", "device", "hostname", "user", "merge_command_line", "merged_at"});
  j["provenance"] = prov;
  for (const char* key : {"methods", "alphas"})
    if (f.has_attr(key)) j[key] = f.attr_strings(key);
  j["settings"] = f.attr_json("settings");
  if (f.has_attr("resumed")) j["resumed"] = f.attr_json("resumed");
  if (f.has_attr("merged_from")) j["merged_from"] = f.attr_json("merged_from");
  std::vector<std::string> incomplete;
  nlohmann::ordered_json shapes;
  std::map<std::string, KindSize> sizes;
  if (f.is_group("records")) {
    const h5::Group records = f.open_group("records");
    for (const std::string& id : records.children()) {
      const h5::Group r = records.open_group(id);
      const bool complete = r.has_attr("complete") && r.attr_bool("complete");
      if (!complete) incomplete.push_back(id);
      add_sizes(r, "", sizes);
      if (shapes.empty() && complete) {
        record_shapes(r, "", shapes);
        shapes["example_record"] = id;
      }
    }
  }
  j["records"] = {{"count", summary.records}, {"complete", summary.complete}, {"incomplete", incomplete}};
  j["shapes"] = shapes;
  if (put_sizes_and_write_json(out, j, sizes, json)) return;
  const std::string what = summary.schema == "ckv.mask" ? "mask" : summary.kind;
  fmt::format_to(out, "{:<13} {} ({}, schema {} version {})\n", what, path, human(j["size_bytes"].get<int64_t>()),
                 summary.schema, j["schema_version"].get<int64_t>());
  for (const auto& [key, value] : prov.items())
    fmt::format_to(out, "{:<13} {}\n", key, value.is_string() ? value.get<std::string>() : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  for (const char* key : {"methods", "alphas"})
    if (j.contains(key)) fmt::format_to(out, "{:<13} {}\n", key, fmt::join(j[key].get<std::vector<std::string>>(), ", "));
  fmt::format_to(out, "{:<13} {}\n", "settings", j["settings"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (j.contains("resumed")) fmt::format_to(out, "{:<13} {} time(s)\n", "resumed", j["resumed"].size());
  if (j.contains("merged_from")) fmt::format_to(out, "{:<13} {} shard file(s)\n", "merged from", j["merged_from"].size());
  fmt::format_to(out, "records       {} ({} complete{})\n", summary.records, summary.complete,
                 incomplete.empty() ? "" : fmt::format(", incomplete: {}", fmt::join(incomplete, " ")));
  if (!shapes.empty()) {
    fmt::format_to(out, "shapes (record \"{}\"):\n", shapes["example_record"].get<std::string>());
    for (const auto& [name, text] : shapes.items())
      if (name != "example_record") fmt::format_to(out, "  {:<22} {}\n", name, text.get<std::string>());
  }
  write_sizes(out, "dataset", sizes);
}

// The text form of `ckv info DUMP.h5`: the JSON form `j`, line by line.
void write_dump_text(Out out, const std::string& path, const nlohmann::ordered_json& j,
                     const std::map<std::string, KindSize>& sizes) {
  fmt::format_to(out, "dump          {} ({}, schema {})\n", path, human(j.at("size_bytes").get<int64_t>()),
                 j.at("schema_version").get<int64_t>());
  for (const auto& [key, value] : j.at("provenance").items())
    fmt::format_to(out, "{:<13} {}\n", key, value.is_string() ? value.get<std::string>() : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  if (j.contains("resumed")) fmt::format_to(out, "{:<13} {} time(s)\n", "resumed", j.at("resumed").size());
  const auto& mj = j.at("model");
  fmt::format_to(out, "model         {}: {} layers, {} heads / {} KV, d_head {}, d_model {}, vocab {}\n",
                 mj["arch"].get<std::string>(), mj["n_layer"].get<int64_t>(), mj["n_head"].get<int64_t>(),
                 mj["n_kv_head"].get<int64_t>(), mj["d_head"].get<int64_t>(), mj["d_model"].get<int64_t>(),
                 mj["vocab"].get<int64_t>());
  const auto& st = j.at("settings");
  fmt::format_to(out, "recorded      {}; {} layers; heads {}; attn rows {} (window {}); compression {}\n",
                 st["what"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), st["layers"].size(),
                 st["heads"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), st["attn_rows"].get<std::string>(),
                 st["window"].get<int64_t>(), st["compression"].get<int64_t>());
  const auto incomplete = j.at("records").at("incomplete").get<std::vector<std::string>>();
  fmt::format_to(out, "records       {} ({} complete{}), tokens min {} / median {} / max {}\n",
                 j.at("records").at("count").get<size_t>(), j.at("records").at("complete").get<size_t>(),
                 incomplete.empty() ? "" : fmt::format(", incomplete: {}", fmt::join(incomplete, " ")),
                 j.at("records").at("tokens_min").get<int64_t>(), j.at("records").at("tokens_median").get<int64_t>(),
                 j.at("records").at("tokens_max").get<int64_t>());
  const auto& shapes = j.at("shapes");
  if (!shapes.empty()) {
    fmt::format_to(out, "shapes (record \"{}\"):\n", shapes.at("example_record").get<std::string>());
    for (const auto& [name, text] : shapes.items())
      if (name != "example_record") fmt::format_to(out, "  {:<22} {}\n", name, text.get<std::string>());
  }
  write_sizes(out, "tensor", sizes);
}

// A dump: provenance, model, settings, records with their lengths and shapes, sizes.
void describe_dump(Out out, const std::string& path, const h5::File& f, bool json) {
  nlohmann::ordered_json j;
  j["file"] = path;
  j["size_bytes"] = std::filesystem::file_size(path);
  j["schema_version"] = f.attr_int("schema_version");
  const nlohmann::ordered_json prov = provenance_json(f, {"ckv_version", "git_commit", "created", "command_line", "model_path",
                                         "model_sha256", "input_file", "input_sha256", "dtype", "threads", "device",
                                         "hostname", "user"});
  j["provenance"] = prov;
  if (f.has_attr("resumed")) j["resumed"] = f.attr_json("resumed");
  const h5::Group m = f.open_group("model");
  j["model"] = {{"arch", m.attr_string("arch")},       {"n_layer", m.attr_int("n_layer")},
                {"n_head", m.attr_int("n_head")},      {"n_kv_head", m.attr_int("n_kv_head")},
                {"d_head", m.attr_int("d_head")},      {"d_model", m.attr_int("d_model")},
                {"vocab", m.attr_int("vocab")}};
  j["settings"] = f.attr_json("settings");

  std::map<std::string, KindSize> sizes;
  add_sizes(m, "model/", sizes);
  const h5::Group records = f.open_group("records");
  const std::vector<std::string> ids = records.children();
  std::vector<int64_t> lengths;
  std::vector<std::string> incomplete;
  nlohmann::ordered_json shapes;
  for (const std::string& id : ids) {
    const h5::Group r = records.open_group(id);
    const bool complete = r.has_attr("complete") && r.attr_bool("complete");
    if (!complete) incomplete.push_back(id);
    lengths.push_back(r.has_attr("n_tokens") ? r.attr_int("n_tokens") : 0);
    add_sizes(r, "", sizes);
    if (shapes.empty() && complete) {  // the first complete record shows the shapes
      for (const std::string& name : r.children())
        if (r.is_dataset(name)) shapes[name] = shape_text(r.open_dataset(name));
      const std::vector<std::string> layers = r.is_group("layers") ? r.open_group("layers").children()
                                                                   : std::vector<std::string>{};
      if (!layers.empty()) {
        const h5::Group l = r.open_group("layers/" + layers.front());
        for (const std::string& name : l.children()) shapes["layers/<l>/" + name] = shape_text(l.open_dataset(name));
      }
      shapes["example_record"] = id;
    }
  }
  std::sort(lengths.begin(), lengths.end());
  j["records"] = {{"count", ids.size()}, {"complete", ids.size() - incomplete.size()},
                  {"incomplete", incomplete},
                  {"tokens_min", lengths.empty() ? 0 : lengths.front()},
                  {"tokens_median", lengths.empty() ? 0 : lengths[lengths.size() / 2]},
                  {"tokens_max", lengths.empty() ? 0 : lengths.back()}};
  j["shapes"] = shapes;
  if (put_sizes_and_write_json(out, j, sizes, json)) return;

  write_dump_text(out, path, j, sizes);
}

}  // namespace

std::string describe_output_file(const std::string& path, bool json) {
  std::string text;
  h5::File f = h5::File::open_read(path);
  const OutputSummary summary = validate_output(f, {.read_data = true});  // "checks a file whole": its data too
  if (summary.schema == kDumpSchema) describe_dump(std::back_inserter(text), path, f, json);
  else describe_output(std::back_inserter(text), path, f, summary, json);
  return text;
}

}  // namespace ckv
