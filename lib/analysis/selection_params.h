#pragma once
// The parameters of the selection methods (docs/BOUND.md "Selection flags"), and their one
// registration: selection_param_table() gives each one's key, type, range and help text.
// `ckv bound`, `ckv check`, `ckv mask` and `ckv eval` register their flags from it, write
// their settings from it and check the values by it (validate_selection_params); the Python
// package's ckv.bound and Model.eval take its keys as keywords. Adding a parameter is its
// member in SelectionParams and its line in the table.
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckv {

enum class PoolKind { Max, Avg };
enum class GqaReduce { Mean, Max };
// DefensiveKV (defensivekv.h): the official code's reading of the window share and of the
// value-norm normalisation, or the evident intent.
enum class DefensiveShare { BeforeWindow, Window };
enum class DefensiveNu { AcrossHeads, AcrossPositions };
// OBCache's saliency (obcache.h): of the joint key-value pair (the seed's), the key or the value.
enum class ObcacheScore { Joint, Key, Value };

struct SelectionParams {
  int64_t window = 32;  // snapkv observation window (last `window` context queries)
  PoolKind pool = PoolKind::Max;
  int64_t kernel = 7;   // snapkv pooling kernel (odd), stride 1, same length
  int64_t h2o_rows = 256;  // h2o: accumulated attention of the last rows of the context
  int64_t sinks = 4;       // streaming: first entries always kept
  double alpha = 0.5;      // criticalkv stage-1 share (docs/MATH.md §7: 0.5, not 0.25)
  double eps = 1e-4;       // criticalkv stage-2 offset
  double alpha_safe = 0.2; // adakv safeguard share
  GqaReduce gqa_reduce = GqaReduce::Mean;
  std::string selection_file;  // the 'file' method's kept positions (a path; mask_plan.h)
  int64_t defensive_kernel = 5;  // defensivekv pooling kernel (avg), as the official press
  DefensiveShare defensive_share = DefensiveShare::BeforeWindow;
  DefensiveNu defensive_nu = DefensiveNu::AcrossHeads;
  double defensive_mass = 0.9;   // defensivekv stage 1's attention-mass target (the official press: 0.9)
  double pyramid_beta = 20;  // pyramidkv: the pyramid's steepness (kvpress PyramidKVPress.beta)
  // duoattention (duoattention.h): the pattern's path, its head scores [n_layer][n_kv_head]
  // (load_selection_files reads them), and what a streaming head keeps: the first duo_sink
  // and the last duo_recent entries.
  std::string duo_pattern_path;
  std::shared_ptr<const std::vector<std::vector<double>>> duo_pattern;
  int64_t duo_sink = 128, duo_recent = 256;
  // expectedattention (expected_attention.h), kvpress ExpectedAttentionPress's defaults.
  int64_t ea_future = 512;  // n_future_positions
  int64_t ea_sinks = 4;     // n_sink
  double ea_epsilon = 0;
  bool ea_covariance = true, ea_vnorm = true;
  // headkv (headkv.h): the profile's path, the head profile [n_layer][n_head or n_kv_head]
  // (load_selection_files reads it), the pool's beta and the scores' temperature.
  std::string headkv_profile_path;
  std::shared_ptr<const std::vector<std::vector<double>>> headkv_profile;
  double headkv_beta = 1.2, headkv_temp = 1;
  ObcacheScore obcache_score = ObcacheScore::Joint;  // --obcache-score
};

// The largest snapkv pooling kernel accepted: a kernel wider than twice the context pools
// every entry over the whole context, and the cost grows with the kernel.
inline constexpr int64_t kMaxKernel = 1023;
// --ea-future: the rotation table grows with it (8 bytes per position and frequency).
inline constexpr int64_t kMaxFuture = 1 << 20;

// The values a number parameter accepts: [lo, hi], an end open where said; `odd` counts only.
struct ParamRange {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool odd = false;
};

// One selection parameter.
struct SelectionParam {
  enum class Type {
    Count,   // int64_t, in `range`
    Number,  // double, finite, in `range`
    Switch,  // bool: the flag sets the opposite of its default (--ea-no-covariance)
    Choice,  // an enum, named by `choices` in its order
    Path,    // a file's path; `load` reads it into the params
  };
  std::string_view key;   // the settings key and the Python keyword
  std::string_view flag;  // the command-line flag
  Type type;
  std::string_view help;
  ParamRange range{};
  int64_t SelectionParams::*count = nullptr;
  double SelectionParams::*number = nullptr;
  bool SelectionParams::*on = nullptr;
  std::string SelectionParams::*path = nullptr;
  std::vector<std::string_view> choices{};
  int (*get_choice)(const SelectionParams&) = nullptr;
  void (*set_choice)(SelectionParams&, int) = nullptr;
  void (*load)(SelectionParams&) = nullptr;  // Path: reads the file (InputError naming it)

  // The value as text: the number, the choice's name, the path, "true"/"false".
  std::string value_text(const SelectionParams& p) const;
  // Sets a Choice by name; UsageError naming the flag for another name.
  void set_choice_name(SelectionParams& p, std::string_view name) const;
  // UsageError "<flag> <value>: <what the range asks>" when the value is outside its range.
  void check(const SelectionParams& p) const;
};

// Every selection parameter, in the order of the help texts.
std::span<const SelectionParam> selection_param_table();
// The parameter of `key` ("alpha_safe") or of `flag` ("--alpha-safe"), or nullptr.
const SelectionParam* find_selection_param(std::string_view key_or_flag);

// The one check of the selection parameters, shared by every subcommand and the Python
// package: each value in its range (SelectionParam::check). Throws UsageError naming the flag.
void validate_selection_params(const SelectionParams& params);
// Reads the files the Path parameters name (the duoattention pattern, the headkv profile)
// into the params; an empty path reads nothing.
void load_selection_files(SelectionParams& params);

}  // namespace ckv
