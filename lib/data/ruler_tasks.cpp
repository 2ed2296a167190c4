// RULER's variable tracking, common words extraction and frequent words extraction
// (scripts/data/synthetic/{variable_tracking,common_words_extraction,freq_words_extraction}.py
// with the arguments of scripts/synthetic.yaml).
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "data/ruler_task.h"
#include "model/tokenizer.h"

namespace ckv {

namespace {

// --- vt: one chain of 4 hops in the noise haystack, after a one-shot example ---------------

constexpr int64_t kVtHops = 4;

std::string random_upper(Rng& rng, int64_t letters) {
  std::string s;
  for (int64_t i = 0; i < letters; ++i) s += static_cast<char>('A' + rng.below(26));
  return s;
}

class VtGenerator final : public RulerTaskGenerator {
 public:
  VtGenerator(const Tokenizer& tok, uint64_t seed) : icl_stream_(splitmix64(seed ^ 0x69636cull)) {
    // RULER's one-shot example: 3-letter variables, value 12345, its own noise haystack the
    // largest whose prompt (answer prefix included) takes at most 500 tokens.
    auto icl_tokens = [&](int64_t n) {
      Rng rng(icl_stream_);
      return static_cast<int64_t>(
          tok.encode(example(rng, n, {"AAA", "BBB", "CCC", "DDD", "EEE"}, "12345"), false, true)
              .size());
    };
    icl_size_ = icl_tokens(kVtHops + 1) > 500
                    ? kVtHops + 1
                    : largest_fitting(kVtHops + 1, [&](int64_t n) { return icl_tokens(n) <= 500; });
  }

  int64_t min_size() const override { return kVtHops + 1; }

  nlohmann::ordered_json settings() const override {
    nlohmann::ordered_json s;
    s["haystack"] = "noise";
    s["haystack_unit"] = "sentences";
    s["num_chains"] = 1;
    s["num_hops"] = kVtHops;
    s["example_haystack_size"] = icl_size_;
    s["stand_in"] = nlohmann::ordered_json::array();
    return s;
  }

  RulerPrompt build(int64_t, uint64_t stream, int64_t size) const override {
    Rng rng(stream);
    // The example, with fresh names and value (RULER's randomize_icl) at its fixed positions.
    std::vector<std::string> icl_vars = distinct_vars(rng, 3);
    const std::string icl_value = std::to_string(rng.between(10000, 99998));
    Rng icl_rng(icl_stream_);
    std::string icl = example(icl_rng, icl_size_, icl_vars, icl_value) + " ";
    for (size_t i = 0; i < icl_vars.size(); ++i) icl += (i ? " " : "") + icl_vars[i];
    icl += "\n";

    const std::vector<std::string> vars = distinct_vars(rng, 5);
    const std::string value = std::to_string(rng.between(10000, 99998));
    RulerPrompt p;
    TextBuilder b;
    p.spans["example"].push_back(b.add(icl));
    b.add("\n");
    std::vector<SpanRange> chain_spans;
    b.add(head());
    add_haystack(b, rng, size, chain(vars, value), &chain_spans);
    b.add("\n");
    p.spans["needle"] = chain_spans;
    p.context = std::move(b.text);
    p.question = question(value);
    p.answers = vars;
    return p;
  }

 private:
  static std::string head() {
    return "Memorize and track the chain(s) of variable assignment hidden in the following "
           "text.\n\n";
  }
  static std::string question(const std::string& value) {
    return fmt::format(
        "Question: Find all variables that are assigned the value {0} in the text above. Answer: "
        "According to the chain(s) of variable assignment in the text above, {1} variables are "
        "assigned the value {0}, they are: ",
        value, kVtHops + 1);
  }
  static std::vector<std::string> chain(const std::vector<std::string>& vars,
                                        const std::string& value) {
    std::vector<std::string> c{fmt::format("VAR {} = {}", vars[0], value)};
    for (int64_t j = 0; j < kVtHops; ++j)
      c.push_back(fmt::format("VAR {} = VAR {} ", vars[static_cast<size_t>(j + 1)],
                              vars[static_cast<size_t>(j)]));
    return c;
  }
  static std::vector<std::string> distinct_vars(Rng& rng, int64_t letters) {
    std::vector<std::string> v;
    std::set<std::string> seen;
    while (static_cast<int64_t>(v.size()) < kVtHops + 1) {
      std::string s = random_upper(rng, letters);
      if (seen.insert(s).second) v.push_back(s);
    }
    return v;
  }
  // `size` noise lines with chain statement j before the line RULER's sorted
  // random.sample(range(size), 5)[j] names; lines joined by "\n".
  static void add_haystack(TextBuilder& b, Rng& rng, int64_t size,
                           const std::vector<std::string>& c, std::vector<SpanRange>* spans) {
    std::vector<int64_t> at = rng.sample(size, static_cast<int64_t>(c.size()));
    std::sort(at.begin(), at.end());
    size_t next = 0;
    for (int64_t line = 0; line < size; ++line) {
      if (line > 0) b.add("\n");
      if (next < at.size() && at[next] == line) {
        const SpanRange sp = b.add(c[next++]);
        if (spans) spans->push_back(sp);
        b.add("\n");
      }
      b.add(kRulerNoise);
    }
  }
  // The whole example prompt, answer prefix included, without its answer.
  static std::string example(Rng& rng, int64_t size, const std::vector<std::string>& vars,
                             const std::string& value) {
    TextBuilder b;
    b.add(head());
    add_haystack(b, rng, size, chain(vars, value), nullptr);
    b.add("\n");
    return b.text + question(value);
  }

  uint64_t icl_stream_;
  int64_t icl_size_ = 0;
};

// --- cwe: a numbered list where 10 words come 30 times and the others 3 --------------------

class CweGenerator final : public RulerTaskGenerator {
 public:
  explicit CweGenerator(int64_t length) : short_(length < 4096) {}

  int64_t min_size() const override { return 10; }

  nlohmann::ordered_json settings() const override {
    nlohmann::ordered_json s;
    s["haystack"] = "words";
    s["haystack_unit"] = "distinct words";
    s["freq_cw"] = short_ ? 6 : 30;
    s["freq_ucw"] = short_ ? 1 : 3;
    s["num_cw"] = 10;
    s["num_fewshot"] = 1;
    s["stand_in"] = {kStandInWords};
    return s;
  }

  RulerPrompt build(int64_t, uint64_t stream, int64_t size) const override {
    Rng rng(stream);
    // RULER: below 4096 tokens the example has 20 words (3 and 1 repeats) and the list 6 and 1;
    // else 40 words (10 and 3) and 30 and 3.
    std::vector<std::string> ex_common;
    const std::string ex =
        numbered(rng, short_ ? 20 : 40, 10, short_ ? 3 : 10, short_ ? 1 : 3, ex_common, nullptr);
    std::string shot = head() + ex + "\n" + question() + " ";
    for (size_t i = 0; i < ex_common.size(); ++i)
      shot += fmt::format("{}{}. {}", i ? " " : "", i + 1, ex_common[i]);
    RulerPrompt p;
    TextBuilder b;
    p.spans["example"].push_back(b.add(shot));
    b.add("\n");
    b.add(head());
    std::vector<std::string> common;
    std::vector<SpanRange> spans;
    const int64_t offset = b.cp;
    const std::string list =
        numbered(rng, size, 10, short_ ? 6 : 30, short_ ? 1 : 3, common, &spans);
    for (SpanRange& s : spans) s = {s.start + offset, s.end + offset};
    b.add(list);
    b.add("\n");
    p.spans["needle"] = spans;
    p.context = std::move(b.text);
    p.question = question();
    p.answers = common;
    return p;
  }

 private:
  static std::string head() {
    return "Below is a numbered list of words. In these words, some appear more often than others. "
           "Memorize the "
           "ones that appear most often.\n";
  }
  static std::string question() {
    return "Question: What are the 10 most common words in the above list? Answer: The top 10 "
           "words that appear "
           "most often in the list are:";
  }
  // RULER's get_example: `words` distinct words, the first 10 common; the list shuffled and
  // numbered "1. w 2. w ...". Spans (code points of the returned text) of the common items.
  static std::string numbered(Rng& rng, int64_t words, int64_t num_common, int64_t common_repeats,
                              int64_t uncommon_repeats, std::vector<std::string>& common,
                              std::vector<SpanRange>* spans) {
    const std::vector<std::string>& all = ruler_words();
    if (words > static_cast<int64_t>(all.size()))
      fail<InputError>("ckv ruler: cwe needs {} distinct words, the word list has {}", words,
                       all.size());
    std::vector<int64_t> pick = rng.sample(static_cast<int64_t>(all.size()), words);
    std::vector<int64_t> list;  // indices into pick
    for (int64_t r = 0; r < common_repeats; ++r)
      for (int64_t i = 0; i < num_common; ++i) list.push_back(i);
    for (int64_t r = 0; r < uncommon_repeats; ++r)
      for (int64_t i = num_common; i < words; ++i) list.push_back(i);
    rng.shuffle(list);
    common.clear();
    for (int64_t i = 0; i < num_common; ++i)
      common.push_back(all[static_cast<size_t>(pick[static_cast<size_t>(i)])]);
    TextBuilder b;
    for (size_t i = 0; i < list.size(); ++i) {
      if (i) b.add(" ");
      const SpanRange sp = b.add(fmt::format(
          "{}. {}", i + 1, all[static_cast<size_t>(pick[static_cast<size_t>(list[i])])]));
      if (spans && list[i] < num_common) spans->push_back(sp);
    }
    return b.text;
  }

  bool short_;
};

// --- fwe: coded words with Zipf (alpha 2) counts; the top rank is the noise "..." ---------

constexpr double kZeta2 = 1.6449340668482264;  // zeta(2) = pi^2 / 6, scipy's zeta(2.0)

class FweGenerator final : public RulerTaskGenerator {
 public:
  explicit FweGenerator(int64_t length) : vocab_size_(std::max<int64_t>((length - 50) / 50, 5)) {}

  int64_t min_size() const override { return 27; }  // the fourth rank appears at least once

  nlohmann::ordered_json settings() const override {
    nlohmann::ordered_json s;
    s["haystack"] = "coded words";
    s["haystack_unit"] = "words (num_words of the zeta counts)";
    s["alpha"] = 2.0;
    s["coded_wordlen"] = 6;
    s["vocab_size"] = vocab_size_;
    s["stand_in"] = nlohmann::ordered_json::array();
    return s;
  }

  RulerPrompt build(int64_t, uint64_t stream, int64_t size) const override {
    Rng rng(stream);
    std::vector<std::string> vocab;
    std::set<std::string> seen;
    while (static_cast<int64_t>(vocab.size()) < vocab_size_) {
      std::string w;
      for (int i = 0; i < 6; ++i) w += static_cast<char>('a' + rng.below(26));
      if (seen.insert(w).second) vocab.push_back(w);
    }
    vocab[0] = "...";
    // Count of rank k: int(num_words * k^-2 / zeta(2)); multiplications and divisions only,
    // so no compiler may fuse them and every machine rounds alike.
    std::vector<int64_t> words;
    for (int64_t k = 1; k <= vocab_size_; ++k) {
      const double kk = static_cast<double>(k) * static_cast<double>(k);
      const auto count = static_cast<int64_t>(static_cast<double>(size) / kk / kZeta2);
      for (int64_t c = 0; c < count; ++c) words.push_back(k - 1);
    }
    rng.shuffle(words);
    RulerPrompt p;
    TextBuilder b;
    b.add(
        "Read the following coded text and track the frequency of each coded word. Find the three "
        "most "
        "frequently appeared coded words. ");
    for (size_t i = 0; i < words.size(); ++i) {
      if (i) b.add(" ");
      const SpanRange sp = b.add(vocab[static_cast<size_t>(words[i])]);
      if (words[i] >= 1 && words[i] <= 3) p.spans["needle"].push_back(sp);
    }
    b.add("\n");
    p.context = std::move(b.text);
    p.question =
        "Question: Do not provide any explanation. Please ignore the dots '....'. What are the "
        "three most "
        "frequently appeared words in the above coded text? Answer: According to the coded text "
        "above, the "
        "three most frequently appeared words are:";
    p.answers = {vocab[1], vocab[2], vocab[3]};
    return p;
  }

 private:
  int64_t vocab_size_;
};

}  // namespace

std::unique_ptr<RulerTaskGenerator> make_vt_generator(const Tokenizer& tokenizer, uint64_t seed) {
  return std::make_unique<VtGenerator>(tokenizer, seed);
}
std::unique_ptr<RulerTaskGenerator> make_cwe_generator(int64_t length) {
  return std::make_unique<CweGenerator>(length);
}
std::unique_ptr<RulerTaskGenerator> make_fwe_generator(int64_t length) {
  return std::make_unique<FweGenerator>(length);
}

}  // namespace ckv
