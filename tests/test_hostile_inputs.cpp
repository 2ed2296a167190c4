// Issue 11: hostile and careless inputs. Each case once crashed, hung, lost data or exited
// with the wrong code; now it is one line "ckv: error: ..." and exit 1 (bad input/files) or 2
// (bad flags), or, for hangs, a bounded amount of work.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/mask_plan.h"
#include "analysis/selection.h"
#include "core/error.h"
#include "core/tensor.h"
#include "io/gguf.h"
#include "io/h5.h"
#include "data/records.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "hostile_util.h"
#include "test_dump_util.h"

namespace ckv::test {
namespace {

// ---- item 1: selection files --------------------------------------------------------

TEST(HostileSelection, SelectRefusesPositionsOutsideTheContextAndDuplicates) {
  SelectionInputs in;
  in.c = 6;
  in.n_kv_head = 2;
  const MethodSpec file = MethodSpec::parse("file");
  for (const auto& kept : std::vector<std::vector<std::vector<int64_t>>>{
           {{-3}, {0}}, {{6}, {0}}, {{1, 1}, {0}}, {{0}}}) {
    in.file_kept = kept;
    EXPECT_THROW(select(file, in, 2, {}), InputError);
    EXPECT_THROW(leaf_scores(file, in, 2, {}), InputError);
  }
  in.file_kept = {{0, 5}, {3}};
  EXPECT_EQ(select(file, in, 2, {}).kept[0], (std::vector<int64_t>{0, 5}));
}

TEST(HostileSelection, BoundNamesFileLayerHeadAndPosition) {
  const fs::path dir = scratch_dir("hostile");
  const std::string base = "-q bound --model " + kTiny + " --tokens " + tokens_file(dir, 40) +
                           " --window 8 --methods file --layers 0 --budgets 0.2 -o " + (dir / "b").string() +
                           " --force --selection-file ";
  const auto with = [&](const std::string& name, const std::string& json) {
    write_text(dir / name, json);
    return run_ckv(base + (dir / name).string());
  };
  expect_one_error_line(with("neg.json", R"({"0": [[-3], [0]]})"), 1, "neg.json: layer 0 KV head 0: position -3");
  expect_one_error_line(with("big.json", R"({"0": [[0], [45]]})"), 1, "big.json: layer 0 KV head 1: position 45 outside");
  expect_one_error_line(with("dup.json", R"({"0": [[3, 3], [0]]})"), 1, "dup.json: layer 0 KV head 0: position 3 listed twice");
  expect_one_error_line(with("heads.json", R"({"0": [[-3], [0], [5]]})"), 1, "heads.json: layer 0: 3 lists");
  expect_one_error_line(with("layer.json", R"({"0x": [[1], [0]]})"), 1, "layer.json: layer \"0x\"");
  // A control byte from the file is escaped, never echoed raw.
  const RunResult esc = with("esc.json", "{\"\\u001b[31m\": [[1], [0]]}");
  expect_one_error_line(esc, 1, "\\x1b[31m");
  EXPECT_EQ(esc.output.find('\x1b'), std::string::npos);
  EXPECT_EQ(with("ok.json", R"({"0": [[1, 5, 7], [0, 2, 3]]})").exit_code, 0);
}

TEST(HostileSelection, MaskRefusesDuplicatePositions) {
  const fs::path dir = scratch_dir("hostile");
  write_text(dir / "s.json", R"({"layers": {"0": {"kept": [[1, 1, 2], [0]]}}})");
  EXPECT_THROW(plan_from_selection_file(dir / "s.json", 10, 12, {0}, {0, 1}, 2, 2), InputError);
}

// ---- item 3: bound --dump against its own attributes -----------------------------------

TEST(HostileDump, BoundRefusesRecordsInconsistentWithTheirDatasets) {
  const fs::path dir = scratch_dir("hostile");
  const std::string dump = (dir / "d.h5").string();
  ASSERT_EQ(run_ckv("-q dump --model " + kTiny + " --tokens " + tokens_file(dir, 40) + " --what q,k,v -o " + dump).exit_code, 0);
  const std::string bound = "-q bound --model " + kTiny + " --window 8 --force -o " + (dir / "b").string() + " --dump ";
  ASSERT_EQ(run_ckv(bound + dump).exit_code, 0);
  const auto damaged = [&](const std::string& name, const auto& edit) {
    const fs::path p = dir / name;
    fs::copy_file(dump, p);
    {
      h5::File f = h5::File::open_rw(p);
      h5::Group r = f.open_group("records/0");
      edit(r);
    }
    return run_ckv(bound + p.string());
  };
  expect_one_error_line(damaged("n.h5", [](h5::Group& r) { r.set_attr_int("n_tokens", 60); }), 1,
                        "layer 0 q has shape [4, 40, 16], expected [4, 60, 16]");
  expect_one_error_line(damaged("c.h5", [](h5::Group& r) { r.set_attr_int("context_end", 41); }), 1,
                        "context_end 41 is outside [1, n_tokens = 40]");
  expect_one_error_line(damaged("neg.h5", [](h5::Group& r) { r.set_attr_int("n_tokens", -5); }), 1,
                        "n_tokens -5 is outside");
  expect_one_error_line(damaged("k.h5", [](h5::Group& r) {
                          r.open_group("layers/1").remove("k");
                          h5::Dataset k = r.open_group("layers/1").create_dataset("k", h5::DType::F32, {2, 39, 16});
                          k.write(std::vector<float>(2 * 39 * 16, 0.5f));
                        }),
                        1, "layer 1 k has shape [2, 39, 16], expected [2, 40, 16]");
}

// ---- item 9 and 17: ids and text fields -------------------------------------------------

TEST(HostileRecords, IdsThatCannotNameAGroupAreRefused) {
  for (const std::string& id : {std::string("a\0b", 3), std::string("a/b"), std::string("."), std::string(".."),
                               std::string("")}) {
    const std::string line = nlohmann::json{{"id", id}, {"context", "x"}}.dump();
    try {
      parse_record(line, "in.jsonl", 3, 0);
      ADD_FAILURE() << "accepted id " << nlohmann::json(id).dump();
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("in.jsonl:3: id", 0), 0u) << msg;
      if (id.size() == 3 && id[1] == '\0') {
        EXPECT_NE(msg.find("a\\x00b"), std::string::npos) << msg;  // not cut at NUL
      }
    }
  }
  EXPECT_FALSE(h5::is_valid_link_name(std::string("a\0c", 3)));
}

TEST(HostileRecords, TextWithNulIsRefusedNamingTheField) {
  for (const char* field : {"context", "question", "answer"}) {
    nlohmann::json j{{"id", "r"}, {"context", "ok"}};
    j[field] = std::string("x\0y", 3);
    try {
      parse_record(j.dump(), "in.jsonl", 7, 0);
      ADD_FAILURE() << field;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("in.jsonl:7: \"") + field + "\" contains a NUL"),
                std::string::npos) << e.what();
    }
  }
}

TEST(HostileRecords, DuplicateIdsAndHugeNumbersAreRefusedOrSkipped) {
  const fs::path dir = scratch_dir("hostile");
  write_text(dir / "dup.jsonl", "{\"id\": \"a\", \"context\": \"x\"}\n{\"id\": \"b\", \"context\": \"y\"}\n"
                                "{\"id\": \"a\", \"context\": \"z\"}\n");
  RecordReader dup(dir / "dup.jsonl");
  ASSERT_TRUE(dup.next());
  ASSERT_TRUE(dup.next());
  try {
    dup.next();
    ADD_FAILURE() << "duplicate id accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("dup.jsonl:3: record id \"a\" appears twice (first on line 1)"),
              std::string::npos) << e.what();
  }
  write_text(dir / "big.jsonl", "{\"id\": \"a\", \"context\": \"x\"}\n{\"id\": \"b\", \"context\": \"y\", \"n\": 1e400}\n"
                                "{\"id\": \"c\", \"context\": \"z\"}\n");
  RecordReader strict(dir / "big.jsonl");
  ASSERT_TRUE(strict.next());
  try {
    strict.next();
    ADD_FAILURE() << "1e400 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("big.jsonl:2: "), std::string::npos) << e.what();
  }
  RecordReader skipping(dir / "big.jsonl", true);
  std::vector<std::string> ids;
  while (auto r = skipping.next()) ids.push_back(r->id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(skipping.skipped().size(), 1u);
}

TEST(HostileRecords, DumpNamesTheLineOfAHugeNumberAndSkipBadSkipsIt) {
  const std::string model = default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  const fs::path dir = scratch_dir("hostile");
  write_text(dir / "in.jsonl", "{\"id\": \"a\", \"context\": \"One two.\"}\n{\"id\": \"b\", \"context\": \"x\", \"w\": [1e400]}\n");
  const std::string base = "-q dump --model " + model + " --layers 0 --what k -i " + (dir / "in.jsonl").string() +
                           " -o " + (dir / "d.h5").string();
  expect_one_error_line(run_ckv(base), 1, "in.jsonl:2: ");
  const RunResult skip = run_ckv(base + " --skip-bad --force");  // the failed run left record "a" to resume
  EXPECT_EQ(skip.exit_code, 0) << skip.output;
  EXPECT_NE(skip.output.find("skipped"), std::string::npos) << skip.output;
  // Ids with NUL used to collapse into one group: refused with one line.
  write_text(dir / "nul.jsonl", "{\"id\": \"a\\u0000b\", \"context\": \"x\"}\n{\"id\": \"a\\u0000c\", \"context\": \"y\"}\n");
  expect_one_error_line(run_ckv("-q dump --model " + model + " --layers 0 --what k -i " + (dir / "nul.jsonl").string() +
                                " -o " + (dir / "n.h5").string()),
                        1, "nul.jsonl:1: id \"a\\x00b\"");
  EXPECT_FALSE(fs::exists(dir / "n.h5"));
}

// ---- item 11: hangs ------------------------------------------------------------------

TEST(HostileHangs, FifoModelIsRefusedWithoutBlocking) {
  const fs::path dir = scratch_dir("hostile");
  const fs::path fifo = dir / "model.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // `timeout` turns a hang into exit 124, which fails the test instead of blocking it.
  RunResult r;
  const std::string cmd = "timeout 20 " + std::string(CKV_BINARY) + " info --model " + fifo.string() + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[4096];
  for (size_t n = 0; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  expect_one_error_line(r, 1, "not a regular file");
}

TEST(HostileHangs, KernelIsValidatedAndPoolingCostIsBounded) {
  for (const int64_t k : {int64_t{0}, int64_t{-1}, int64_t{4}, int64_t{2147483647}, kMaxKernel + 2}) {
    SelectionParams p;
    p.kernel = k;
    EXPECT_THROW(validate_selection_params(p), UsageError) << k;
  }
  SelectionParams ok;
  ok.kernel = kMaxKernel;
  EXPECT_NO_THROW(validate_selection_params(ok));
  // A kernel far wider than the row costs what the row costs: every entry pools the whole row.
  Eigen::RowVectorXd row = Eigen::RowVectorXd::LinSpaced(50, 0, 49);
  const auto t0 = std::chrono::steady_clock::now();
  const Eigen::RowVectorXd out = pool_row(row, 2147483647, PoolKind::Max);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_EQ(out.minCoeff(), 49);
}

TEST(HostileHangs, MaskValidatesKernelLikeBound) {
  const fs::path dir = scratch_dir("hostile");
  const std::string base = "-q mask --model " + kTiny + " --tokens " + tokens_file(dir, 30) +
                           " --context-end 20 --method snapkv --budget 0.5 --window 4 -o " + (dir / "m.h5").string() + " ";
  for (const char* bad : {"--kernel 2147483647", "--kernel 0 --pool avg", "--kernel -3", "--kernel 4"})
    expect_one_error_line(run_ckv(base + bad), 2, "--kernel");
  expect_one_error_line(run_ckv("-q bound --model " + kTiny + " --tokens " + tokens_file(dir, 30) +
                                " --kernel 2147483647 -o " + (dir / "b").string()),
                        2, "--kernel 2147483647: must be odd, in [1, 1023]");
  EXPECT_FALSE(fs::exists(dir / "m.h5"));
}

TEST(HostileHangs, ThreadsAreCappedWithOneNote) {
  const fs::path dir = scratch_dir("hostile");
  const RunResult r = run_ckv("forward --model " + kTiny + " --tokens " + tokens_file(dir, 2) + " --threads 100000");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string note = "ckv: note: --threads 100000 capped to the ";
  ASSERT_NE(r.output.find(note), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(note, r.output.find(note) + 1), std::string::npos) << "noted twice: " << r.output;
  const RunResult quiet = run_ckv("-q forward --model " + kTiny + " --tokens " + tokens_file(dir, 2) + " --threads 100000");
  EXPECT_EQ(quiet.output.find("capped"), std::string::npos) << quiet.output;
}

// Counts what the span conversion asks of the tokenizer: quadratic behaviour tokenises the
// text once per span boundary, so the bytes tokenised grow with spans x text.
class CountingTokenizer : public Tokenizer {
 public:
  explicit CountingTokenizer(const Tokenizer& t) : t_(t) {}
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override {
    bytes += text.size();
    return t_.encode(text, add_bos, parse_special);
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return t_.decode(ids); }
  std::string token_text(int32_t id) const override { return t_.token_text(id); }
  std::string_view kind() const override { return t_.kind(); }
  std::string_view pre_tokenizer() const override { return t_.pre_tokenizer(); }
  int64_t vocab_size() const override { return t_.vocab_size(); }
  int32_t bos_id() const override { return t_.bos_id(); }
  int32_t eos_id() const override { return t_.eos_id(); }
  const std::string& chat_template() const override { return t_.chat_template(); }
  std::string apply_chat_template(const std::vector<ChatMessage>& m, bool g) const override {
    return t_.apply_chat_template(m, g);
  }
  mutable size_t bytes = 0;

 private:
  const Tokenizer& t_;
};

const Model& default_model() {
  static const Model m = load_model(default_model_or_empty());
  return m;
}

TEST(HostileHangs, CharacterSpansConvertInLinearTime) {
  if (default_model_or_empty().empty()) GTEST_SKIP() << "default model absent";
  CountingTokenizer tok(*default_model().tokenizer);
  InputRecord r;
  r.id = "long";
  const std::string sentence = "The harbour key number is 7421 and Ilse keeps it. ";  // 50 bytes
  while (r.context.size() < 311000) r.context += sentence;
  std::vector<SpanRange>& spans = r.spans["many"];
  for (int64_t at = 0; at + 10 < static_cast<int64_t>(r.context.size()) && spans.size() < 19600; at += 16)
    spans.push_back({at, at + 9});
  ASSERT_GT(spans.size(), 19000u);
  const auto t0 = std::chrono::steady_clock::now();
  const RecordPrompt p = tokenize_record(r, tok, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The prompt itself is tokenised once; the spans add no tokenisation (77 s before).
  EXPECT_LE(tok.bytes, 2 * r.context.size() + 64) << "bytes tokenised: " << tok.bytes;
  EXPECT_LT(seconds, 20.0);
  ASSERT_EQ(p.token_spans.at("many").size(), spans.size());
  // Each token range covers its characters and is the smallest that does.
  for (size_t i = 0; i < spans.size(); i += 997) {
    const SpanRange t = p.token_spans.at("many")[i];
    const std::string covered = tok.decode({p.tokens.begin() + t.start, p.tokens.begin() + t.end});
    const std::string chars = r.context.substr(static_cast<size_t>(spans[i].start), 9);
    EXPECT_NE(covered.find(chars), std::string::npos) << covered << " / " << chars;
    const std::string no_first = tok.decode({p.tokens.begin() + t.start + 1, p.tokens.begin() + t.end});
    const std::string no_last = tok.decode({p.tokens.begin() + t.start, p.tokens.begin() + t.end - 1});
    EXPECT_EQ(no_first.find(chars), std::string::npos) << no_first;
    EXPECT_EQ(no_last.find(chars), std::string::npos) << no_last;
  }
}

// At word starts (where needles begin) the linear conversion equals the definition it
// replaced: tokenise the prefix up to the boundary and count the tokens that agree.
TEST(HostileHangs, SpansAtWordStartsEqualPrefixTokenisation) {
  if (default_model_or_empty().empty()) GTEST_SKIP() << "default model absent";
  const Tokenizer& tok = *default_model().tokenizer;
  InputRecord r;
  r.id = "w";
  r.context = "In Vell the key is 7421. Ilse Varga repairs nets; the lighthouse is green, héllo wörld!";
  r.question = " What is the key?";
  std::vector<int64_t> starts;
  int64_t cp = 0;
  for (size_t b = 0; b < r.context.size(); ++b) {
    const auto ch = static_cast<unsigned char>(r.context[b]);
    if ((ch & 0xC0) == 0x80) continue;
    if (b > 0 && r.context[b - 1] == ' ') starts.push_back(cp - 1);  // the space opens the token
    ++cp;
  }
  for (size_t i = 0; i + 1 < starts.size(); ++i) r.spans["w" + std::to_string(i)] = {{starts[i], starts[i + 1]}};
  const RecordPrompt p = tokenize_record(r, tok, false);
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    const SpanRange t = p.token_spans.at("w" + std::to_string(i))[0];
    for (const auto& [ch, got] : {std::pair{starts[i], t.start}, std::pair{starts[i + 1], t.end}}) {
      const size_t byte = utf8_offset(r.context, ch, "test");
      const std::vector<int32_t> prefix = tok.encode(r.context.substr(0, byte), true, true);
      EXPECT_EQ(got, static_cast<int64_t>(prefix.size())) << "boundary at character " << ch;
      EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), p.tokens.begin()));
    }
  }
}

// ---- item 14: non-finite weights and activations --------------------------------------

// A copy of the tiny tied model with `fill` applied to one tensor's float32 data.
fs::path patched_model(const fs::path& dir, const std::string& tensor, float value) {
  const fs::path m = dir / "m";
  fs::copy(kTestData / "models" / "tiny_llama_tied", m, fs::copy_options::recursive);
  std::fstream f(m / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  const nlohmann::json h = nlohmann::json::parse(header);
  const auto offsets = h.at(tensor).at("data_offsets");
  const auto begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  const std::vector<float> data((end - begin) / 4, value);
  f.seekp(static_cast<std::streamoff>(8 + n + begin));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(end - begin));
  return m;
}

TEST(HostileWeights, NonFiniteWeightIsRefusedNamingTheTensor) {
  EXPECT_EQ(first_non_finite(std::vector<float>{1, 2, 3}), -1);
  EXPECT_EQ(first_non_finite(std::vector<float>{1, 2, std::numeric_limits<float>::infinity(), NAN}), 2);
  EXPECT_THROW(check_finite("w", std::vector<float>{NAN}), FormatError);
  const fs::path dir = scratch_dir("hostile");
  const fs::path m = patched_model(dir, "model.layers.1.mlp.up_proj.weight", NAN);
  expect_one_error_line(run_ckv("forward --model " + m.string() + " --tokens " + tokens_file(dir, 5)), 1,
                        "tensor 'model.layers.1.mlp.up_proj.weight': non-finite value nan at element 0");
}

TEST(HostileWeights, NonFiniteActivationNamesTheLayer) {
  const fs::path dir = scratch_dir("hostile");
  const fs::path m = patched_model(dir, "model.layers.0.mlp.down_proj.weight", 3e38f);
  expect_one_error_line(run_ckv("-q forward --model " + m.string() + " --tokens " + tokens_file(dir, 5)), 1,
                        "non-finite activation after layer 0");
  expect_one_error_line(run_ckv("-q bound --model " + m.string() + " --tokens " + tokens_file(dir, 40) +
                                " --window 8 --force -o " + (dir / "b").string()),
                        1, "non-finite activation after layer 0");
}

// ---- item 15: flag errors exit 2; budgets mean one thing ------------------------------

TEST(HostileFlags, SemanticFlagErrorsExitTwo) {
  const fs::path dir = scratch_dir("hostile");
  const std::string toks = tokens_file(dir, 40);
  const std::string bound = "-q bound --model " + kTiny + " --tokens " + toks + " --window 8 --force -o " + (dir / "b").string() + " ";
  expect_one_error_line(run_ckv(bound + "--budgets -0.1"), 2, "--budgets: -0.1 is outside (0, 1]");
  expect_one_error_line(run_ckv(bound + "--layers 30"), 2, "--layers: 30 is outside [0, 2)");
  expect_one_error_line(run_ckv(bound + "--keep -5"), 2, "--keep -5: must be at least 1");
  expect_one_error_line(run_ckv(bound + "--keep 0"), 2, "--keep 0: must be at least 1");
  expect_one_error_line(run_ckv("-q bound --model " + kTiny + " --tokens " + toks + " --window 0 -o " + (dir / "w").string()),
                        2, "--window 0: must be at least 1");
  expect_one_error_line(run_ckv(bound + "--shard 2/2"), 2, "--shard");
  expect_one_error_line(run_ckv(bound + "--methods fancykv"), 2, "unknown method 'fancykv'");
  expect_one_error_line(run_ckv("-q check --model " + kTiny + " --tokens " + toks + " --alpha 2 -o " + (dir / "c").string()),
                        2, "--alpha");
  const std::string mask = "-q mask --model " + kTiny + " --tokens " + toks + " --context-end 30 -o " + (dir / "m.h5").string() + " ";
  expect_one_error_line(run_ckv(mask + "--spans 1-3 --heads 9"), 2, "--heads: 9 is outside [0, 2)");
  expect_one_error_line(run_ckv(mask + "--method snapkv --budget 3"), 2, "--budget: 3 is outside (0, 1]");
  expect_one_error_line(run_ckv(mask + "--method snapkv --keep 0"), 2, "--keep 0");
  // 1.0 is a fraction in mask as in bound: keep everything, so nothing to evict.
  expect_one_error_line(run_ckv(mask + "--method snapkv --budget 1.0 --window 4"), 1, "keeps all 30 context entries");
  EXPECT_EQ(run_ckv(mask + "--method snapkv --keep 5 --window 4").exit_code, 0);
  expect_one_error_line(run_ckv("-q dump --model " + kTiny + " --tokens " + toks + " --max-bytes -1 -o " + (dir / "d.h5").string()),
                        2, "--max-bytes");
  expect_one_error_line(run_ckv("-q dump --model " + kTiny + " --tokens " + toks + " --window 0 -o " + (dir / "d.h5").string()),
                        2, "--window 0");
  EXPECT_FALSE(fs::exists(dir / "d.h5"));
}

TEST(HostileFlags, NiahLengthBeyondTheContextIsRefused) {
  const std::string model = default_model_or_empty();
  if (model.empty()) GTEST_SKIP() << "default model absent";
  const fs::path dir = scratch_dir("hostile");
  expect_one_error_line(run_ckv("-q niah --model " + model + " --length 100000 -o " + (dir / "n.jsonl").string()), 2,
                        "--length 100000: longer than the model's context of 8192");
  EXPECT_FALSE(fs::exists(dir / "n.jsonl"));
}

// ---- issue 12 item 6: --device -----------------------------------------------------------

TEST(HostileFlags, DeviceCudaIsRefusedAndProvenanceSaysCpu) {
  const fs::path dir = scratch_dir("hostile");
  const std::string toks = tokens_file(dir, 40);
  // Every subcommand that takes --device, with and without its other arguments: refused in
  // one line naming the subcommand, before any output exists.
  for (const std::string cmd : {"bound", "check", "dump", "mask", "forward", "eval", "profile"})
    for (const std::string device : {"cuda", "cuda:1"}) {
      const RunResult r = run_ckv("-q " + cmd + " --device " + device);
      expect_one_error_line(r, 2, "--device");
      EXPECT_NE(r.output.find(device + ": ckv " + cmd + " runs on the CPU only"), std::string::npos)
          << cmd << ": " << r.output;
    }
  // merge, info, niah and ruler compute nothing on a device: they have no --device (issue 30),
  // and say so as for any unknown flag.
  expect_one_error_line(run_ckv("-q merge --device cuda " + toks + " " + toks), 2, "unknown flag --device for `ckv merge`");
  for (const std::string cmd : {"info", "niah", "ruler"})
    expect_one_error_line(run_ckv("-q " + cmd + " --device cpu"), 2, "unknown flag --device for `ckv " + cmd + "`");
  const RunResult full = run_ckv("-q dump --device cuda --model " + kTiny + " --tokens " + toks + " -o " +
                                 (dir / "cuda.h5").string());
  expect_one_error_line(full, 2, "--device: cuda: ckv dump runs on the CPU only");
  EXPECT_FALSE(fs::exists(dir / "cuda.h5"));
  expect_one_error_line(run_ckv("-q forward --device tpu --model " + kTiny + " --tokens " + toks), 2,
                        "unknown device 'tpu' (known: cpu, cuda, cuda:N)");
  // Provenance records the device of the context that ran, in every output that has one.
  ASSERT_EQ(run_ckv("-q bound --device cpu --model " + kTiny + " --tokens " + toks + " --window 8 -o " + (dir / "b").string()).exit_code, 0);
  EXPECT_EQ(h5::File::open_read(dir / "b.h5").attr_string("device"), "cpu");
  ASSERT_EQ(run_ckv("-q dump --model " + kTiny + " --tokens " + toks + " --what q -o " + (dir / "d.h5").string()).exit_code, 0);
  EXPECT_EQ(h5::File::open_read(dir / "d.h5").attr_string("device"), "cpu");
  ASSERT_EQ(run_ckv("-q mask --device cpu --model " + kTiny + " --tokens " + toks +
                    " --context-end 30 --method snapkv --budget 0.5 --window 4 -o " + (dir / "m.h5").string())
                .exit_code,
            0);
  EXPECT_EQ(h5::File::open_read(dir / "m.h5").attr_string("device"), "cpu");
}

// ---- item 17: BOS ids, overflow names the file -------------------------------------------

TEST(HostileModels, HugeBosIdIsRefusedUnwrapped) {
  std::string b = "GGUF";
  const auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  const auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  const auto str = [&](const std::string& s) { u64(s.size()); b += s; };
  u32(3);
  u64(0);  // tensors
  u64(4);  // keys
  str("tokenizer.ggml.model"); u32(8); str("llama");
  str("tokenizer.ggml.tokens"); u32(9); u32(8); u64(2); str("a"); str("b");
  str("tokenizer.ggml.scores"); u32(9); u32(6); u64(2); u32(0); u32(0);
  str("tokenizer.ggml.bos_token_id"); u32(4); u32(4000000000u);
  const fs::path dir = scratch_dir("hostile");
  std::ofstream(dir / "bos.gguf", std::ios::binary) << b;
  try {
    tokenizer_from_gguf(GgufFile(dir / "bos.gguf"));
    ADD_FAILURE() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.bos_token_id = 4000000000"), std::string::npos) << e.what();
  }
}

TEST(HostileModels, ErrorsEscapeControlBytesAndKeepWhatFollowsNul) {
  try {
    fail<InputError>("{}: bad", std::string("a\x1b[2J\0tail", 10));
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "a\\x1b[2J\\x00tail: bad");
  }
}

}  // namespace
}  // namespace ckv::test
