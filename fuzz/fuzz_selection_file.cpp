// Selection-file fuzzer: the input is the JSON of --selection-file, read by both readers:
//   * `ckv mask`'s (plan_from_selection_file, docs/MASK.md format) for a context of 20 of
//     24 tokens in a model of 2 layers and 2 KV heads, and again for the file's own "c";
//   * `ckv bound --methods file,attn` ({"<layer>": [[positions per KV head]]}), run through
//     ckv's command line on the tiny model of tests/data (2 layers, 2 KV heads) with a
//     24-token prompt, so the positions reach the selection and the bounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "analysis/mask_plan.h"
#include "fuzz_util.h"

namespace {

const std::string& tokens_file() {
  static const std::string path =
      ckv::fuzz::write_file("tokens.txt", "1 5 9 13 17 21 25 29 3 7 11 15 19 23 27 31 2 6 10 14 18 22 26 30\n")
          .string();
  return path;
}

void mask_reader(const std::filesystem::path& file, int64_t c) {
  try {
    (void)ckv::plan_from_selection_file(file, c, c + 4, {0, 1}, {0, 1}, 2, 2);
  } catch (const ckv::Error&) {
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
  const auto file = ckv::fuzz::write_file("selection.json", data, size);
  mask_reader(file, 20);
  const auto* text = reinterpret_cast<const char*>(data);
  const nlohmann::json j = nlohmann::json::parse(text, text + size, nullptr, false);
  if (j.is_object() && j.contains("c") && j["c"].is_number_integer()) {
    const auto c = j["c"].get<int64_t>();
    if (c > 0 && c <= 4096 && c != 20) mask_reader(file, c);
  }
  (void)ckv::fuzz::run_cli({"bound", "-q", "--force", "-m", ckv::fuzz::tiny_model().string(), "--tokens",
                            tokens_file(), "--methods", "file,attn", "--selection-file",
                            file.string(), "--window", "2", "--budgets", "0.25,0.5", "-o",
                            (ckv::fuzz::work_dir() / "bound").string()});
  return 0;
}
