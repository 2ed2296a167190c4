#pragma once
// Who made an output file, from what, and how: filled once at the start of a run and
// stored in every output (as root attributes of an HDF5 file, or as JSON beside CSV/JSON
// outputs) so that a number can be traced back to its command, model and input.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ckv {
namespace h5 {
class Object;
}

struct Provenance {
  std::string ckv_version;   // ckv::kVersion
  std::string git_commit;    // ckv::kGitCommit, "unknown" outside a git checkout
  std::string command_line;  // argv joined with POSIX shell quoting: can be pasted back
  std::string hostname;
  std::string user;
  std::string created;  // ISO-8601 UTC, "2025-01-31T12:00:00Z"
  int64_t threads = 0;
  std::string device;  // "cpu", "cuda:0"
  // What the subcommand adds, in insertion order: model path and sha256, input file and
  // hash, shard identity... Values are JSON scalars, arrays or objects.
  std::vector<std::pair<std::string, nlohmann::json>> extra;

  // Fills everything but `extra` from the process and the build.
  static Provenance capture(int argc, const char* const* argv, int64_t threads, std::string device);

  // Adds or replaces an extra key. Keys must not collide with the fixed fields.
  void set(std::string_view key, nlohmann::json value);
  const nlohmann::json* find(std::string_view key) const;

  nlohmann::ordered_json to_json() const;
  // One attribute per field and extra key on the object (typically the file's root):
  // strings, integers, floats and bools as such; arrays and objects as JSON text.
  void write_attrs(h5::Object& object) const;
};

struct ModelConfig;

// A model with sliding-window layers (docs/MODELS.md "Sliding-window attention"): sets the
// extra keys `sliding_window` and `sliding_layers` (the layer indices) so that every output
// names the layers whose queries see only the last `sliding_window` keys, and returns the
// one-line console note a subcommand prints about them; "" (and no keys) without such layers.
std::string set_sliding_layers(Provenance& prov, const ModelConfig& config);

// One argument quoted for a POSIX shell when it needs it (as Python's shlex.quote).
std::string shell_quote(std::string_view arg);
std::string join_command_line(int argc, const char* const* argv);

// The current time as ISO-8601 UTC with seconds ("2025-01-31T12:00:00Z").
std::string iso8601_utc_now();

}  // namespace ckv
