// The command line on bad input (issue 2, item 9): each case gives exactly one line
// "ckv: error: ..." naming the input and what is wrong, and a non-zero exit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_dump_util.h"

namespace ckv::test {
namespace {

const std::string kData = CKV_TEST_DATA_DIR;
const std::string kTinyDir = kData + "/models/tiny_llama_gqa";  // no tokenizer, context 256

void expect_one_error_line(const RunResult& r, int exit_code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  ASSERT_FALSE(r.output.empty());
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "more than one line: " << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "missing '" << needle << "' in: " << r.output;
}

TEST(Cli, MissingModelFile) {
  expect_one_error_line(run_ckv("info --model /nonexistent/model.gguf"), 1, "/nonexistent/model.gguf");
}

TEST(Cli, TruncatedGguf) {
  const fs::path dir = scratch_dir("cli");
  const fs::path src = kData + "/models/tiny_llama3_rope.gguf";
  const fs::path cut = dir / "truncated.gguf";
  fs::copy_file(src, cut);
  fs::resize_file(cut, fs::file_size(src) / 2);
  expect_one_error_line(run_ckv("info " + cut.string()), 1, "truncated.gguf");
}

TEST(Cli, CorruptedSafetensorsHeader) {
  const fs::path dir = scratch_dir("cli");
  fs::copy(kData + "/models/tiny_llama_tied", dir / "m", fs::copy_options::recursive);
  {
    std::fstream f(dir / "m" / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write("\x01\x02\x03", 3);  // inside the JSON header
  }
  expect_one_error_line(run_ckv("info " + (dir / "m").string()), 1, "model.safetensors");
}

TEST(Cli, UnsupportedArchitecture) {
  expect_one_error_line(run_ckv("info " + kData + "/loaders/bad_arch.gguf"), 1,
                        "unsupported architecture 'gpt2'");
}

TEST(Cli, UnsupportedQuantType) {
  expect_one_error_line(run_ckv("info " + kData + "/loaders/unsupported_type.gguf"), 1, "IQ4_XS");
}

TEST(Cli, MissingTokenizer) {
  expect_one_error_line(run_ckv("forward --model " + kTinyDir + " --prompt hello"), 1,
                        "no tokenizer");
}

TEST(Cli, TokenIdOutOfRange) {
  const fs::path dir = scratch_dir("cli");
  write_text(dir / "ids.txt", "1 2 3 100000");
  expect_one_error_line(run_ckv("forward --model " + kTinyDir + " --tokens " + (dir / "ids.txt").string()),
                        1, "100000");
}

TEST(Cli, PromptLongerThanContext) {
  const fs::path dir = scratch_dir("cli");
  std::string ids;
  for (int i = 0; i < 300; ++i) ids += std::to_string(i % 200) + " ";
  write_text(dir / "ids.txt", ids);
  expect_one_error_line(run_ckv("forward --model " + kTinyDir + " --tokens " + (dir / "ids.txt").string()),
                        1, "context");
}

TEST(Cli, BadFlagValue) {
  const RunResult r = run_ckv("forward --threads -2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("ckv: error: ", 0), 0u) << r.output;
}

TEST(Cli, ForwardOnTinyModelPrintsEveryLayer) {
  const fs::path dir = scratch_dir("cli");
  write_text(dir / "ids.txt", "5 17 42 7 99");
  const RunResult r = run_ckv("forward -q --model " + kTinyDir + " --tokens " +
                              (dir / "ids.txt").string() + " --generate 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prompt        5 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n    1  "), std::string::npos) << r.output;  // layer 1 of 2
}

// --timing-json takes a file as dump's does; without one (or with -) the JSON goes to stdout.
TEST(Cli, ForwardTimingJsonToAFileOrStdout) {
  const fs::path dir = scratch_dir("cli");
  write_text(dir / "ids.txt", "5 17 42 7 99");
  const std::string base = "forward -q --model " + kTinyDir + " --tokens " + (dir / "ids.txt").string() + " -n 2";
  const RunResult to_stdout = run_ckv(base + " --timing-json --repeats 2");
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.output;
  EXPECT_EQ(to_stdout.output.rfind("{\"", 0), 0u) << to_stdout.output;
  EXPECT_NE(to_stdout.output.find("\"prefill_seconds\""), std::string::npos) << to_stdout.output;
  const RunResult to_file = run_ckv(base + " --timing-json " + (dir / "t.json").string());
  ASSERT_EQ(to_file.exit_code, 0) << to_file.output;
  EXPECT_EQ(to_file.output, "");
  std::ifstream f(dir / "t.json");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"decode_tokens\":1"), std::string::npos) << text;
  expect_one_error_line(run_ckv(base + " --timing-json " + (dir / "no/t.json").string()), 1, "cannot write");
}

}  // namespace
}  // namespace ckv::test

namespace ckv::test {
namespace {

// A write that fails part-way (here: a file-size limit) gives one error line and exit 1,
// not a crash in HDF5's exit-time clean-up, and never the final output name.
TEST(Cli, FailedWriteIsOneLineAndNoFinalFile) {
  const std::string model = default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model not installed";
  const fs::path dir = scratch_dir("cli");
  const fs::path out = dir / "full_disk.h5";
  const std::string cmd = "sh -c \"trap '' XFSZ; ulimit -f 2000; " + std::string(CKV_BINARY) +
                          " -q dump -m " + model + " --chat -o " + out.string() + "\" 2>&1";
  RunResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  expect_one_error_line(r, 1, "File too large");
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace ckv::test
