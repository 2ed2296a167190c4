// The one registration of the selection parameters (analysis/selection_params.h): every
// entry is a flag of bound, check, mask and eval, each value outside its range is refused
// naming its flag, and an output's settings hold every parameter by its key with the value
// given on the command line.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/selection_params.h"
#include "core/error.h"
#include "io/h5.h"
#include "test_dump_util.h"

namespace ckv::test {
namespace {

using Type = SelectionParam::Type;

TEST(SelectionParams, EveryParameterIsAFlagOfEverySelectionSubcommand) {
  size_t entries = 0;
  for (const std::string sub : {"bound", "check", "mask", "eval"}) {
    const RunResult r = run_ckv(sub + " --help");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const SelectionParam& s : selection_param_table()) {
      // check sweeps its own --alpha list and ranks, it evicts no selection file.
      const bool absent = sub == "check" && (s.key == "alpha" || s.key == "selection_file");
      if (absent) continue;
      EXPECT_NE(r.output.find(std::string(s.flag) + " "), std::string::npos) << sub << " lacks " << s.flag;
      // Its help text is the registered one (the first words, before CLI11 wraps the line).
      EXPECT_NE(r.output.find(std::string(s.help.substr(0, 24))), std::string::npos) << sub << " " << s.flag;
      ++entries;
    }
  }
  EXPECT_GE(entries, 4 * 26 - 2u);
}

TEST(SelectionParams, KeysAndFlagsAreUnique) {
  std::set<std::string_view> keys, flags;
  for (const SelectionParam& s : selection_param_table()) {
    EXPECT_TRUE(keys.insert(s.key).second) << s.key;
    EXPECT_TRUE(flags.insert(s.flag).second) << s.flag;
    EXPECT_EQ(find_selection_param(s.key), &s);
    EXPECT_EQ(find_selection_param(s.flag), &s);
  }
  EXPECT_EQ(find_selection_param("--windw"), nullptr);
}

// One value past each end of each number parameter's range (and an even count where odd is
// asked, and NaN) is refused with "<flag> <value>: ..."; the defaults and the ends pass.
TEST(SelectionParams, EveryValueOutsideItsRangeIsRefusedNamingItsFlag) {
  const SelectionParams defaults;
  EXPECT_NO_THROW(validate_selection_params(defaults));
  int refused = 0;
  for (const SelectionParam& s : selection_param_table()) {
    if (s.type != Type::Count && s.type != Type::Number) continue;
    const ParamRange& r = s.range;
    std::vector<double> bad, good;
    const double step = s.type == Type::Count ? 1 : 1e-9;
    if (std::isfinite(r.lo)) {
      bad.push_back(r.lo_open ? r.lo : r.lo - step);
      if (!r.lo_open && (!r.odd || std::fmod(r.lo, 2) != 0)) good.push_back(r.lo);
    }
    if (std::isfinite(r.hi)) {
      bad.push_back(r.hi_open ? r.hi : r.hi + step * (r.odd ? 2 : 1));
      if (!r.hi_open) good.push_back(r.hi);
    }
    if (r.odd) bad.push_back(r.lo + 1);
    if (s.type == Type::Number) bad.push_back(std::numeric_limits<double>::quiet_NaN());
    for (const double x : bad) {
      SelectionParams p;
      if (s.type == Type::Count) p.*s.count = static_cast<int64_t>(x);
      else p.*s.number = x;
      try {
        validate_selection_params(p);
        ADD_FAILURE() << s.flag << " " << x << " was accepted";
      } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(std::string(s.flag) + " ", 0), 0u) << e.what();
        ++refused;
      }
    }
    for (const double x : good) {
      SelectionParams p;
      if (s.type == Type::Count) p.*s.count = static_cast<int64_t>(x);
      else p.*s.number = x;
      EXPECT_NO_THROW(validate_selection_params(p)) << s.flag << " " << x;
    }
  }
  EXPECT_GE(refused, 30);
}

// The messages the command line has always printed (tests/test_hostile_inputs.cpp and
// test_bound_cli.cpp check some through the binary).
TEST(SelectionParams, RangeMessagesReadAsBefore) {
  auto message = [](auto set) {
    SelectionParams p;
    set(p);
    try {
      validate_selection_params(p);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message([](SelectionParams& p) { p.window = 0; }), "--window 0: must be at least 1");
  EXPECT_EQ(message([](SelectionParams& p) { p.kernel = 4; }), "--kernel 4: must be odd, in [1, 1023]");
  EXPECT_EQ(message([](SelectionParams& p) { p.sinks = -1; }), "--sinks -1: must not be negative");
  EXPECT_EQ(message([](SelectionParams& p) { p.alpha = 0; }), "--alpha 0: outside (0, 1]");
  EXPECT_EQ(message([](SelectionParams& p) { p.alpha_safe = 1.5; }), "--alpha-safe 1.5: outside [0, 1]");
  EXPECT_EQ(message([](SelectionParams& p) { p.eps = -1; }), "--eps -1: must be finite and not negative");
  EXPECT_EQ(message([](SelectionParams& p) { p.pyramid_beta = 0.5; }), "--pyramid-beta 0.5: must be finite and at least 1");
  EXPECT_EQ(message([](SelectionParams& p) { p.headkv_temp = 0; }), "--headkv-temp 0: must be finite and positive");
  EXPECT_EQ(message([](SelectionParams& p) { p.ea_future = 0; }), "--ea-future 0: must be in [1, 1048576]");
}

TEST(SelectionParams, SettingsHoldEveryParameterWithTheValueGiven) {
  const fs::path dir = scratch_dir("ckv_selection_params");
  write_text(dir / "ids.txt", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24");
  const std::string model = std::string(CKV_TEST_DATA_DIR) + "/models/tiny_llama_gqa";
  const RunResult r = run_ckv("-q bound --model " + model + " --tokens " + (dir / "ids.txt").string() +
                              " --window 4 --methods pyramidkv --pyramid-beta 3 --obcache-score key --ea-no-vnorm"
                              " --defensive-share window --alpha-safe 0.25 -o " + (dir / "b").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json s = h5::File::open_read((dir / "b.h5").string()).attr_json("settings");
  for (const SelectionParam& p : selection_param_table()) EXPECT_TRUE(s.contains(std::string(p.key))) << p.key;
  EXPECT_EQ(s.at("window"), 4);
  EXPECT_EQ(s.at("pyramid_beta"), 3.0);
  EXPECT_EQ(s.at("obcache_score"), "key");
  EXPECT_EQ(s.at("ea_vnorm"), false);
  EXPECT_EQ(s.at("ea_covariance"), true);
  EXPECT_EQ(s.at("defensive_share"), "window");
  EXPECT_EQ(s.at("alpha_safe"), 0.25);
  EXPECT_EQ(s.at("pool"), "max");
  EXPECT_EQ(s.at("duo_pattern"), "");
  fs::remove_all(dir);
}

TEST(SelectionParams, AnUnknownChoiceIsOneUsageLine) {
  const RunResult r = run_ckv("bound --model x --tokens x --obcache-score both");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--obcache-score"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
}

}  // namespace
}  // namespace ckv::test
