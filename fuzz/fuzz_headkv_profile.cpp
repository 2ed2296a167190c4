// HeadKV profile fuzzer: the input is the JSON file of --headkv-profile (docs/BOUND.md
// "HeadKV", the format `ckv profile` writes), read by read_headkv_profile; a profile it
// accepts then goes through everything that uses one:
//   * headkv_kv_scores for the shapes of a 2-layer model with 4 query heads and 2 or 4 KV
//     heads, and headkv_budgets of every layer at budgets below, at and above the window,
//     under two (beta, temp) settings: every kept count must lie in [0, c];
//   * `ckv bound --methods headkv,criticalkv(headkv)` through ckv's command line on the
//     tiny model of tests/data (2 layers, 4 heads, 2 KV heads) with a 24-token prompt, so
//     the profile reaches the selection and the bounds.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "analysis/headkv.h"
#include "fuzz_util.h"

namespace {

const std::string& tokens_file() {
  static const std::string path =
      ckv::fuzz::write_file("tokens.txt", "1 5 9 13 17 21 25 29 3 7 11 15 19 23 27 31 2 6 10 14 18 22 26 30\n")
          .string();
  return path;
}

void check_budgets(const std::vector<std::vector<double>>& profile, int64_t n_kv_head) {
  std::vector<std::vector<double>> kv;
  try {
    kv = ckv::headkv_kv_scores(profile, 2, 4, n_kv_head);
  } catch (const ckv::Error&) {
    return;
  }
  for (const auto& [beta, temp] : {std::pair{1.2, 1.0}, std::pair{1.005, 3.0}}) {
    ckv::SelectionParams p;
    p.window = 4;
    p.headkv_beta = beta;
    p.headkv_temp = temp;
    for (const auto& [c, budget] : {std::pair<int64_t, int64_t>{20, 2}, {20, 4}, {20, 9}, {64, 13}, {4096, 819}})
      for (int64_t layer = 0; layer < 2; ++layer) {
        std::vector<int64_t> kept;
        try {
          kept = ckv::headkv_budgets(kv, layer, c, budget, p);
        } catch (const ckv::Error&) {
          continue;
        }
        if (static_cast<int64_t>(kept.size()) != n_kv_head) std::abort();
        for (int64_t k : kept)
          if (k < 0 || k > c) {
            std::fprintf(stderr, "headkv_budgets: kept %lld outside [0, %lld]\n", static_cast<long long>(k),
                         static_cast<long long>(c));
            std::abort();
          }
      }
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
  const auto file = ckv::fuzz::write_file("profile.json", data, size);
  std::vector<std::vector<double>> profile;
  try {
    profile = ckv::read_headkv_profile(file);
  } catch (const ckv::Error&) {
    return 0;
  }
  check_budgets(profile, 2);
  check_budgets(profile, 4);
  if (profile.size() == 2 && (profile.front().size() == 4 || profile.front().size() == 2))
    (void)ckv::fuzz::run_cli({"bound", "-q", "--force", "-m", ckv::fuzz::tiny_model().string(), "--tokens",
                              tokens_file(), "--methods", "headkv,criticalkv(headkv)", "--headkv-profile",
                              file.string(), "--window", "2", "--budgets", "0.1,0.25,0.5", "-o",
                              (ckv::fuzz::work_dir() / "bound").string()});
  return 0;
}
