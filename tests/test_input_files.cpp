// Inputs that are not what they claim (issue 24 items 3, 4, 8, 9): every file the CLI reads
// is a regular file or is refused with one line (a FIFO, /dev/zero or a directory never
// hangs or reaches a stream library); values that are not integers are not truncated into
// positions or token ids; a JSONL line with a raw NUL, a GGUF without a context; and merge's
// checks of every attribute it relies on.
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "analysis/duoattention.h"
#include "analysis/headkv.h"
#include "analysis/mask_plan.h"
#include "core/error.h"
#include "core/input_file.h"
#include "data/records.h"
#include "hostile_util.h"
#include "io/gguf.h"
#include "io/h5.h"
#include "model/config.h"
#include "model/tokenizer.h"
#include "test_shard_util.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;
using test::expect_one_error_line;
using test::kTiny;
using test::run_ckv;
using test::RunResult;

// ckv under `timeout`: a run that would hang fails the test (exit 124) instead of hanging it.
RunResult run_bounded(const std::string& args) {
  return run_ckv(args, "CKV_TEST_BOUNDED=1 timeout 60");
}

class InputFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::scratch_dir("ckv_input_files");
    tokens_ = test::tokens_file(dir_, 40);
    fifo_ = (dir_ / "fifo").string();
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0644), 0);
    fs::create_directories(dir_ / "adir");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  RunResult bound(const std::string& flags) {
    return run_bounded(
        fmt::format("-q bound --model {} --tokens {} --window 4 --budgets 0.5 -t 1 -o {} {}", kTiny,
                    tokens_, path("b"), flags));
  }
  fs::path dir_;
  std::string tokens_, fifo_;
};

// Items 3 and 4: a FIFO, /dev/zero or a directory as any input file is refused at once with
// one line (exit 1), never waited on or read forever, never an internal error.
TEST_F(InputFiles, SpecialFilesAsInputsAreRefusedWithOneLine) {
  struct Case {
    std::string flags, needle;
  };
  const std::string dir = path("adir");
  const std::vector<Case> cases = {
      {"--methods headkv --headkv-profile " + fifo_,
       "the HeadKV profile is a FIFO, not a regular file"},
      {"--methods headkv --headkv-profile " + dir,
       "the HeadKV profile is a directory, not a regular file"},
      {"--methods duoattention --duo-pattern " + fifo_,
       "the DuoAttention pattern is a FIFO, not a regular file"},
      {"--methods duoattention --duo-pattern /dev/zero",
       "the DuoAttention pattern is a character device, not a regular file"},
      {"--methods duoattention --duo-pattern " + dir, "the DuoAttention pattern is a directory"},
      {"--methods file --selection-file " + fifo_,
       "the selection file is a FIFO, not a regular file"},
      {"--methods file --selection-file /dev/zero", "the selection file is a character device"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    expect_one_error_line(bound(c.flags), 1, c.needle);
    EXPECT_FALSE(fs::exists(dir_ / "b.h5"));
  }
  // mask's selection file, a token file, and a FIFO among merge's shards.
  expect_one_error_line(
      run_bounded(fmt::format("-q mask --model {} --tokens {} --context-end 30 --selection-file {} "
                              "-o {}",
                              kTiny, tokens_, fifo_, path("m.h5"))),
      1, "the selection file is a FIFO");
  expect_one_error_line(
      run_bounded(fmt::format("-q bound --model {} --tokens {} -o {}", kTiny, fifo_, path("b"))), 1,
      "is a FIFO, not a regular file");
  ASSERT_EQ(bound("").exit_code, 0);
  // A directory is refused by the command line's check of the shard paths (exit 2).
  const RunResult shard_dir = run_bounded(fmt::format("-q merge {} {} {}", path("g.h5"), path("b.h5"), dir));
  EXPECT_EQ(shard_dir.exit_code, 2) << shard_dir.output;
  EXPECT_NE(shard_dir.output.find("directory"), std::string::npos) << shard_dir.output;
  for (const std::string& bad : {fifo_, std::string("/dev/zero")}) {
    SCOPED_TRACE(bad);
    expect_one_error_line(
        run_bounded(fmt::format("-q merge {} {} {}", path("g.h5"), path("b.h5"), bad)), 1,
        "not a regular file");
    EXPECT_FALSE(fs::exists(dir_ / "g.h5"));
    EXPECT_FALSE(fs::exists(dir_ / ".g.h5.partial"));
  }
  expect_one_error_line(run_bounded("info " + fifo_), 1, "not a regular file");
}

// The readers themselves, as the library gives them to every caller.
TEST_F(InputFiles, ReadersRefuseSpecialFilesAndAcceptLinks) {
  EXPECT_THROW(read_regular_file(fifo_, "x"), InputError);
  EXPECT_THROW(read_regular_file("/dev/zero", "x"), InputError);
  EXPECT_THROW(read_regular_file(path("adir"), "x"), InputError);
  EXPECT_THROW(read_regular_file(path("absent"), "x"), IoError);
  EXPECT_THROW(require_regular_file(fifo_, "x"), InputError);
  EXPECT_THROW(read_headkv_profile(fifo_), InputError);
  EXPECT_THROW(read_duo_pattern("/dev/zero"), InputError);
  EXPECT_THROW(read_layer_selection_file(path("adir"), 2, 2), InputError);
  EXPECT_THROW(RecordReader(fifo_, false), InputError);
  test::write_text(dir_ / "pattern.tsv", "0.5\t1\n0\t0.25\n");
  ASSERT_EQ(::symlink((dir_ / "pattern.tsv").c_str(), path("link.tsv").c_str()), 0);
  EXPECT_EQ(read_duo_pattern(path("link.tsv")),
            (std::vector<std::vector<double>>{{0.5, 1}, {0, 0.25}}));
  EXPECT_EQ(read_regular_file(path("pattern.tsv"), "x"), "0.5\t1\n0\t0.25\n");
  EXPECT_THROW(read_regular_file(path("pattern.tsv"), "x", 4), InputError);  // larger than asked
}

// Item 8: a selection-file position 1.5 (or 1.0, or "1") is not a position: refused by the
// reader bound and eval share, as mask's reader refuses it; never truncated to 1.
TEST_F(InputFiles, SelectionPositionsMustBeIntegers) {
  for (const std::string& bad :
       {std::string("1.5"), std::string("1.0"), std::string("\"1\""), std::string("-1")}) {
    SCOPED_TRACE(bad);
    test::write_text(dir_ / "sel.json", fmt::format(R"({{"0": [[0, {}, 2], [0, 2]]}})", bad));
    EXPECT_THROW(read_layer_selection_file(path("sel.json"), 2, 2), InputError);
    expect_one_error_line(bound("--methods file --selection-file " + path("sel.json")), 1,
                          "is not an integer >= 0");
  }
  test::write_text(dir_ / "sel.json", R"({"0": [[0, 1, 2], [0, 2]], "1": [[3], []]})");
  const auto sel = read_layer_selection_file(path("sel.json"), 2, 2);
  EXPECT_EQ(sel.at(0), (std::vector<std::vector<int64_t>>{{0, 1, 2}, {0, 2}}));
  EXPECT_EQ(sel.at(1), (std::vector<std::vector<int64_t>>{{3}, {}}));
  test::write_text(dir_ / "sel.json", R"({"0": [[0, 1], [0, 1]]})" + std::string(1, '\0') + "{}");
  EXPECT_THROW(read_layer_selection_file(path("sel.json"), 2, 2), InputError);
}

// Item 8: a raw NUL after a JSONL record's object is not the end of the line.
TEST(InputValues, JsonlLineWithRawNulIsRefused) {
  const std::string good = R"({"id": "a", "context": "x"})";
  EXPECT_EQ(parse_record(good, "in.jsonl", 1, 0).id, "a");
  for (const std::string& bad :
       {good + std::string(1, '\0'), good + std::string(1, '\0') + "garbage",
        std::string(R"({"id": "a", )") + std::string(1, '\0') + R"("context": "x"})"}) {
    try {
      (void)parse_record(bad, "in.jsonl", 3, 0);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("in.jsonl:3: a raw NUL byte"), std::string::npos)
          << e.what();
    }
  }
}

// Item 8: a GGUF whose llama.context_length is 0 states no context: refused.
TEST(InputValues, GgufContextLengthZeroIsRefused) {
  const fs::path dir = test::scratch_dir("ckv_input_values");
  for (const uint32_t context : {0u, 2048u}) {
    std::string b = "GGUF";
    const auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
    const auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
    const auto str = [&](const std::string& s) {
      u64(s.size());
      b += s;
    };
    u32(3);
    u64(0);  // tensors
    u64(5);  // keys
    str("general.architecture");
    u32(8);
    str("llama");
    str("llama.block_count");
    u32(4);
    u32(2);
    str("llama.embedding_length");
    u32(4);
    u32(64);
    str("llama.feed_forward_length");
    u32(4);
    u32(128);
    str("llama.context_length");
    u32(4);
    u32(context);
    std::ofstream(dir / "m.gguf", std::ios::binary) << b;
    try {
      (void)config_from_gguf(GgufFile(dir / "m.gguf"));
      ADD_FAILURE() << "accepted";
    } catch (const FormatError& e) {
      // 2048 gets past the context and fails later, on the missing head count.
      const std::string want = context == 0 ? "llama.context_length = 0" : "attention.head_count";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

// Item 8: a tokenizer.json whose token id is 3.7 (or "3") is refused, not truncated to 3.
TEST(InputValues, TokenizerFloatIdIsRefused) {
  const fs::path dir = test::scratch_dir("ckv_input_values");
  const auto tokenizer = [&](const std::string& id) {
    test::write_text(
        dir / "tokenizer.json",
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": )" + id +
            R"(}, "merges": ["a b"]}, "added_tokens": [], "pre_tokenizer": null, "normalizer": null,
                         "decoder": null})");
    return tokenizer_from_json(dir / "tokenizer.json");
  };
  for (const std::string& bad : {std::string("3.7"), std::string("\"3\""), std::string("2.0")}) {
    SCOPED_TRACE(bad);
    try {
      (void)tokenizer(bad);
      ADD_FAILURE() << "accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("token 'ab' has id " + bad + ", not an integer"),
                std::string::npos)
          << e.what();
    }
  }
  fs::remove_all(dir);
}

// Item 9: merge checks what it relies on: a shard whose record says layers out of range, or
// complete = 2, or an eval record whose question starts past its tokens, is refused naming
// the shard and the attribute; nothing is written.
TEST_F(InputFiles, MergeRefusesShardsWithDamagedAttributes) {
  ASSERT_EQ(
      run_ckv(fmt::format(
                  "-q bound --model {} --tokens {} --window 4 --budgets 0.5 -t 1 --shard 0/1 -o {}",
                  kTiny, tokens_, path("s")))
          .exit_code,
      0);
  struct Damage {
    const char* what;
    std::function<void(h5::Group&)> apply;
    const char* needle;
  };
  const std::vector<Damage> damages = {
      {"layers negative",
       [](h5::Group& r) {
         r.set_attr_ints("layers", {-1, 1});
       },
       "attribute \"layers\" holds -1"},
      {"layers repeated",
       [](h5::Group& r) {
         r.set_attr_ints("layers", {1, 1});
       },
       "\"layers\" is not strictly increasing"},
      {"complete 2",
       [](h5::Group& r) {
         r.remove_attr("complete");
         r.set_attr_int("complete", 2);
       },
       "holds 2, not a bool (0 or 1)"},
      {"question past the end", [](h5::Group& r) { r.set_attr_int("question_start", 1000); },
       "attribute \"question_start\" is 1000"},
  };
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    fs::copy_file(dir_ / "s.h5", dir_ / "d.h5", fs::copy_options::overwrite_existing);
    {
      h5::File f = h5::File::open_rw(dir_ / "d.h5");
      h5::Group records = f.open_group("records");
      h5::Group r = records.open_group(records.children().front());
      d.apply(r);
      f.close();
    }
    expect_one_error_line(run_ckv(fmt::format("-q merge {} {}", path("g.h5"), path("d.h5"))), 1,
                          d.needle);
    EXPECT_FALSE(fs::exists(dir_ / "g.h5"));
    EXPECT_FALSE(fs::exists(dir_ / ".g.h5.partial"));
  }
}

}  // namespace
}  // namespace ckv
