// `ckv bound` / `ckv check` on the tiny GQA model: outputs written, and every bad input
// refused with one line and a non-zero exit.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/h5.h"
#include "test_util.h"

namespace {

const std::string kBin = CKV_BINARY;
const std::string kModel = std::string(CKV_TEST_DATA_DIR) + "/models/tiny_llama_gqa";

struct CliRun {
  int status;
  std::string out;
};

// `quiet`: with -q (the files are what is checked); without, the console summary is.
CliRun run(const std::string& args, bool quiet = true) {
  const std::string cmd = kBin + (quiet ? " -q " : " ") + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  return {pclose(p), out};
}

std::string tmp_prefix(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("ckv_bound_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::string tokens_file(int n) {
  const std::string path = tmp_prefix("tokens.txt");
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) f << (i * 7 + 3) % 200 << ' ';
  return path;
}

TEST(BoundCli, WritesOutputsOnTinyModel) {
  const std::string out = tmp_prefix("ok");
  const CliRun r = run("bound --model " + kModel + " --tokens " + tokens_file(60) +
                    " --window 8 --methods 'snapkv,criticalkv(snapkv),attn,criticalkv(adakv(snapkv))' --oracle -o " +
                    out + " --force");
  ASSERT_EQ(r.status, 0) << r.out;
  // `ckv -q`: the files are written, no summary printed (the report tests read it without -q).
  EXPECT_EQ(r.out.find("Table 9 layout"), std::string::npos) << r.out;
  EXPECT_EQ(r.out, "") << r.out;
  ckv::h5::File f = ckv::h5::File::open_read(out + ".h5");
  EXPECT_EQ(f.attr_string("schema"), "ckv.bound");
  const auto ds = f.open_dataset("records/0/metrics");
  EXPECT_EQ(ds.shape().size(), 6u);
  EXPECT_EQ(ds.shape()[0], 5);  // four methods and the oracle
  EXPECT_TRUE(std::filesystem::exists(out + ".csv"));
  EXPECT_TRUE(std::filesystem::exists(out + ".json"));
  const CliRun c = run("check --model " + kModel + " --tokens " + tokens_file(60) + " --window 8 --alpha 0.25,0.5 -o " +
                    tmp_prefix("check") + " --force");
  ASSERT_EQ(c.status, 0) << c.out;
  EXPECT_EQ(c.out, "") << c.out;
}

void expect_refused(const std::string& args, const std::string& needle) {
  const CliRun r = run(args);
  EXPECT_NE(r.status, 0) << args;
  EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(BoundCli, RefusesBadInputs) {
  const std::string base = "bound --model " + kModel + " --tokens " + tokens_file(40) + " -o " + tmp_prefix("bad") + " --force ";
  expect_refused(base + "--budgets 0.2,1.5", "outside (0, 1]");
  expect_refused(base + "--budgets 0", "outside (0, 1]");
  expect_refused(base + "--keep 41", "larger than the cache");
  expect_refused(base + "--window 40", "not shorter than the context");
  expect_refused(base + "--methods 'snapkv,fancykv'", "unknown method 'fancykv'");
  expect_refused(base + "--methods 'criticalkv(snapkv'", "closing ')'");
  expect_refused("check --model " + kModel + " --tokens " + tokens_file(40) + " --alpha 0 -o " + tmp_prefix("badc") + " --force", "outside (0, 1]");
  expect_refused(base + "--shard 1/2", "sharding needs a JSONL batch (--input)");
  expect_refused(base + "--shard 2/2", "--shard");
  // Protocol flags (docs/BOUND.md "Protocol"): combinations that have no meaning.
  expect_refused(base + "--compress prompt --eval question", "--compress prompt: the question is evictable");
  expect_refused(base + "--context-end 41", "--context-end 41: outside [1, 40]");
  expect_refused(base + "--nu-min smallest", "--nu-min");
}

// The CSV and JSON are regenerated from the HDF5 file; --resume of a finished output
// analyses nothing and writes them again, equal; without --force/--resume nothing is replaced.
TEST(BoundCli, ResumeOfAFinishedOutputRewritesTheSameSummaries) {
  const std::string out = tmp_prefix("resume");
  const std::string input = "--model " + kModel + " --tokens " + tokens_file(60) + " -o " + out;
  const std::string args = "bound " + input + " --window 8";
  const CliRun first = run(args + " --force");
  ASSERT_EQ(first.status, 0) << first.out;
  const std::string csv = ckv::test::read_file(out + ".csv");
  EXPECT_NE(csv.find("\n0,\"snapkv\","), std::string::npos) << csv.substr(0, 300);
  expect_refused(args, "output exists");
  const CliRun again = run(args + " --resume");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(ckv::test::read_file(out + ".csv"), csv);
  EXPECT_EQ(ckv::h5::File::open_read(out + ".h5").attr_string("shard"), "0/1");
  expect_refused("bound " + input + " --window 9 --resume", "different settings: window");
  expect_refused("check " + input + " --window 8 --resume", "--resume of a `ckv bound` output with `ckv check`");
}

TEST(BoundCli, RefusesDumpOfAnotherModel) {
  const std::string dump = tmp_prefix("dump.h5");
  const CliRun d = run("dump --model " + kModel + " --tokens " + tokens_file(40) + " --what q,k,v -o " + dump + " --force");
  ASSERT_EQ(d.status, 0) << d.out;
  // The same dump with its own model works...
  const CliRun ok = run("bound --model " + kModel + " --dump " + dump + " --window 8 -o " + tmp_prefix("fromdump") + " --force");
  EXPECT_EQ(ok.status, 0) << ok.out;
  // ...and with another model is refused.
  const std::string other = std::string(CKV_TEST_DATA_DIR) + "/models/tiny_llama_tied";
  expect_refused("bound --model " + other + " --dump " + dump + " --window 8 -o " + tmp_prefix("other") + " --force", "sha256");
  // A dump holds no next token to evaluate.
  expect_refused("bound --model " + kModel + " --dump " + dump + " --window 8 --eval first-decode -o " +
                     tmp_prefix("decode") + " --force",
                 "--eval first-decode: a dump holds no next token");
}

// A dump that holds W_O (--what ...,wo) carries its model: bound --dump without --model gives
// the numbers bound --dump --model gives, on every family feature the analysis reads (GQA,
// GGUF rope_freqs, longrope past the original context, Gemma 3's local RoPE base and
// sliding layers), expectedattention included (it reads the rotary frequencies).
TEST(BoundCli, ADumpThatHoldsWoIsAnalysedWithoutItsModel) {
  const std::string dir = std::string(CKV_TEST_DATA_DIR) + "/models/";
  for (const auto& [model, n] : std::vector<std::pair<std::string, int>>{
           {"tiny_llama_gqa", 40}, {"tiny_llama3_rope.gguf", 40}, {"tiny_phi3_full_rotary", 60}, {"tiny_gemma3_kv", 20}}) {
    SCOPED_TRACE(model);
    const std::string dump = tmp_prefix(model + "_wo.h5");
    const CliRun d = run("dump --model " + dir + model + " --tokens " + tokens_file(n) + " --what q,k,v,wo -o " + dump +
                         " --force");
    ASSERT_EQ(d.status, 0) << d.out;
    const std::string args = " --dump " + dump + " --window 4 --budgets 0.3,0.6 --methods "
                             "'snapkv,criticalkv(snapkv),expectedattention,criticalkv(expectedattention)' --force -o ";
    const CliRun with = run("bound --model " + dir + model + args + tmp_prefix("with"));
    ASSERT_EQ(with.status, 0) << with.out;
    const CliRun free = run("bound" + args + tmp_prefix("free"));
    ASSERT_EQ(free.status, 0) << free.out;
    const std::string csv = ckv::test::read_file(tmp_prefix("with") + ".csv");
    EXPECT_GT(std::count(csv.begin(), csv.end(), '\n'), 10);
    EXPECT_EQ(ckv::test::read_file(tmp_prefix("free") + ".csv"), csv);
    const auto sha = [&](const std::string& p) { return ckv::h5::File::open_read(p + ".h5").attr_string("model_sha256"); };
    EXPECT_EQ(sha(tmp_prefix("free")), sha(tmp_prefix("with")));
  }
}

// `--budgets 20%` is the fraction 0.2 everywhere it is shown: Table 9's rows and the JSON
// (the report once parsed the settings' text with stod and printed 2000%).
TEST(BoundCli, PercentBudgetsAreShownAsGiven) {
  const std::string out = tmp_prefix("percent");
  const CliRun r = run("bound --model " + kModel + " --tokens " + tokens_file(60) +
                       " --window 8 --budgets 20%,0.1 -o " + out + " --force", /*quiet=*/false);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("2000%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("       20%"), std::string::npos) << r.out;
  const std::string summary = ckv::test::read_file(out + ".json");
  EXPECT_NE(summary.find("\"budget\": \"20%\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"fraction\": 0.2"), std::string::npos) << summary;
}

// A damaged or hostile /model of a dump analysed without --model: one line naming it.
TEST(BoundCli, ADumpsDamagedModelIsOneFormatError) {
  const std::string src = tmp_prefix("wo_src.h5");
  ASSERT_EQ(run("dump --model " + kModel + " --tokens " + tokens_file(40) + " --what q,k,v,wo -o " + src + " --force").status, 0);
  const auto damaged = [&](const std::string& name, const std::function<void(ckv::h5::File&)>& edit) {
    const std::string path = tmp_prefix(name);
    std::filesystem::copy_file(src, path, std::filesystem::copy_options::overwrite_existing);
    ckv::h5::File f = ckv::h5::File::open_rw(path);
    edit(f);
    f.close();
    return "bound --window 8 -o " + tmp_prefix("damaged") + " --force --dump " + path;
  };
  expect_refused(damaged("one_wo.h5", [](ckv::h5::File& f) { f.open_group("model/layers/1").remove("W_O"); }),
                 "W_O is stored for layers 0 but not for layer 1");
  expect_refused(damaged("wide.h5", [](ckv::h5::File& f) { f.open_group("model").set_attr_int("n_head", 3); }),
                 "invalid config");
  expect_refused(damaged("slide.h5", [](ckv::h5::File& f) { f.open_group("model").set_attr_json("sliding_layers", nlohmann::json::array({7})); }),
                 "sliding_layers holds 7");
  expect_refused(damaged("rope.h5", [](ckv::h5::File& f) { f.open_group("model").set_attr_json("rope_scaling", "x"); }),
                 "rope_scaling is not an object");
}

// A dump that lacks what the metrics need is refused, naming the `ckv dump` flag that records it.
TEST(BoundCli, RefusesDumpMissingWhatTheMetricsNeed) {
  const std::string tokens = tokens_file(40);
  const auto dump_with = [&](const std::string& name, const std::string& flags) {
    const std::string path = tmp_prefix(name);
    const CliRun d = run("dump --model " + kModel + " --tokens " + tokens + " " + flags + " -o " + path + " --force");
    EXPECT_EQ(d.status, 0) << d.out;
    return path;
  };
  const std::string bound = "bound --model " + kModel + " --window 8 -o " + tmp_prefix("missing") + " --force --dump ";
  expect_refused(bound + dump_with("no_v.h5", "--what q,k"), "the dump lacks v (record it with `ckv dump --what q,k,v");
  expect_refused(bound + dump_with("some_heads.h5", "--what q,k,v --heads 0-1"), "`ckv dump --heads all`");
  expect_refused(bound + dump_with("one_layer.h5", "--what q,k,v --layers 0"), "layer 1 is not in the dump (`ckv dump --layers");
}

}  // namespace

namespace {

// kept_count [method, budget, layer, kv_head] of a one-budget run.
std::vector<int64_t> kept_counts(const std::string& prefix) {
  ckv::h5::File f = ckv::h5::File::open_read(prefix + ".h5");
  return f.open_dataset("records/0/kept_count").read<int64_t>();
}

TEST(BoundCli, LayerGlobalMethodsAllocateOverAllLayers) {
  // tiny_llama_gqa: 2 layers x 2 KV heads; c = 60, budget int(60 * 0.3) = 18 per KV head.
  const std::string all = tmp_prefix("global_all"), one = tmp_prefix("global_one");
  const std::string common = "bound --model " + kModel + " --tokens " + tokens_file(60) +
                             " --window 8 --budgets 0.3 --methods 'defensivekv,layer-defensivekv,pyramidkv' ";
  const CliRun r = run(common + "-o " + all + " --force");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<int64_t> k = kept_counts(all);  // [3 methods, 1, 2 layers, 2 kv heads]
  ASSERT_EQ(k.size(), 12u);
  // defensivekv and pyramidkv (below beta * window: uniform) keep b * n_kv_head per layer.
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(k[static_cast<size_t>(l * 2)] + k[static_cast<size_t>(l * 2 + 1)], 36) << "defensivekv layer " << l;
    EXPECT_EQ(k[static_cast<size_t>(8 + l * 2)], 18);
  }
  // layer-defensivekv shares b * n_kv_head * n_layer among the layers.
  EXPECT_EQ(k[4] + k[5] + k[6] + k[7], 72);
  // The allocation is over all the model's layers whatever --layers says.
  const CliRun r1 = run(common + "--layers 1 -o " + one + " --force");
  ASSERT_EQ(r1.status, 0) << r1.out;
  const std::vector<int64_t> k1 = kept_counts(one);  // [3, 1, 1 layer, 2]
  ASSERT_EQ(k1.size(), 6u);
  EXPECT_EQ(k1[2], k[6]);
  EXPECT_EQ(k1[3], k[7]);
  ckv::h5::File fa = ckv::h5::File::open_read(all + ".h5"), f1 = ckv::h5::File::open_read(one + ".h5");
  const std::vector<int32_t> ma = fa.open_dataset("records/0/kept_mask").read<int32_t>();  // [3, 1, 2, 2, 60]
  const std::vector<int32_t> m1 = f1.open_dataset("records/0/kept_mask").read<int32_t>();  // [3, 1, 1, 2, 60]
  EXPECT_EQ(std::vector<int32_t>(m1.begin() + 120, m1.begin() + 240),
            std::vector<int32_t>(ma.begin() + 240 + 120, ma.begin() + 480));
}

TEST(BoundCli, RefusesCompositionsOfDefensiveKv) {
  for (const char* m : {"criticalkv(defensivekv)", "adakv(layer-defensivekv)"}) {
    const CliRun r = run("bound --model " + kModel + " --tokens " + tokens_file(60) + " --window 8 --methods '" + m +
                         "' -o " + tmp_prefix("bad") + " --force");
    EXPECT_EQ(r.status >> 8, 2) << r.out;  // a flag error
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find("has its own stages and allocation"), std::string::npos) << r.out;
  }
  const CliRun k = run("bound --model " + kModel + " --tokens " + tokens_file(60) +
                       " --window 8 --methods defensivekv --defensive-kernel 4 -o " + tmp_prefix("bad") + " --force");
  EXPECT_EQ(k.status >> 8, 2) << k.out;
  EXPECT_NE(k.out.find("--defensive-kernel 4"), std::string::npos) << k.out;
  // duoattention: a pattern is required, and it must be a rectangle of numbers of the
  // model's shape (2 layers x 2 KV heads).
  const std::string pattern = tmp_prefix("duo.tsv");
  const auto duo = [&](const std::string& text, const std::string& flags) {
    std::ofstream(pattern) << text;
    return run("bound --model " + kModel + " --tokens " + tokens_file(60) + " --window 8 --methods duoattention " +
               flags + " -o " + tmp_prefix("duo") + " --force");
  };
  for (const auto& [text, flags, needle] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"", "", "needs --duo-pattern"},
           {"0.1\t0.9\n0.5\n", "--duo-pattern " + pattern, "line 2 has 1 scores"},
           {"0.1\tx\n", "--duo-pattern " + pattern, "'x' is not a number"},
           {"0.1\t0.9\n", "--duo-pattern " + pattern, "1 layers x 2 KV heads, the model has 2 x 2"}}) {
    const CliRun r = duo(text, flags);
    EXPECT_EQ(r.status >> 8, flags.empty() ? 2 : 1) << r.out;  // a missing flag, or a bad file
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_NE(r.out.find(needle), std::string::npos) << r.out;
  }
  const CliRun ok = duo("0.1\t0.9\n0.8\t0.2\n", "--duo-pattern " + pattern + " --duo-sink 4 --duo-recent 8");
  EXPECT_EQ(ok.status, 0) << ok.out;
}

TEST(BoundCli, ExpectedAttentionInBoundAndCheck) {
  const std::string out = tmp_prefix("ea");
  const CliRun r = run("bound --model " + kModel + " --tokens " + tokens_file(60) +
                       " --window 8 --budgets 0.3 --methods 'expectedattention,criticalkv(adakv(expectedattention))' -o " +
                       out + " --force");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<int64_t> k = kept_counts(out);  // [2 methods, 1, 2 layers, 2 kv heads]
  ASSERT_EQ(k.size(), 8u);
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(k[static_cast<size_t>(l * 2)], 18);
    EXPECT_EQ(k[static_cast<size_t>(4 + l * 2)] + k[static_cast<size_t>(4 + l * 2 + 1)], 36);
  }
  const CliRun c = run("check --model " + kModel + " --tokens " + tokens_file(60) +
                       " --window 8 --method expectedattention --ea-no-covariance -o " + tmp_prefix("ea_check") + " --force");
  EXPECT_EQ(c.status, 0) << c.out;
  for (const auto& [flags, status, needle] : std::vector<std::tuple<std::string, int, std::string>>{
           {"--ea-future 0", 2, "--ea-future 0"},
           {"--ea-sinks -1", 2, "--ea-sinks -1"},
           {"--ea-epsilon nan", 2, "--ea-epsilon"},
           {"--ea-sinks 60", 1, "not longer than --ea-sinks 60"}}) {
    const CliRun bad = run("bound --model " + kModel + " --tokens " + tokens_file(60) +
                           " --window 8 --methods expectedattention " + flags + " -o " + tmp_prefix("ea_bad") + " --force");
    EXPECT_EQ(bad.status >> 8, status) << flags << ": " << bad.out;
    EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
    EXPECT_NE(bad.out.find(needle), std::string::npos) << bad.out;
  }
}

// A HeadKV profile for tiny_llama_gqa (2 layers x 4 query heads).
std::string headkv_profile(const std::string& scores) {
  static int count = 0;
  const std::string path = tmp_prefix("headkv" + std::to_string(count++) + ".json");
  std::ofstream(path) << R"({"format": "ckv.headkv_profile", "format_version": 1, "n_layer": 2, "n_head": 4, "scores": )"
                      << scores << "}";
  return path;
}

TEST(BoundCli, HeadKvInBoundAndCheck) {
  const std::string out = tmp_prefix("headkv");
  const std::string common = "--model " + kModel + " --tokens " + tokens_file(60) + " --window 8 ";
  const std::string profile = headkv_profile("[[0.9, 0.1, 0.0, 0.0], [0.2, 0.2, 0.3, 0.3]]");
  const CliRun r = run("bound " + common + "--budgets 0.5 --methods 'headkv,criticalkv(headkv)' --headkv-profile " +
                       profile + " -o " + out + " --force");
  ASSERT_EQ(r.status, 0) << r.out;
  // b = 30, B = 22, B // 1.2 = 18, pool 72, min 4; KV scores 0.5, 0, 0.2, 0.3 (sum 1):
  // caps 40, 4, 18, 26 (+ 8, clamped to 60) = 48, 12, 26, 34, for both methods.
  EXPECT_EQ(kept_counts(out), (std::vector<int64_t>{48, 12, 26, 34, 48, 12, 26, 34}));
  const CliRun c = run("check " + common + "--method headkv --headkv-profile " + profile + " -o " +
                       tmp_prefix("headkv_check") + " --force");
  EXPECT_EQ(c.status, 0) << c.out;
  for (const auto& [flags, status, needle] : std::vector<std::tuple<std::string, int, std::string>>{
           {"--methods headkv", 2, "'headkv' needs --headkv-profile"},
           {"--methods 'adakv(headkv)' --headkv-profile " + profile, 2, "headkv has its own per-head allocation"},
           {"--methods headkv --headkv-beta 0.5 --headkv-profile " + profile, 2, "--headkv-beta 0.5"},
           {"--methods headkv --headkv-temp 0 --headkv-profile " + profile, 2, "--headkv-temp 0"},
           {"--methods headkv --headkv-profile " + tmp_prefix("absent.json"), 1, "cannot read the HeadKV profile"},
           {"--methods headkv --headkv-profile " + headkv_profile("[[1, 2, 3, 4]]"), 1, "a list of 2 layers"},
           {"--methods headkv --headkv-profile " + headkv_profile("[[1, 2, 3, 4], [1, 2]]"), 1,
            "layer 1: expected a list of 4 head scores"},
           {"--methods headkv --headkv-profile " + headkv_profile("[[1, 2, 3, 4], [1, -2, 3, 4]]"), 1,
            "layer 1 head 1: -2 is not a finite score"},
           {"--methods headkv --headkv-profile " + headkv_profile("[[1, 2, 3, 4], [1, \"x\", 3, 4]]"), 1,
            "is not a finite score"},
           {"--methods headkv --headkv-profile " + headkv_profile("[[0, 0, 0, 0], [0, 0, 0, 0]]"), 1, "every head scores 0"},
           // Found reading the allocation for fuzz_headkv_profile: a sum that overflows to inf
           // made every share 0/inf, and shares ^ a large temp that all underflow made them 0/0
           // (NaN cast to int64).
           {"--methods headkv --headkv-profile " + headkv_profile("[[1e308, 1e308, 1e308, 1e308], [1, 2, 3, 4]]"), 1,
            "scale them down"},
           {"--methods headkv --headkv-temp 2000 --headkv-profile " + profile, 1, "underflows to 0"},
           {"--methods headkv --headkv-profile " + headkv_profile("[[1, 2, 3, 4], [1, 2, 3, 4]], \"oops\""), 1,
            "not valid JSON"}}) {
    const CliRun bad = run("bound " + common + flags + " -o " + tmp_prefix("headkv_bad") + " --force");
    EXPECT_EQ(bad.status >> 8, status) << flags << ": " << bad.out;
    EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
    EXPECT_NE(bad.out.find(needle), std::string::npos) << bad.out;
  }
  // A profile of another model's shape (3 layers) is refused once the model is known.
  const std::string wrong = tmp_prefix("headkv3.json");
  std::ofstream(wrong) << R"({"format": "ckv.headkv_profile", "format_version": 1, "n_layer": 3, "n_head": 2, "scores": [[1, 1], [1, 1], [1, 1]]})";
  const CliRun bad = run("bound " + common + "--methods headkv --headkv-profile " + wrong + " -o " +
                         tmp_prefix("headkv_bad") + " --force");
  EXPECT_EQ(bad.status >> 8, 1) << bad.out;
  EXPECT_NE(bad.out.find("3 layers x 2 heads, the model has 2 layers x 4 heads"), std::string::npos) << bad.out;
  std::ofstream(wrong) << R"({"format": "other", "format_version": 1})";
  EXPECT_NE(run("bound " + common + "--methods headkv --headkv-profile " + wrong + " -o " + tmp_prefix("x") + " --force")
                .out.find("not a HeadKV profile"),
            std::string::npos);
}

}  // namespace
