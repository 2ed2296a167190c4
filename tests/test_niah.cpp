// ckv niah generation (lib/data/niah.h): determinism and the structural promises — length
// in tokens of the tokenizer, needles at their spans and depths, answers in the context,
// distractors of the needles' token length that overlap nothing. Prompts are read back
// through the same path `ckv dump --input` uses (parse_record + tokenize_record).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/niah.h"
#include "data/records.h"
#include "model/tokenizer.h"

namespace ckv {
namespace {

const Tokenizer& smollm() {
  static const std::unique_ptr<Tokenizer> tok =
      tokenizer_from_json(std::filesystem::path(CKV_TEST_DATA_DIR) / "tokenizers" / "smollm.tokenizer.json");
  return *tok;
}

std::string essay() {
  // Our own README as an essay haystack: real prose with punctuation and non-ASCII text.
  std::ifstream in(std::filesystem::path(CKV_SOURCE_DIR) / "README.md", std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string cp_substr(const std::string& s, SpanRange r) {
  const size_t a = utf8_offset(s, r.start, "test"), b = utf8_offset(s, r.end, "test");
  return s.substr(a, b - a);
}

std::string generate(const NiahOptions& o, const std::string& hay) {
  std::string out;
  for (int64_t i = 0; i < o.count; ++i) out += make_niah_record(o, smollm(), hay, i).to_jsonl(o) + "\n";
  return out;
}

// Checks one record against everything the generator promises.
void check_record(const NiahOptions& o, const NiahRecord& rec, int64_t index) {
  SCOPED_TRACE(rec.id);
  const std::string type = o.value_kind == NiahValueKind::Numbers ? "number" : "uuid";
  const InputRecord in = parse_record(rec.to_jsonl(o), "niah", 1, index);
  EXPECT_EQ(in.context, rec.context);
  EXPECT_EQ(in.answers, rec.answers);  // what `ckv eval` scores, per needle
  EXPECT_EQ(in.task, AnswerTask::Niah);
  const RecordPrompt p = tokenize_record(in, smollm(), false);
  const auto n = static_cast<int64_t>(p.tokens.size());
  EXPECT_EQ(n, rec.n_tokens);
  EXPECT_LE(std::abs(n - o.length), static_cast<int64_t>(0.01 * static_cast<double>(o.length))) << n;

  // Template.
  EXPECT_EQ(rec.context.rfind(fmt::format("Some special magic {0}s are hidden within the following text. Make "
                                          "sure to memorize it. I will quiz you about the {0}s afterwards.\n", type), 0), 0u);
  const bool plural = o.values > 1 || o.queries > 1;
  const std::string prefix = plural ? fmt::format("What are all the special magic {}s for ", type)
                                    : fmt::format("What is the special magic {} for ", type);
  EXPECT_EQ(rec.question.rfind(prefix, 0), 0u) << rec.question;
  EXPECT_NE(rec.question.find(plural ? " mentioned in the provided text are" : " mentioned in the provided text is"),
            std::string::npos);

  // Needles: text at the char span, answers in context, token span decodes to the needle.
  const auto& needles = in.spans.at("needle");
  ASSERT_EQ(static_cast<int64_t>(needles.size()), o.queries * o.values);
  ASSERT_EQ(rec.answers.size(), needles.size());
  const auto& tneedles = p.token_spans.at("needle");
  const size_t hay_start = rec.context.find('\n') + 1;
  const auto hay_len = static_cast<double>(rec.context.size() - 1 - hay_start);  // ASCII in the noise tests
  for (size_t i = 0; i < needles.size(); ++i) {
    const std::string text = cp_substr(rec.context, needles[i]);
    EXPECT_EQ(text.rfind(fmt::format("One of the special magic {}s for ", type), 0), 0u) << text;
    EXPECT_NE(text.find(fmt::format(" is: {}.", rec.answers[i])), std::string::npos) << text;
    EXPECT_EQ(text.back(), '.');
    const std::string key = text.substr(text.find(" for ") + 5, text.find(" is: ") - text.find(" for ") - 5);
    EXPECT_NE(rec.question.find(key), std::string::npos) << "asked key " << key;
    std::vector<int32_t> ids(p.tokens.begin() + tneedles[i].start, p.tokens.begin() + tneedles[i].end);
    std::string decoded = smollm().decode(ids);
    if (!decoded.empty() && decoded[0] == ' ') decoded.erase(0, 1);
    EXPECT_EQ(decoded, text) << "needle tokens";
    // Every value occurs exactly once in the context.
    EXPECT_EQ(rec.context.find(rec.answers[i]), rec.context.rfind(rec.answers[i]));
    if (!o.depths.empty() && i == 0) {
      const double want = o.depths[static_cast<size_t>(index) % o.depths.size()];
      // Haystack characters before the needle over all haystack characters, needles excluded
      // (ASCII here: bytes are characters).
      double before = static_cast<double>(needles[i].start) - static_cast<double>(hay_start), needle_chars = 0;
      for (const auto& [name, list] : in.spans)
        if (name != "distractor")
          for (const SpanRange& s : list) {
            needle_chars += static_cast<double>(s.end - s.start + 1);
            if (s.start < needles[i].start) before -= static_cast<double>(s.end - s.start + 1);
          }
      const double at = before / (hay_len - needle_chars);
      EXPECT_NEAR(at, want, 0.03) << "needle depth";
      EXPECT_NEAR(rec.depths[0], want, 0.03);
    }
  }
  // Distractors: token length of their needle, inside the haystack, overlapping nothing.
  const auto& dist = in.spans.at("distractor");
  const auto& tdist = p.token_spans.at("distractor");
  ASSERT_EQ(static_cast<int64_t>(dist.size()), static_cast<int64_t>(needles.size()) * o.distractors);
  std::vector<SpanRange> all(needles.begin(), needles.end());
  if (in.spans.count("other_needle")) {
    EXPECT_EQ(static_cast<int64_t>(in.spans.at("other_needle").size()), (std::max(o.keys, o.queries) - o.queries) * o.values);
    for (const SpanRange& s : in.spans.at("other_needle")) all.push_back(s);
  }
  for (size_t d = 0; d < dist.size(); ++d) {
    const size_t owner = d / static_cast<size_t>(o.distractors);
    EXPECT_EQ(tdist[d].end - tdist[d].start, tneedles[owner].end - tneedles[owner].start) << "distractor " << d;
    const std::string text = cp_substr(rec.context, dist[d]);
    EXPECT_EQ(text.find("special magic"), std::string::npos) << text;
    EXPECT_GE(utf8_offset(rec.context, dist[d].start, "t"), hay_start);
    for (const SpanRange& s : all) EXPECT_FALSE(dist[d].start < s.end && s.start < dist[d].end) << "overlap " << d;
    for (size_t e = 0; e < d; ++e) EXPECT_FALSE(dist[d].start < dist[e].end && dist[e].start < dist[d].end);
  }
}

TEST(Niah, SameSeedSameBytesOtherSeedOther) {
  NiahOptions o{.length = 600, .count = 3, .seed = 7};
  const std::string a = generate(o, kNiahNoise), b = generate(o, kNiahNoise);
  EXPECT_EQ(a, b);
  o.seed = 8;
  EXPECT_NE(a, generate(o, kNiahNoise));
  // Records are independent: record 2 does not depend on how many come before.
  o.seed = 7;
  EXPECT_EQ(make_niah_record(o, smollm(), kNiahNoise, 2).to_jsonl(o), a.substr(a.rfind("{\"id\"")).substr(0, a.size() - a.rfind("{\"id\"") - 1));
}

TEST(Niah, SingleNeedleOnDepthGrid) {
  const NiahOptions o{.length = 1024, .count = 5, .seed = 1, .depths = {0, 0.25, 0.5, 0.75, 1}};
  for (int64_t i = 0; i < o.count; ++i) check_record(o, make_niah_record(o, smollm(), kNiahNoise, i), i);
}

TEST(Niah, LengthsAndUuids) {
  for (int64_t length : {800, 2000, 4096}) {
    const NiahOptions o{.length = length, .count = 2, .seed = 3, .value_kind = NiahValueKind::Uuids, .distractors = 2};
    for (int64_t i = 0; i < o.count; ++i) {
      const NiahRecord r = make_niah_record(o, smollm(), kNiahNoise, i);
      check_record(o, r, i);
      EXPECT_EQ(r.answers[0].size(), 36u);
      EXPECT_EQ(r.answers[0][14], '4');
    }
  }
}

TEST(Niah, MultiKeyValueQuery) {
  const NiahOptions variants[] = {
      {.length = 800, .count = 2, .seed = 5, .keys = 4},
      {.length = 800, .count = 2, .seed = 5, .values = 3},
      {.length = 800, .count = 2, .seed = 5, .keys = 3, .queries = 2},
      {.length = 800, .count = 2, .seed = 5, .keys = 2, .values = 2, .queries = 2},
  };
  for (const NiahOptions& o : variants)
    for (int64_t i = 0; i < o.count; ++i) check_record(o, make_niah_record(o, smollm(), kNiahNoise, i), i);
  const NiahRecord r = make_niah_record(variants[2], smollm(), kNiahNoise, 0);
  EXPECT_NE(r.question.find(", and "), std::string::npos) << r.question;
}

TEST(Niah, EssayHaystack) {
  const NiahOptions o{.length = 1500, .count = 2, .seed = 2, .depths = {0.5}, .haystack_name = "README.md"};
  const std::string hay = essay();
  ASSERT_FALSE(hay.empty());
  for (int64_t i = 0; i < o.count; ++i) {
    const NiahRecord r = make_niah_record(o, smollm(), hay, i);
    const InputRecord in = parse_record(r.to_jsonl(o), "niah", 1, i);
    const RecordPrompt p = tokenize_record(in, smollm(), false);
    EXPECT_LE(std::abs(static_cast<int64_t>(p.tokens.size()) - o.length), 15);
    EXPECT_NE(r.context.find(r.answers[0]), std::string::npos);
    EXPECT_EQ(cp_substr(r.context, in.spans.at("needle")[0]).rfind("One of the special magic numbers", 0), 0u);
    const auto& tn = p.token_spans.at("needle")[0];
    const auto& td = p.token_spans.at("distractor")[0];
    EXPECT_EQ(tn.end - tn.start, td.end - td.start);
    EXPECT_NEAR(r.depths[0], 0.5, 0.05);
  }
}

TEST(Niah, RefusesImpossibleLength) {
  const NiahOptions o{.length = 20};
  EXPECT_THROW(make_niah_record(o, smollm(), kNiahNoise, 0), InputError);
  EXPECT_THROW(make_niah_record(NiahOptions{}, smollm(), "   \n", 0), InputError);
}

}  // namespace
}  // namespace ckv
