// DuoAttention pattern fuzzer: the input is the TSV file of --duo-pattern (duoattention.h:
// one line per layer, a tab-separated score per KV head), read by read_duo_pattern; a pattern
// it accepts must be rectangular with scores in [0, 1], and then goes through everything
// that uses one:
//   * select_duo for a 2-layer model with 2 KV heads at budgets below, at and above the
//     window share, in every layer: every kept list must be increasing and inside [0, c);
//   * `ckv bound --methods duoattention` through ckv's command line on the tiny model of
//     tests/data (2 layers, 2 KV heads) with a 24-token prompt, so the pattern reaches the
//     selection and the bounds.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "analysis/duoattention.h"
#include "fuzz_util.h"

namespace {

const std::string& tokens_file() {
  static const std::string path =
      ckv::fuzz::write_file("tokens.txt",
                            "1 5 9 13 17 21 25 29 3 7 11 15 19 23 27 31 2 6 10 14 18 22 26 30\n")
          .string();
  return path;
}

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "duo pattern: %s\n", what);
  std::abort();
}

void check_selection(const std::vector<std::vector<double>>& pattern) {
  if (pattern.size() != 2 || pattern.front().size() != 2) return;
  ckv::SelectionParams p;
  p.window = 2;
  p.duo_sink = 2;
  p.duo_recent = 3;
  p.duo_pattern = std::make_shared<const std::vector<std::vector<double>>>(pattern);
  for (const auto& [c, budget] : {std::pair<int64_t, int64_t>{20, 1}, {20, 5}, {20, 12}, {64, 30}})
    for (int64_t layer = 0; layer < 2; ++layer) {
      ckv::SelectionInputs in;
      in.c = c;
      in.n_kv_head = 2;
      in.n_head = 4;
      in.layer = layer;
      in.n_layer = 2;
      ckv::Selection s;
      try {
        s = ckv::select_duo(in, budget, p);
      } catch (const ckv::Error&) {
        continue;
      }
      if (s.kept.size() != 2) finding("not one kept list per KV head");
      for (const auto& kept : s.kept)
        for (size_t i = 0; i < kept.size(); ++i)
          if (kept[i] < 0 || kept[i] >= c || (i > 0 && kept[i] <= kept[i - 1]))
            finding("kept position outside [0, c) or not increasing");
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckv::fuzz::silence_stdout();
  (void)tokens_file();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ckv::fuzz::clean_work_dir({"tokens.txt"});
  const auto file = ckv::fuzz::write_file("pattern.tsv", data, size);
  std::vector<std::vector<double>> pattern;
  try {
    pattern = ckv::read_duo_pattern(file);
  } catch (const ckv::Error&) {
    return 0;
  }
  if (pattern.empty()) finding("an accepted pattern without lines");
  for (const auto& row : pattern) {
    if (row.size() != pattern.front().size() || row.empty())
      finding("an accepted pattern that is not rectangular");
    for (const double x : row)
      if (!(x >= 0 && x <= 1)) finding("an accepted score outside [0, 1]");
  }
  check_selection(pattern);
  if (pattern.size() == 2 && pattern.front().size() == 2)
    (void)ckv::fuzz::run_cli({"bound",
                              "-q",
                              "--force",
                              "-m",
                              ckv::fuzz::tiny_model().string(),
                              "--tokens",
                              tokens_file(),
                              "--methods",
                              "duoattention",
                              "--duo-pattern",
                              file.string(),
                              "--window",
                              "2",
                              "--duo-sink",
                              "2",
                              "--duo-recent",
                              "3",
                              "--budgets",
                              "0.1,0.25,0.5",
                              "-o",
                              (ckv::fuzz::work_dir() / "bound").string()});
  return 0;
}
