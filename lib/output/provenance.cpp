#include "output/provenance.h"

#include <pwd.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ckv/version.h"
#include "core/error.h"
#include "io/h5.h"
#include "model/config.h"

namespace ckv {

namespace {

constexpr std::array<std::string_view, 8> kFixedKeys = {"ckv_version", "git_commit", "command_line",
                                                        "hostname",    "user",       "created",
                                                        "threads",     "device"};

std::string host_name() {
  std::array<char, 256> buffer{};
  if (::gethostname(buffer.data(), buffer.size() - 1) != 0) return "unknown";
  return buffer.data();
}

std::string user_name() {
  if (const char* user = std::getenv("USER"); user != nullptr && user[0] != '\0') return user;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr)
    return pw->pw_name;
  return "unknown";
}

void write_value(h5::Object& object, const std::string& key, const nlohmann::json& value) {
  if (value.is_string()) {
    object.set_attr_string(key, value.get<std::string>());
  } else if (value.is_boolean()) {
    object.set_attr_bool(key, value.get<bool>());
  } else if (value.is_number_integer()) {
    object.set_attr_int(key, value.get<int64_t>());
  } else if (value.is_number_float()) {
    object.set_attr_double(key, value.get<double>());
  } else {
    object.set_attr_json(key, value);  // arrays, objects, null
  }
}

}  // namespace

std::string shell_quote(std::string_view arg) {
  if (arg.empty()) return "''";
  bool safe = true;
  for (const char c : arg) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       std::string_view("@%+=:,./-_").find(c) != std::string_view::npos;
    safe = safe && plain;
  }
  if (safe) return std::string(arg);
  std::string quoted = "'";
  for (const char c : arg) {
    if (c == '\'') {
      quoted += "'\"'\"'";  // close, a quoted quote, reopen
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::string join_command_line(int argc, const char* const* argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) line += ' ';
    line += shell_quote(argv[i] != nullptr ? argv[i] : "");
  }
  return line;
}

std::string iso8601_utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  std::array<char, 32> buffer{};
  std::strftime(buffer.data(), buffer.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer.data();
}

Provenance Provenance::capture(int argc, const char* const* argv, int64_t threads,
                               std::string device) {
  Provenance p;
  p.ckv_version = kVersion;
  p.git_commit = kGitCommit;
  p.command_line = join_command_line(argc, argv);
  p.hostname = host_name();
  p.user = user_name();
  p.created = iso8601_utc_now();
  p.threads = threads;
  p.device = std::move(device);
  return p;
}

void Provenance::set(std::string_view key, nlohmann::json value) {
  for (const std::string_view fixed : kFixedKeys)
    if (key == fixed) fail<Error>("provenance: '{}' is a fixed field, not an extra key", key);
  for (auto& [k, v] : extra) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  extra.emplace_back(std::string(key), std::move(value));
}

const nlohmann::json* Provenance::find(std::string_view key) const {
  for (const auto& [k, v] : extra)
    if (k == key) return &v;
  return nullptr;
}

nlohmann::ordered_json Provenance::to_json() const {
  nlohmann::ordered_json j;
  j["ckv_version"] = ckv_version;
  j["git_commit"] = git_commit;
  j["command_line"] = command_line;
  j["hostname"] = hostname;
  j["user"] = user;
  j["created"] = created;
  j["threads"] = threads;
  j["device"] = device;
  for (const auto& [k, v] : extra) j[k] = nlohmann::ordered_json::parse(v.dump());
  return j;
}

void Provenance::write_attrs(h5::Object& object) const {
  object.set_attr_string("ckv_version", ckv_version);
  object.set_attr_string("git_commit", git_commit);
  object.set_attr_string("command_line", command_line);
  object.set_attr_string("hostname", hostname);
  object.set_attr_string("user", user);
  object.set_attr_string("created", created);
  object.set_attr_int("threads", threads);
  object.set_attr_string("device", device);
  for (const auto& [k, v] : extra) write_value(object, k, v);
}

std::string set_sliding_layers(Provenance& prov, const ModelConfig& config) {
  std::vector<int64_t> layers;
  for (int64_t l = 0; l < config.n_layer; ++l)
    if (config.window_of(l) > 0) layers.push_back(l);
  if (layers.empty()) return "";
  prov.set("sliding_window", config.sliding_window);
  prov.set("sliding_layers", layers);
  return fmt::format(
      "{} of {} layers attend within a sliding window of {} keys (attribute sliding_layers: {}, CSV column "
      "sliding_window); there every method selects among the entries the window holds and keeps all of them "
      "where the budget is larger: summarise them apart from the full layers (docs/MODELS.md \"Sliding-window "
      "attention\")",
      layers.size(), config.n_layer, config.sliding_window, fmt::join(layers, " "));
}

}  // namespace ckv
