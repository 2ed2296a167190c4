// Bad input to ckv mask: spans outside the context or over the question, unknown span
// names, malformed or empty selections: each is one clear error (library and CLI).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "analysis/headkv.h"
#include "analysis/mask_plan.h"
#include "core/error.h"
#include "io/h5.h"
#include "test_dump_util.h"

namespace ckv {
namespace {

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR(expr, needle) EXPECT_NE(error_of([&] { expr; }).find(needle), std::string::npos) << error_of([&] { expr; })

TEST(MaskPlan, ParsesSpans) {
  const std::vector<SpanRange> s = parse_spans("120-140, 300-310,7", "--spans");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], (SpanRange{120, 140}));
  EXPECT_EQ(s[1], (SpanRange{300, 310}));
  EXPECT_EQ(s[2], (SpanRange{7, 8}));
  EXPECT_ERROR(parse_spans("5-3", "--spans"), "empty");
  EXPECT_ERROR(parse_spans("a-b", "--spans"), "'a-b'");
  EXPECT_ERROR(parse_spans("1-2,", "--spans"), "empty item");
  EXPECT_ERROR(parse_spans("-3", "--spans"), "--spans");
}

TEST(MaskPlan, SpansMustStayInTheContext) {
  const std::vector<int64_t> layers = {0, 1}, heads = {0, 1};
  EXPECT_ERROR(plan_from_spans({{10, 25}}, 20, 30, layers, heads, 2, 2, "--spans"), "overlaps the question");
  EXPECT_ERROR(plan_from_spans({{10, 45}}, 20, 30, layers, heads, 2, 2, "--spans"), "30 tokens");
  EXPECT_ERROR(plan_from_spans({}, 20, 30, layers, heads, 2, 2, "--spans"), "no span");
  EXPECT_ERROR(plan_from_spans({{1, 2}}, 30, 30, layers, heads, 2, 2, "--spans"), "no question");
  EXPECT_ERROR(plan_from_spans({{1, 2}}, 20, 30, {5}, heads, 2, 2, "--spans"), "layer 5");
  EXPECT_ERROR(plan_from_spans({{1, 2}}, 20, 30, layers, {}, 2, 2, "--spans"), "no KV head");
  const EvictionPlan p = plan_from_spans({{2, 5}, {4, 7}}, 20, 30, {1}, {0}, 2, 2, "--spans");
  EXPECT_EQ(p.at(1, 0), (std::vector<int64_t>{2, 3, 4, 5, 6}));
  EXPECT_TRUE(p.at(0, 0).empty());
  EXPECT_TRUE(p.at(1, 1).empty());
  const auto mask = p.to_mask(30);
  ASSERT_EQ(mask.size(), 1u);
  EXPECT_EQ(mask.at(1)[0].q_begin, 20);
  EXPECT_EQ(mask.at(1)[0].q_end, 30);
}

TEST(MaskPlan, UnknownSpanNameListsTheKnownOnes) {
  NamedSpans spans;
  spans["needle"] = {{3, 9}};
  spans["distractor"] = {{12, 15}};
  EXPECT_ERROR(named_spans(spans, "needel", "record \"q1\""), "needle");
  EXPECT_ERROR(named_spans(spans, "needel", "record \"q1\""), "no span named \"needel\"");
  EXPECT_EQ(named_spans(spans, "needle", "r").size(), 1u);
}

TEST(MaskPlan, SelectionFiles) {
  const auto dir = test::scratch_dir("mask_sel");
  const auto write = [&](const std::string& text) {
    const auto p = dir / "sel.json";
    test::write_text(p, text);
    return p;
  };
  const std::vector<int64_t> layers = {0, 1}, heads = {0, 1};
  const EvictionPlan p = plan_from_selection_file(
      write(R"({"c": 10, "layers": {"1": {"kept": [[0,1,2,3,4,5,6,7], [0,1,2,3,4,5,6,7,8,9]]}, "0": {"evicted": [[3], []]}}})"),
      10, 15, layers, heads, 2, 2);
  EXPECT_EQ(p.at(1, 0), (std::vector<int64_t>{8, 9}));
  EXPECT_TRUE(p.at(1, 1).empty());
  EXPECT_EQ(p.at(0, 0), (std::vector<int64_t>{3}));
  EXPECT_ERROR(plan_from_selection_file(write(R"({"layers": {"0": {"kept": [[], [1]]}}})"), 10, 15, layers, heads, 2, 2),
               "keeps nothing");
  EXPECT_ERROR(plan_from_selection_file(write(R"({"layers": {"0": {"kept": [[12], [1]]}}})"), 10, 15, layers, heads, 2, 2),
               "outside the context");
  EXPECT_ERROR(plan_from_selection_file(write(R"({"layers": {"0": {"kept": [[1]]}}})"), 10, 15, layers, heads, 2, 2),
               "2 KV heads");
  EXPECT_ERROR(plan_from_selection_file(write(R"({"c": 9, "layers": {}})"), 10, 15, layers, heads, 2, 2), "c = 9");
  EXPECT_ERROR(plan_from_selection_file(write(R"({"layers": {"0": {"evicted": [[], []]}}})"), 10, 15, layers, heads, 2, 2),
               "evicts nothing");
  EXPECT_ERROR(plan_from_selection_file(write("{oops"), 10, 15, layers, heads, 2, 2), "not valid JSON");
}

// The command line: one "ckv: error:" line and exit 1 (bad input) or 2 (flags that contradict).
const std::string kTiny = std::string(CKV_TEST_DATA_DIR) + "/models/tiny_llama_gqa";

void expect_error_line(const test::RunResult& r, const std::string& needle, int exit_code = 1) {
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

std::string ids(const std::filesystem::path& dir) {
  std::string t;
  for (int i = 0; i < 30; ++i) t += std::to_string((i * 37 + 11) % 256) + " ";
  test::write_text(dir / "ids.txt", t);
  return (dir / "ids.txt").string();
}

TEST(MaskCli, BadInputs) {
  const auto dir = test::scratch_dir("mask_cli");
  const std::string base = "mask -q --model " + kTiny + " --tokens " + ids(dir) + " -o " + (dir / "m.h5").string();
  expect_error_line(test::run_ckv(base + " --context-end 20 --spans 15-25"), "overlaps the question");
  expect_error_line(test::run_ckv(base + " --context-end 20 --spans 15-45"), "not inside the context");
  expect_error_line(test::run_ckv(base + " --context-end 20 --span-name needle"), "no span named \"needle\"");
  expect_error_line(test::run_ckv(base + " --context-end 20"), "exactly one of", 2);
  expect_error_line(test::run_ckv(base + " --spans 3-5"), "--context-end");
  expect_error_line(test::run_ckv(base + " --context-end 30 --spans 3-5"), "no question");
  EXPECT_FALSE(std::filesystem::exists(dir / "m.h5"));
}

TEST(MaskCli, RunsOnTheTinyModelWithPlaceboAndPhysicalCheck) {
  const auto dir = test::scratch_dir("mask_cli");
  const std::string out = (dir / "m.h5").string();
  const test::RunResult r = test::run_ckv("mask -q --model " + kTiny + " --tokens " + ids(dir) +
                                          " --context-end 20 --spans 8-11 --placebo 2 --match-tol 0.5"
                                          " --verify-physical --csv " + (dir / "m.csv").string() + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const h5::File f = h5::File::open_read(out);
  EXPECT_EQ(f.attr_string("schema"), "ckv.mask");
  const h5::Group rec = f.open_group("records/0");
  EXPECT_EQ(rec.attr_int("context_end"), 20);
  const h5::Group t = rec.open_group("runs/target");
  EXPECT_LE(t.attr_double("physical_max_diff"), 2e-6 * std::max(1.0, t.attr_double("physical_max_abs")));
  EXPECT_GE(t.attr_double("kl"), 0.0);
  EXPECT_EQ(t.open_dataset("resid_l2").shape(), (std::vector<int64_t>{2, 10}));
  EXPECT_EQ(t.open_dataset("evicted").shape(), (std::vector<int64_t>{2, 2, 20}));
  const nlohmann::json placebo = rec.attr_json("placebo");
  for (int k = 0; k < placebo["found"].get<int>(); ++k) {
    const h5::Group p = rec.open_group("runs/placebo" + std::to_string(k));
    EXPECT_LE(std::abs(p.attr_double("delta_theta_ratio") - 1), 0.5);
    EXPECT_EQ(p.attr_ints("spans")[1] - p.attr_ints("spans")[0], 3);
  }
  std::ifstream csv(dir / "m.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_EQ(header, "record,run,layer,head,position,metric,value");
}

// A model with sliding layers (tiny_qwen2_swa: layer 0 full, layer 1 window 12): the mask
// CSV says each layer's window, the bound CSV has its sliding_window column, and a method
// keeps no more than the sliding layer holds (the 11 entries of the question's window).
TEST(MaskCli, SlidingLayersAreMarkedInTheCsvFiles) {
  const auto dir = test::scratch_dir("mask_cli");
  const std::string swa = std::string(CKV_TEST_DATA_DIR) + "/models/tiny_qwen2_swa";
  const test::RunResult r = test::run_ckv("mask -q --model " + swa + " --tokens " + ids(dir) +
                                          " --context-end 24 --method snapkv --window 4 --budget 0.75 --csv " +
                                          (dir / "m.csv").string() + " -o " + (dir / "m.h5").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream csv(dir / "m.csv");
  std::map<std::string, std::string> window;  // layer -> value
  for (std::string line; std::getline(csv, line);)
    if (line.find(",sliding_window,") != std::string::npos && line.find(",target,") != std::string::npos) {
      const std::string layer = line.substr(line.find(",target,") + 8, 1);
      window[layer] = line.substr(line.rfind(',') + 1);
    }
  EXPECT_EQ(window, (std::map<std::string, std::string>{{"0", "0"}, {"1", "12"}}));
  const h5::Group t = h5::File::open_read(dir / "m.h5").open_group("records/0/runs/target");
  const std::vector<uint8_t> evicted = t.open_dataset("evicted").read<uint8_t>();  // [layer, kv_head, c]
  for (int64_t g = 0; g < 2; ++g) {
    int64_t kept0 = 0, kept1 = 0;
    for (int64_t i = 0; i < 24; ++i) {
      kept0 += evicted[static_cast<size_t>(g * 24 + i)] ? 0 : 1;
      kept1 += evicted[static_cast<size_t>((2 + g) * 24 + i)] ? 0 : 1;
    }
    EXPECT_EQ(kept0, 18);  // 0.75 of 24
    EXPECT_EQ(kept1, 11);  // what layer 1's window holds for the question
  }
  const test::RunResult b = test::run_ckv("bound -q --model " + swa + " --tokens " + ids(dir) +
                                          " --context-end 24 --methods snapkv --window 4 --budgets 0.5 -o " +
                                          (dir / "b").string());
  ASSERT_EQ(b.exit_code, 0) << b.output;
  std::ifstream bcsv(dir / "b.csv");
  std::string header, row;
  std::getline(bcsv, header);
  EXPECT_NE(header.find(",below_window,sliding_window,L1,"), std::string::npos) << header;
  std::set<std::string> columns;
  while (std::getline(bcsv, row)) {
    std::vector<std::string> cells;
    for (size_t at = 0, next; at <= row.size(); at = next + 1) {
      next = row.find(',', at);
      if (next == std::string::npos) next = row.size();
      cells.push_back(row.substr(at, next - at));
    }
    columns.insert(cells.at(3) + ":" + cells.at(11));  // layer:sliding_window
  }
  EXPECT_EQ(columns, (std::set<std::string>{"0:0", "1:12"}));
}

// --compare runs a second method at the same budget beside --method: its run equals the
// target of a separate `--method` run of that method, and the console shows both per layer.
TEST(MaskCli, CompareRunEqualsTheSeparateMethodRun) {
  const auto dir = test::scratch_dir("mask_cli");
  const std::string base = "mask --model " + kTiny + " --tokens " + ids(dir) + " --context-end 20 --window 4 --kernel 3 --budget 0.5";
  const test::RunResult pair = test::run_ckv(base + " --method snapkv --compare 'criticalkv(snapkv)' -o " + (dir / "pair.h5").string());
  ASSERT_EQ(pair.exit_code, 0) << pair.output;
  EXPECT_NE(pair.output.find("compare_L2  reduction"), std::string::npos) << pair.output;
  const test::RunResult single = test::run_ckv("-q " + base + " --method 'criticalkv(snapkv)' -o " + (dir / "single.h5").string());
  ASSERT_EQ(single.exit_code, 0) << single.output;
  const test::RunResult base_only = test::run_ckv("-q " + base + " --method snapkv -o " + (dir / "base.h5").string());
  ASSERT_EQ(base_only.exit_code, 0) << base_only.output;
  const h5::File p = h5::File::open_read((dir / "pair.h5").string());
  const h5::File s = h5::File::open_read((dir / "single.h5").string());
  const h5::File b = h5::File::open_read((dir / "base.h5").string());
  const auto read = [](const h5::File& f, const std::string& run, const std::string& what) {
    return f.open_group("records/0/runs/" + run).open_dataset(what).read<double>();
  };
  for (const char* what : {"resid_l1", "resid_l2", "evicted"}) {
    EXPECT_EQ(read(p, "compare", what), read(s, "target", what)) << what;
    EXPECT_EQ(read(p, "target", what), read(b, "target", what)) << what;
  }
  EXPECT_NE(read(p, "compare", "evicted"), read(p, "target", "evicted"));  // the methods differ here
  expect_error_line(test::run_ckv("mask -q --model " + kTiny + " --tokens " + ids(dir) +
                                  " --context-end 20 --spans 3-5 --compare snapkv -o " + (dir / "x.h5").string()),
                    "--compare needs --method", 2);
}


// The context-only selections of `mask --method` equal `bound`'s on the context alone (its
// rows are the same with or without the question), including layer-defensivekv, whose
// layer budgets come from a pre-pass over all layers.
TEST(MaskCli, LayerGlobalMethodEvictsWhatBoundKeeps) {
  const auto dir = test::scratch_dir("mask_cli");
  std::string context;
  for (int i = 0; i < 24; ++i) context += std::to_string((i * 37 + 11) % 256) + " ";
  test::write_text(dir / "context.txt", context);
  const test::RunResult b = test::run_ckv("-q bound --model " + kTiny + " --tokens " + (dir / "context.txt").string() +
                                          " --window 4 --budgets 0.5 --methods 'defensivekv,layer-defensivekv,pyramidkv' -o " +
                                          (dir / "ctx").string() + " --force");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const h5::File bf = h5::File::open_read((dir / "ctx.h5").string());
  const std::vector<int32_t> kept = bf.open_dataset("records/0/kept_mask").read<int32_t>();  // [3, 1, 2, 2, 24]
  const char* methods[] = {"defensivekv", "layer-defensivekv", "pyramidkv"};
  for (int m = 0; m < 3; ++m) {
    const std::string out = (dir / (std::string("m") + std::to_string(m) + ".h5")).string();
    const test::RunResult r = test::run_ckv("-q mask --model " + kTiny + " --tokens " + ids(dir) +
                                            " --context-end 24 --window 4 --budget 0.5 --method " + methods[m] + " -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<int32_t> evicted =
        h5::File::open_read(out).open_group("records/0/runs/target").open_dataset("evicted").read<int32_t>();  // [2, 2, 24]
    ASSERT_EQ(evicted.size(), 96u);
    for (size_t i = 0; i < evicted.size(); ++i)
      EXPECT_EQ(evicted[i], 1 - kept[static_cast<size_t>(m) * 96 + i]) << methods[m] << " entry " << i;
  }
}

// ExpectedAttention and its compositions: `mask --method` evicts exactly what `bound` keeps
// on the context (its statistics read only the context's queries, keys and values).
TEST(MaskCli, ExpectedAttentionEvictsWhatBoundKeeps) {
  const auto dir = test::scratch_dir("mask_cli_ea");
  std::string context;
  for (int i = 0; i < 24; ++i) context += std::to_string((i * 37 + 11) % 256) + " ";
  test::write_text(dir / "context.txt", context);
  const char* methods[] = {"expectedattention", "adakv(expectedattention)", "criticalkv(expectedattention)"};
  const test::RunResult b =
      test::run_ckv("-q bound --model " + kTiny + " --tokens " + (dir / "context.txt").string() +
                    " --window 4 --budgets 0.5 --ea-future 64 --methods 'expectedattention,adakv(expectedattention),"
                    "criticalkv(expectedattention)' -o " + (dir / "ctx").string() + " --force");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<int32_t> kept =
      h5::File::open_read((dir / "ctx.h5").string()).open_dataset("records/0/kept_mask").read<int32_t>();  // [3, 1, 2, 2, 24]
  ASSERT_EQ(kept.size(), 3u * 96u);
  for (int m = 0; m < 3; ++m) {
    const std::string out = (dir / (std::string("m") + std::to_string(m) + ".h5")).string();
    const test::RunResult r = test::run_ckv("-q mask --model " + kTiny + " --tokens " + ids(dir) +
                                            " --context-end 24 --ea-future 64 --budget 0.5 --method '" + methods[m] +
                                            "' -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<int32_t> evicted =
        h5::File::open_read(out).open_group("records/0/runs/target").open_dataset("evicted").read<int32_t>();  // [2, 2, 24]
    ASSERT_EQ(evicted.size(), 96u);
    for (size_t i = 0; i < evicted.size(); ++i)
      EXPECT_EQ(evicted[i], 1 - kept[static_cast<size_t>(m) * 96 + i]) << methods[m] << " entry " << i;
    // The 4 sinks are never evicted.
    for (size_t g = 0; g < 4; ++g)
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(evicted[g * 24 + i], 0) << methods[m];
  }
  expect_error_line(test::run_ckv("-q mask --model " + kTiny + " --tokens " + ids(dir) +
                                  " --context-end 24 --budget 0.5 --method expectedattention --ea-sinks 24 -o " +
                                  (dir / "x.h5").string()),
                    "not longer than --ea-sinks 24");
}

TEST(MaskCli, HeadKvEvictsWhatBoundKeeps) {
  const auto dir = test::scratch_dir("mask_cli_headkv");
  std::string context;
  for (int i = 0; i < 24; ++i) context += std::to_string((i * 37 + 11) % 256) + " ";
  test::write_text(dir / "context.txt", context);
  test::write_text(dir / "profile.json", R"({"format": "ckv.headkv_profile", "format_version": 1, "n_layer": 2,
                   "n_head": 2, "scores": [[0.7, 0.1], [0.0, 0.2]]})");
  const std::string profile = " --headkv-profile " + (dir / "profile.json").string();
  const test::RunResult b = test::run_ckv("-q bound --model " + kTiny + " --tokens " + (dir / "context.txt").string() +
                                          " --window 4 --budgets 0.5 --methods headkv" + profile + " -o " +
                                          (dir / "ctx").string() + " --force");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<int32_t> kept =
      h5::File::open_read((dir / "ctx.h5").string()).open_dataset("records/0/kept_mask").read<int32_t>();  // [1, 1, 2, 2, 24]
  ASSERT_EQ(kept.size(), 96u);
  const std::string out = (dir / "m.h5").string();
  const test::RunResult r = test::run_ckv("-q mask --model " + kTiny + " --tokens " + ids(dir) +
                                          " --context-end 24 --window 4 --budget 0.5 --method headkv" + profile + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<int32_t> evicted =
      h5::File::open_read(out).open_group("records/0/runs/target").open_dataset("evicted").read<int32_t>();  // [2, 2, 24]
  ASSERT_EQ(evicted.size(), 96u);
  int kept_total = 0;
  for (size_t i = 0; i < evicted.size(); ++i) {
    EXPECT_EQ(evicted[i], 1 - kept[i]) << "entry " << i;
    kept_total += kept[i];
  }
  // b = 12, B = 8, B // 1.2 = 6, pool 24, min 2: caps 19, 4, 2, 7 (+ 4, clamped to 24) = 23, 8, 6, 11.
  EXPECT_EQ(kept_total, 23 + 8 + 6 + 11);
  expect_error_line(test::run_ckv("-q mask --model " + kTiny + " --tokens " + ids(dir) +
                                  " --context-end 24 --budget 0.5 --method headkv -o " + out),
                    "'headkv' needs --headkv-profile", 2);
}

// `ckv profile` on `ckv niah` records of the default model: a [30][9] retrieval profile
// that `--headkv-profile` reads; records without an answer or needle are refused.
TEST(ProfileCli, RetrievalProfileOfTheDefaultModel) {
  const std::string model = test::default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  const auto dir = test::scratch_dir("profile_cli");
  const std::string niah = (dir / "niah.jsonl").string(), out = (dir / "p.json").string();
  ASSERT_EQ(test::run_ckv("-q niah --model " + model + " --length 300 --count 2 --seed 3 -o " + niah + " --force").exit_code, 0);
  const test::RunResult r = test::run_ckv("-q profile -t 2 --model " + model + " -i " + niah + " -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["format"], "ckv.headkv_profile");
  EXPECT_EQ(j["records"], 2);
  ASSERT_EQ(j["scores"].size(), 30u);
  double total = 0;
  for (const auto& layer : j["scores"]) {
    ASSERT_EQ(layer.size(), 9u);
    for (const auto& x : layer) {
      EXPECT_GE(x.get<double>(), 0.0);
      total += x.get<double>();
    }
  }
  EXPECT_GT(total, 0.0);  // some head copies the needle's digits
  EXPECT_EQ(read_headkv_profile(out).size(), 30u);
  expect_error_line(test::run_ckv("-q profile --model " + model + " -i " + niah + " -o " + out), "exists", 1);
  expect_error_line(test::run_ckv("-q profile --model " + model + " -i " + niah + " --span distractor2 -o " + out +
                                  " --force"),
                    "no span named \"distractor2\"");
  test::write_text(dir / "noanswer.jsonl", R"({"id": "a", "context": "One two three.", "spans": {"needle": [[4, 7]]}})" "\n");
  expect_error_line(test::run_ckv("-q profile --model " + model + " -i " + (dir / "noanswer.jsonl").string() + " -o " +
                                  out + " --force"),
                    "record \"a\": no \"answer\"");
}

// OBCache on SnapKV's window and its compositions: `mask --method` evicts what `bound` keeps.
TEST(MaskCli, ObcacheEvictsWhatBoundKeeps) {
  const auto dir = test::scratch_dir("mask_cli_obc");
  std::string context;
  for (int i = 0; i < 24; ++i) context += std::to_string((i * 37 + 11) % 256) + " ";
  test::write_text(dir / "context.txt", context);
  const char* methods[] = {"obcache", "adakv(obcache)", "criticalkv(obcache)"};
  const test::RunResult b =
      test::run_ckv("-q bound --model " + kTiny + " --tokens " + (dir / "context.txt").string() +
                    " --window 4 --budgets 0.5 --methods 'obcache,adakv(obcache),criticalkv(obcache)' -o " +
                    (dir / "ctx").string() + " --force");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const std::vector<int32_t> kept =
      h5::File::open_read((dir / "ctx.h5").string()).open_dataset("records/0/kept_mask").read<int32_t>();  // [3, 1, 2, 2, 24]
  ASSERT_EQ(kept.size(), 3u * 96u);
  for (int m = 0; m < 3; ++m) {
    const std::string out = (dir / (std::string("m") + std::to_string(m) + ".h5")).string();
    const test::RunResult r = test::run_ckv("-q mask --model " + kTiny + " --tokens " + ids(dir) +
                                            " --context-end 24 --window 4 --budget 0.5 --method '" + methods[m] +
                                            "' -o " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::vector<int32_t> evicted =
        h5::File::open_read(out).open_group("records/0/runs/target").open_dataset("evicted").read<int32_t>();  // [2, 2, 24]
    ASSERT_EQ(evicted.size(), 96u);
    for (size_t i = 0; i < evicted.size(); ++i)
      EXPECT_EQ(evicted[i], 1 - kept[static_cast<size_t>(m) * 96 + i]) << methods[m] << " entry " << i;
  }
  // The key score alone selects through `check` too; an unknown score is a flag error.
  EXPECT_EQ(test::run_ckv("-q check --model " + kTiny + " --tokens " + (dir / "context.txt").string() +
                          " --window 4 --method obcache --obcache-score key -o " + (dir / "chk").string() + " --force")
                .exit_code,
            0);
  expect_error_line(test::run_ckv("-q mask --model " + kTiny + " --tokens " + ids(dir) +
                                  " --context-end 24 --budget 0.5 --method obcache --obcache-score both -o " +
                                  (dir / "x.h5").string()),
                    "--obcache-score", 2);
}

}  // namespace
}  // namespace ckv
