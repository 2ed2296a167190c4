// Command-line fuzzer: the input is argv (words separated by NUL bytes) for ckv's real
// command line (main.cpp's build_app: global flags and every subcommand with its options,
// validators, exclusions, requirements and transforms). The command itself does not run:
// the app's parse-complete callback, which CLI11 calls after every check and before the
// subcommands' callbacks, stops there. Any argv must parse or throw CLI::ParseError.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"

namespace {
// Thrown once argv is fully parsed and checked: the command is not run.
struct Parsed {
  int unused = 0;
};
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ckv::fuzz::silence_stdout();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> words{"ckv"};
  std::string word;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      words.push_back(word);
      word.clear();
    } else {
      word += static_cast<char>(data[i]);
    }
  }
  if (!word.empty()) words.push_back(word);
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());

  CLI::App app;
  ckv::app::GlobalOptions g;
  g.argc = static_cast<int>(argv.size());
  g.argv = argv.data();
  ckv::app::build_app(app, g);
  app.parse_complete_callback([] { throw Parsed{}; });
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
  } catch (const Parsed&) {
  }
  return 0;
}
