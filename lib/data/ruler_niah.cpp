// RULER's eight needle tasks (scripts/data/synthetic/niah.py with the arguments of
// scripts/synthetic.yaml): haystack noise / essay / needle, keys words / uuids, values
// numbers / uuids, and how many keys, values per key and asked keys.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "data/ruler_task.h"

namespace ckv {

namespace {

enum class Haystack { Noise, Essay, Needle };
enum class Kind { Words, Numbers, Uuids };

struct NiahArgs {
  Haystack haystack;
  Kind key, value;
  int64_t keys, values, queries;
};

NiahArgs niah_args(std::string_view name) {
  using H = Haystack;
  using K = Kind;
  if (name == "niah_single_1") return {H::Noise, K::Words, K::Numbers, 1, 1, 1};
  if (name == "niah_single_2") return {H::Essay, K::Words, K::Numbers, 1, 1, 1};
  if (name == "niah_single_3") return {H::Essay, K::Words, K::Uuids, 1, 1, 1};
  if (name == "niah_multikey_1") return {H::Essay, K::Words, K::Numbers, 4, 1, 1};
  if (name == "niah_multikey_2") return {H::Needle, K::Words, K::Numbers, 1, 1, 1};
  if (name == "niah_multikey_3") return {H::Needle, K::Uuids, K::Uuids, 1, 1, 1};
  if (name == "niah_multivalue") return {H::Essay, K::Words, K::Numbers, 1, 4, 1};
  return {H::Essay, K::Words, K::Numbers, 1, 1, 4};  // niah_multiquery
}

std::string_view kind_name(Kind k) {
  return k == Kind::Words ? "words" : k == Kind::Numbers ? "numbers" : "uuids";
}

// RULER's generate_random: a word key is an adjective-noun pair there, two words of our list here.
std::string random_of(Rng& rng, Kind kind) {
  if (kind == Kind::Numbers) return random_number7(rng);
  if (kind == Kind::Uuids) return random_uuid4(rng);
  const std::vector<std::string>& w = ruler_words();
  const std::string& a = w[static_cast<size_t>(rng.below(w.size()))];
  return a + "-" + w[static_cast<size_t>(rng.below(w.size()))];
}

// Whether an essay word ends a sentence: its last character, past closing quotes and
// brackets, is . ! or ?.
bool ends_sentence(const std::string& word) {
  size_t end = word.size();
  while (end > 0 && std::string_view(")]}\"'").find(word[end - 1]) != std::string_view::npos) --end;
  return end > 0 && (word[end - 1] == '.' || word[end - 1] == '!' || word[end - 1] == '?');
}

// RULER's DEPTHS: np.round(np.linspace(0, 100, 40)) (no value lies at a half).
int64_t ruler_depth(int64_t i) {
  return static_cast<int64_t>(100.0 * static_cast<double>(i) / 39.0 + 0.5);
}

class NiahGenerator final : public RulerTaskGenerator {
 public:
  explicit NiahGenerator(const RulerTask& task) : a_(niah_args(task.name)) {
    a_.keys = std::max(a_.keys, a_.queries);
  }

  int64_t min_size() const override {
    return a_.haystack == Haystack::Essay ? 1 : a_.keys * a_.values;
  }

  nlohmann::ordered_json settings() const override {
    nlohmann::ordered_json s;
    s["haystack"] = a_.haystack == Haystack::Noise   ? "noise"
                    : a_.haystack == Haystack::Essay ? "essay"
                                                     : "needle";
    s["haystack_unit"] = a_.haystack == Haystack::Essay ? "words" : "sentences";
    s["type_needle_k"] = kind_name(a_.key);
    s["type_needle_v"] = kind_name(a_.value);
    s["num_needle_k"] = a_.keys;
    s["num_needle_v"] = a_.values;
    s["num_needle_q"] = a_.queries;
    nlohmann::ordered_json stand_in = nlohmann::ordered_json::array();
    if (a_.key == Kind::Words)
      stand_in.push_back(std::string(kStandInWords) + "; a key is two words joined by '-'");
    if (a_.haystack == Haystack::Essay) {
      stand_in.push_back(kStandInEssay);
      stand_in.push_back(kStandInSentences);
    }
    s["stand_in"] = stand_in;
    return s;
  }

  RulerPrompt build(int64_t, uint64_t stream, int64_t size) const override {
    Rng rng(stream);
    const std::string type(kind_name(a_.value));  // the needle says "numbers" / "uuids", as RULER's
    std::vector<std::string> keys;
    struct Placed {
      int64_t key;
      std::string value;
    };
    std::vector<Placed> needles;
    std::set<std::string> used;  // distinct keys and values in a record
    auto fresh = [&](Kind kind) {
      std::string s = random_of(rng, kind);
      while (!used.insert(s).second) s = random_of(rng, kind);
      return s;
    };
    for (int64_t k = 0; k < a_.keys; ++k) {
      keys.push_back(fresh(a_.key));
      for (int64_t v = 0; v < a_.values; ++v) needles.push_back({k, fresh(a_.value)});
    }
    rng.shuffle(needles);
    auto needle_text = [&](const std::string& key, const std::string& value) {
      return fmt::format("One of the special magic {} for {} is: {}.", type, key, value);
    };

    const bool single = a_.queries * a_.values == 1;
    // RULER's singular form replaces Some/are all/are and drops the type's "s".
    const std::string t = single ? type.substr(0, type.size() - 1) : type;
    RulerPrompt p;
    TextBuilder b;
    b.add(single ? fmt::format("A special magic {0} is hidden within the following text. Make sure "
                               "to memorize it. "
                               "I will quiz you about the {0} afterwards.\n",
                               t)
                 : fmt::format(
                       "Some special magic {0} are hidden within the following text. Make sure to "
                       "memorize it. I will quiz you about the {0} afterwards.\n",
                       t));
    std::vector<SpanRange> needle_spans(needles.size());
    if (a_.haystack == Haystack::Essay) {
      const std::vector<std::string>& words = ruler_essay_words();
      auto word = [&](int64_t j) -> const std::string& {
        return words[static_cast<size_t>(j) % words.size()];
      };
      std::vector<int64_t> sentence_end;  // word index after each sentence's last word
      for (int64_t j = 0; j < size; ++j)
        if (ends_sentence(word(j)) || j + 1 == size) sentence_end.push_back(j + 1);
      const auto n_sent = static_cast<int64_t>(sentence_end.size());
      std::vector<int64_t> at;  // sentence index each needle precedes, sorted
      for (const int64_t d : rng.sample(40, static_cast<int64_t>(needles.size())))
        at.push_back(static_cast<int64_t>(static_cast<double>(n_sent) *
                                          (static_cast<double>(ruler_depth(d)) / 100.0)));
      std::sort(at.begin(), at.end());
      bool first = true;
      auto piece = [&](std::string_view s) {
        if (!first) b.add(" ");
        first = false;
        return b.add(s);
      };
      size_t next = 0;
      int64_t j = 0;
      for (int64_t s = 0; s <= n_sent; ++s) {
        while (next < at.size() && at[next] == s) {
          needle_spans[next] =
              piece(needle_text(keys[static_cast<size_t>(needles[next].key)], needles[next].value));
          ++next;
        }
        if (s < n_sent)
          for (; j < sentence_end[static_cast<size_t>(s)]; ++j) piece(word(j));
      }
    } else {
      // Sentences (noise) or random needles (needle), one a line; the needles before the lines
      // RULER's random.sample(range(size), needles) picks.
      std::vector<int64_t> at = rng.sample(size, static_cast<int64_t>(needles.size()));
      std::vector<int64_t> needle_at(static_cast<size_t>(size), -1);
      for (size_t i = 0; i < at.size(); ++i)
        needle_at[static_cast<size_t>(at[i])] = static_cast<int64_t>(i);
      for (int64_t line = 0; line < size; ++line) {
        if (line > 0) b.add("\n");
        if (const int64_t i = needle_at[static_cast<size_t>(line)]; i >= 0) {
          needle_spans[static_cast<size_t>(i)] =
              b.add(needle_text(keys[static_cast<size_t>(needles[static_cast<size_t>(i)].key)],
                                needles[static_cast<size_t>(i)].value));
          b.add("\n");
        }
        if (a_.haystack == Haystack::Noise) {
          b.add(kRulerNoise);
        } else {
          const std::string key = random_of(rng, a_.key), value = random_of(rng, a_.value);
          p.spans["other_needle"].push_back(b.add(needle_text(key, value)));
        }
      }
    }
    b.add("\n");
    // The asked keys: RULER's random.sample(range(keys), queries); answers in that order.
    std::vector<std::string> asked;
    for (const int64_t k : rng.sample(a_.keys, a_.queries)) {
      asked.push_back(keys[static_cast<size_t>(k)]);
      for (size_t i = 0; i < needles.size(); ++i)
        if (needles[i].key == k) {
          p.answers.push_back(needles[i].value);
          p.spans["needle"].push_back(needle_spans[i]);
        }
    }
    for (size_t i = 0; i < needles.size(); ++i)
      if (std::find(asked.begin(), asked.end(), keys[static_cast<size_t>(needles[i].key)]) ==
          asked.end())
        p.spans["other_needle"].push_back(needle_spans[i]);
    const std::string query = join_keys(asked);
    p.question =
        single ? fmt::format(
                     "What is the special magic {0} for {1} mentioned in the provided text? The "
                     "special magic {0} for {1} mentioned in the provided text is",
                     t, query)
               : fmt::format(
                     "What are all the special magic {0} for {1} mentioned in the provided text? "
                     "The special magic {0} for {1} mentioned in the provided text are",
                     t, query);
    p.context = std::move(b.text);
    if (auto it = p.spans.find("other_needle"); it != p.spans.end())
      std::sort(it->second.begin(), it->second.end(),
                [](const SpanRange& x, const SpanRange& y) { return x.start < y.start; });
    return p;
  }

 private:
  NiahArgs a_;
};

}  // namespace

std::unique_ptr<RulerTaskGenerator> make_niah_generator(const RulerTask& task) {
  return std::make_unique<NiahGenerator>(task);
}

}  // namespace ckv
