// `ckv eval`'s pipeline (analysis/cache_eval.h: prefill the context into a KV cache, select,
// physically drop the evicted entries, feed the question, decode greedily) against kvpress
// 0.5.5's KVPressTextGenerationPipeline with the same presses on the same model (the default
// model's GGUF loaded by transformers, float32): tests/data/kvpress/eval_v1.h5, written by
// tests/reference/make_eval_goldens.py (issue 13 item 6).
//
// Tolerance: none. Every generated token of every record x run (the full cache, then each
// method x budget) must be identical; kvpress appends the EOS it stops at, ckv stops before
// it (stop "eos"), so that one token is added back before comparing. The golden's per-step
// top-1 minus top-2 logit margins say how close a divergence would be to a tie.
//
// CI runs 6 of the 21 records (about 35 s on two loaded cores; all 21 took 2 min 10 s):
// CKV_EVAL_GOLDEN_ALL=1 runs all of them, and the generator also runs `ckv eval` over all
// of them and prints the agreement. Measured: 189 of 189 token sequences identical (21
// records x (full + 4 methods x 2 budgets)), here and through the binary; the smallest
// top-1 margin kvpress met along the way was 9e-5 logits, and the tokens still agree.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "analysis/cache_eval.h"
#include "core/thread_pool.h"
#include "data/records.h"
#include "io/h5.h"
#include "model/model.h"
#include "model/tokenizer.h"

namespace ckv {
namespace {

namespace fs = std::filesystem;

const fs::path kEvalGolden = fs::path(CKV_TEST_DATA_DIR) / "kvpress/eval_v1.h5";
const fs::path kModel = fs::path(CKV_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// The records CI checks: two of each haystack (records 0-6 noise 512 tokens, 7-13 gpl2 640,
// 14-20 apache 768); two (noise and apache) under AddressSanitizer (scripts/sanitize.sh), whose -O1
// forward pass is about ten times slower and would pass the test's 600 s limit.
#if defined(__SANITIZE_ADDRESS__)
const std::set<int64_t> kSubset{0, 14};
#else
const std::set<int64_t> kSubset{0, 4, 7, 11, 14, 18};
#endif

const Model& default_model() {
  static const Model model = load_model(kModel);
  return model;
}

struct GoldenRecord {
  std::string id, context, question;
  std::vector<int32_t> prompt;
  int64_t context_end = 0;
  std::vector<std::vector<int32_t>> tokens;  // [1 + methods x budgets]
  std::vector<std::vector<float>> margins;
  std::vector<std::string> labels;
};

struct Golden {
  CacheEvalSettings settings;
  int32_t eos = -1;
  std::vector<GoldenRecord> records;
};

Golden read_golden() {
  const h5::File f = h5::File::open_read(kEvalGolden);
  EXPECT_EQ(f.attr_int("format_version"), 1);
  Golden g;
  CacheEvalSettings& s = g.settings;
  std::string methods = f.attr_string("methods");
  for (size_t at = 0; at <= methods.size();) {
    const size_t end = std::min(methods.find(';', at), methods.size());
    s.methods.push_back(MethodSpec::parse(methods.substr(at, end - at)));
    at = end + 1;
  }
  s.budgets = f.open_dataset("budgets").read<double>();
  s.params.window = f.attr_int("window");
  s.params.kernel = f.attr_int("kernel");
  EXPECT_EQ(f.attr_string("pool"), "avg");
  s.params.pool = PoolKind::Avg;
  s.params.alpha_safe = f.attr_double("alpha_safe");
  s.params.eps = f.attr_double("eps");
  s.params.alpha = f.attr_double("alpha");
  EXPECT_EQ(f.attr_string("compress"), "context");
  s.compress_prompt = false;
  s.max_new_tokens = f.attr_int("max_new_tokens");
  g.eos = static_cast<int32_t>(f.attr_int("eos_id"));
  const h5::Group records = f.open_group("records");
  for (int64_t i = 0; i < f.attr_int("n_records"); ++i) {
    const h5::Group r = records.open_group(std::to_string(i));
    GoldenRecord rec;
    rec.id = r.attr_string("id");
    rec.context = r.attr_string("context");
    rec.question = r.attr_string("question");
    rec.context_end = r.attr_int("context_end");
    rec.prompt = r.open_dataset("prompt").read<int32_t>();
    const h5::Group runs = r.open_group("runs");
    const auto n_runs = static_cast<int64_t>(1 + s.methods.size() * s.budgets.size());
    for (int64_t k = 0; k < n_runs; ++k) {
      const h5::Group run = runs.open_group(std::to_string(k));
      const int64_t b = run.attr_int("budget_index");
      rec.labels.push_back(b < 0 ? run.attr_string("method")
                                 : fmt::format("{} {:g}", run.attr_string("method"),
                                               s.budgets[static_cast<size_t>(b)]));
      rec.tokens.push_back(run.open_dataset("tokens").read<int32_t>());
      rec.margins.push_back(run.open_dataset("margin").read<float>());
    }
    g.records.push_back(std::move(rec));
  }
  return g;
}

std::vector<int32_t> as_kvpress(const CacheEvalRun& run, int32_t eos) {
  std::vector<int32_t> t = run.decoded.tokens;
  if (run.decoded.stop == "eos") t.push_back(eos);
  return t;
}

// The golden's prompt ids are what ckv itself makes of the record's context and question
// (tokenize_record, no chat template), so `ckv eval` on the JSONL sees the same prompt.
TEST(EvalGolden, PromptIdsAreCkvTokenization) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "default model absent";
  const Golden g = read_golden();
  ASSERT_GE(g.records.size(), 20u);
  const Tokenizer& tok = *default_model().tokenizer;
  EXPECT_EQ(tok.eos_id(), g.eos);
  for (const GoldenRecord& r : g.records) {
    InputRecord in;
    in.id = r.id;
    in.context = r.context;
    in.question = r.question;
    const RecordPrompt p = tokenize_record(in, tok, false);
    EXPECT_EQ(p.tokens, r.prompt) << r.id;
    EXPECT_EQ(p.context_end, r.context_end) << r.id;
  }
}

TEST(EvalGolden, GeneratedTokensMatchKvpressPipeline) {
  if (!fs::exists(kModel)) GTEST_SKIP() << "default model absent";
  const Golden g = read_golden();
  const char* all_env = std::getenv("CKV_EVAL_GOLDEN_ALL");
  const bool all = all_env != nullptr && std::string(all_env) == "1";
  const Model& model = default_model();
  Forward fwd(model, {.threads = 2});
  ThreadPool pool(2);
  int64_t same = 0, total = 0, checked = 0;
  for (size_t i = 0; i < g.records.size(); ++i) {
    if (!all && !kSubset.contains(static_cast<int64_t>(i))) continue;
    const GoldenRecord& r = g.records[i];
    ++checked;
    const CacheEvalResult res = evaluate_with_cache(
        fwd, model,
        {.id = r.id, .prompt = r.prompt, .context_end = r.context_end, .answer_ids = {}},
        g.settings, pool);
    ASSERT_EQ(res.runs.size() + 1, r.tokens.size()) << r.id;
    for (size_t k = 0; k < r.tokens.size(); ++k) {
      const CacheEvalRun& run = k == 0 ? res.full : res.runs[k - 1];
      const std::vector<int32_t> ours = as_kvpress(run, g.eos);
      ++total;
      if (ours == r.tokens[k]) {
        ++same;
        continue;
      }
      size_t at = 0;
      while (at < ours.size() && at < r.tokens[k].size() && ours[at] == r.tokens[k][at]) ++at;
      ADD_FAILURE() << r.id << " " << r.labels[k] << ": tokens differ from kvpress's at step " << at
                    << " (margin " << (at < r.margins[k].size() ? r.margins[k][at] : -1.0f)
                    << "): ckv " << ::testing::PrintToString(ours) << ", kvpress "
                    << ::testing::PrintToString(r.tokens[k]);
    }
  }
  fmt::print("ckv eval vs kvpress: {} of {} record x run token sequences identical ({} records)\n",
             same, total, checked);
  EXPECT_EQ(same, total);
  EXPECT_EQ(checked,
            all ? static_cast<int64_t>(g.records.size()) : static_cast<int64_t>(kSubset.size()));
  EXPECT_EQ(total, checked * static_cast<int64_t>(1 + g.settings.methods.size() *
                                                          g.settings.budgets.size()));
}

}  // namespace
}  // namespace ckv
