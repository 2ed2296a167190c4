// Needle-in-a-haystack generation: template, needles, fitting to a token length, spans.
#include "data/niah.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "data/needles.h"
#include "model/tokenizer.h"

namespace ckv {

const char* const kNiahNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

namespace {

constexpr const char* kAdjectives[] = {
    "amber",  "brave",  "calm",   "dusty",  "eager",  "faint",  "gentle", "hollow", "icy",    "jolly",
    "keen",   "lively", "mellow", "nimble", "odd",    "proud",  "quiet",  "rapid",  "silent", "tidy",
    "upbeat", "vivid",  "wary",   "young",  "zesty",  "bold",   "crisp",  "dapper", "frosty", "grand",
    "humble", "lucky"};
constexpr const char* kNouns[] = {
    "anchor", "badger",  "candle", "dolphin", "ember",  "falcon", "garden", "harbor", "island", "jacket",
    "kettle", "lantern", "meadow", "needle",  "orchid", "pebble", "quartz", "river",  "saddle", "tunnel",
    "umbrella", "valley", "walnut", "yarrow", "zephyr", "beacon", "canyon", "drum",   "feather", "glacier",
    "hammock", "igloo"};

std::string make_value(Rng& rng, NiahValueKind kind) {
  return kind == NiahValueKind::Numbers ? random_number7(rng) : random_uuid4(rng);
}

struct Needle {
  int64_t key = 0;  // index into keys
  std::string value;
  double depth = 0;  // requested, in [0, 1]
};

// One candidate prompt: the haystack cut to `k` words with the needles inserted.
struct Built {
  std::string context;
  std::vector<SpanRange> needle_spans;        // code points, in needle order
  std::vector<int64_t> needle_boundary;       // word index the needle precedes
  std::vector<SpanRange> word_spans;          // code points of each haystack word
  std::vector<int64_t> needle_after;          // needles inserted before word j (count)
  int64_t hay_start = 0, hay_end = 0;         // code points of the haystack part
};

struct Generator {
  const NiahOptions& o;
  const Tokenizer& tok;
  std::vector<std::string> words;
  std::string type;          // "number" / "uuid"
  std::vector<std::string> keys;
  std::vector<Needle> needles;
  std::string instruction, question;

  std::string needle_text(const Needle& n) const {
    return fmt::format("One of the special magic {}s for {} is: {}.", type, keys[static_cast<size_t>(n.key)], n.value);
  }

  Built build(int64_t k) const {
    Built b;
    // Sentence boundaries: before word 0, after any word ending a sentence, after the last.
    std::vector<int64_t> bounds{0};
    for (int64_t j = 1; j < k; ++j) {
      const std::string& w = words[static_cast<size_t>((j - 1) % static_cast<int64_t>(words.size()))];
      const char last = w.back();
      if (last == '.' || last == '!' || last == '?') bounds.push_back(j);
    }
    if (k > 0) bounds.push_back(k);
    for (const Needle& n : needles) {
      const double target = n.depth * static_cast<double>(k);
      int64_t best = bounds.front();
      for (int64_t x : bounds)
        if (std::abs(static_cast<double>(x) - target) < std::abs(static_cast<double>(best) - target)) best = x;
      // Text with long stretches between sentence ends (lists, code): a word boundary
      // rather than a needle far from its depth.
      if (std::abs(static_cast<double>(best) - target) > 0.02 * static_cast<double>(k) + 1)
        best = std::llround(target);
      b.needle_boundary.push_back(best);
    }
    // Needles in order of position (stable: ties keep needle order).
    std::vector<size_t> order(needles.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t c) { return b.needle_boundary[a] < b.needle_boundary[c]; });
    b.needle_spans.resize(needles.size());
    b.needle_after.assign(static_cast<size_t>(k) + 1, 0);
    std::string& s = b.context;
    s = instruction;
    int64_t cp = code_points(s);
    b.hay_start = cp;
    bool first = true;
    auto append = [&](const std::string& piece) -> SpanRange {
      if (!first) {
        s += ' ';
        ++cp;
      }
      first = false;
      const int64_t start = cp;
      s += piece;
      cp += code_points(piece);
      return {start, cp};
    };
    size_t next = 0;
    for (int64_t j = 0; j <= k; ++j) {
      while (next < order.size() && b.needle_boundary[order[next]] == j) {
        b.needle_spans[order[next]] = append(needle_text(needles[order[next]]));
        ++b.needle_after[static_cast<size_t>(j)];
        ++next;
      }
      if (j < k) b.word_spans.push_back(append(words[static_cast<size_t>(j % static_cast<int64_t>(words.size()))]));
    }
    b.hay_end = cp;
    s += '\n';
    return b;
  }

  int64_t tokens(const std::string& context) const {
    return static_cast<int64_t>(tok.encode(context, true, true).size() + tok.encode(question, false, true).size());
  }
};

// The token index a code-point boundary maps to, exactly as tokenize_record computes it.
int64_t token_at(const Tokenizer& tok, const std::string& context, const std::vector<int32_t>& all,
                 int64_t cp, bool is_end) {
  const size_t byte = utf8_offset(context, cp, "niah context");
  const std::vector<int32_t> prefix = tok.encode(std::string_view(context).substr(0, byte), true, true);
  size_t same = 0;
  while (same < prefix.size() && same < all.size() && prefix[same] == all[same]) ++same;
  if (same == prefix.size()) return static_cast<int64_t>(same);
  return static_cast<int64_t>(is_end ? same + 1 : same);
}

}  // namespace

NiahRecord make_niah_record(const NiahOptions& o, const Tokenizer& tok, const std::string& haystack,
                            int64_t index) {
  const int64_t n_keys = std::max(o.keys, o.queries);
  if (o.values < 1 || o.queries < 1 || n_keys > 1024)
    fail<InputError>("--values and --queries must be at least 1 and --keys at most 1024");
  Generator gen{o, tok, split_words(haystack), o.value_kind == NiahValueKind::Numbers ? "number" : "uuid", {}, {}, {}, {}};
  if (gen.words.empty()) fail<InputError>("the haystack \"{}\" has no words", o.haystack_name);
  Rng rng(record_seed(o.seed, index));

  std::set<std::string> used;
  while (static_cast<int64_t>(gen.keys.size()) < n_keys) {
    std::string key = fmt::format("{}-{}", kAdjectives[rng.below(std::size(kAdjectives))], kNouns[rng.below(std::size(kNouns))]);
    if (used.insert(key).second) gen.keys.push_back(key);
  }
  std::set<std::string> values;
  for (int64_t k = 0; k < n_keys; ++k)
    for (int64_t v = 0; v < o.values; ++v) {
      std::string value = make_value(rng, o.value_kind);
      while (!values.insert(value).second) value = make_value(rng, o.value_kind);
      gen.needles.push_back({k, value, 0});
    }
  for (size_t i = 0; i < gen.needles.size(); ++i) {
    const double random_depth = rng.unit();  // always drawn, so the grid does not shift the stream
    gen.needles[i].depth = (i == 0 && !o.depths.empty())
                               ? o.depths[static_cast<size_t>(index % static_cast<int64_t>(o.depths.size()))]
                               : random_depth;
  }
  const std::vector<std::string> asked(gen.keys.begin(), gen.keys.begin() + o.queries);
  const bool plural = o.values > 1 || o.queries > 1;
  const std::string& t = gen.type;
  gen.instruction = fmt::format("Some special magic {0}s are hidden within the following text. Make sure to "
                                "memorize it. I will quiz you about the {0}s afterwards.\n", t);
  gen.question = plural ? fmt::format("What are all the special magic {0}s for {1} mentioned in the provided text? "
                                      "The special magic {0}s for {1} mentioned in the provided text are", t, join_keys(asked))
                        : fmt::format("What is the special magic {0} for {1} mentioned in the provided text? "
                                      "The special magic {0} for {1} mentioned in the provided text is", t, asked[0]);

  // Largest haystack word count whose prompt fits the target, then the closer of it and one more.
  const int64_t target = o.length;
  if (gen.tokens(gen.build(0).context) > target)
    fail<InputError>("--length {}: the template and needles alone take {} tokens", target,
                     gen.tokens(gen.build(0).context));
  const int64_t lo = largest_fitting(0, [&](int64_t n) { return gen.tokens(gen.build(n).context) <= target; });
  const int64_t hi = lo + 1;
  const int64_t n_lo = gen.tokens(gen.build(lo).context), n_hi = gen.tokens(gen.build(hi).context);
  const int64_t k = (target - n_lo <= n_hi - target) ? lo : hi;
  Built b = gen.build(k);
  NiahRecord r;
  r.n_tokens = gen.tokens(b.context);
  if (std::abs(static_cast<double>(r.n_tokens - target)) > o.tolerance * static_cast<double>(target))
    fail<InputError>("--length {}: the closest prompt has {} tokens, outside the tolerance of {}%",
                     target, r.n_tokens, o.tolerance * 100);
  r.id = fmt::format("{}_{:06}", o.id_prefix, index);
  r.context = b.context;
  r.question = gen.question;
  const std::vector<int32_t> all = tok.encode(r.context, true, true);
  r.context_tokens = static_cast<int64_t>(all.size());

  // Evidence: the needles of the asked keys; the other keys' needles are distractor needles.
  std::vector<std::pair<SpanRange, int64_t>> evidence;  // span, token length
  for (size_t i = 0; i < gen.needles.size(); ++i) {
    const SpanRange sp = b.needle_spans[i];
    if (gen.needles[i].key < o.queries) {
      r.answers.push_back(gen.needles[i].value);
      r.spans["needle"].push_back(sp);
      r.depths.push_back(k == 0 ? 0.0 : static_cast<double>(b.needle_boundary[i]) / static_cast<double>(k));
      evidence.push_back({sp, token_at(tok, r.context, all, sp.end, true) - token_at(tok, r.context, all, sp.start, false)});
    } else {
      r.spans["other_needle"].push_back(sp);
    }
  }
  // Distractors: runs of haystack words not crossing a needle, with the needle's token length.
  std::map<std::string, int64_t> word_tokens;  // estimate, to pick candidates worth checking
  auto estimate = [&](int64_t j) {
    const std::string& w = gen.words[static_cast<size_t>(j % static_cast<int64_t>(gen.words.size()))];
    auto it = word_tokens.find(w);
    if (it == word_tokens.end()) it = word_tokens.emplace(w, static_cast<int64_t>(tok.encode(" " + w, false, false).size())).first;
    return it->second;
  };
  std::vector<std::pair<int64_t, int64_t>> taken;  // word ranges already used [s, e)
  for (const auto& [needle, length] : evidence) {
    for (int64_t d = 0; d < o.distractors; ++d) {
      bool found = false;
      // Every start word in turn from a random one: finds a span whenever one exists.
      const int64_t first = k > 0 ? static_cast<int64_t>(rng.below(static_cast<uint64_t>(k))) : 0;
      for (int64_t attempt = 0; attempt < k && !found; ++attempt) {
        const int64_t s = (first + attempt) % k;
        int64_t e = s, est = 0;
        while (e < k && est < length && (e == s || b.needle_after[static_cast<size_t>(e)] == 0)) est += estimate(e++);
        if (est != length) continue;
        bool overlaps = false;
        for (const auto& [ts, te] : taken) overlaps = overlaps || (s < te && ts < e);
        if (overlaps) continue;
        const SpanRange sp{b.word_spans[static_cast<size_t>(s)].start, b.word_spans[static_cast<size_t>(e - 1)].end};
        if (token_at(tok, r.context, all, sp.end, true) - token_at(tok, r.context, all, sp.start, false) != length) continue;
        taken.push_back({s, e});
        r.spans["distractor"].push_back(sp);
        found = true;
      }
      if (!found)
        fail<InputError>("record {}: no haystack span of {} tokens found for a distractor "
                         "(haystack too short or too uniform)", r.id, length);
    }
  }
  return r;
}

std::string NiahRecord::to_jsonl(const NiahOptions& o) const {
  nlohmann::ordered_json j;
  j["id"] = id;
  j["context"] = context;
  j["question"] = question;
  std::string joined;
  for (const std::string& a : answers) joined += (joined.empty() ? "" : ", ") + a;
  j["answer"] = joined;
  j["answers"] = answers;
  j["task"] = "niah";
  j["spans"] = spans_to_json(spans);
  j["span_unit"] = "char";
  j["niah"] = {{"length", o.length},     {"n_tokens", n_tokens},
               {"seed", o.seed},         {"keys", std::max(o.keys, o.queries)},
               {"values", o.values},     {"queries", o.queries},
               {"value_kind", o.value_kind == NiahValueKind::Numbers ? "numbers" : "uuids"},
               {"haystack", o.haystack_name}, {"depths", depths}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
}

}  // namespace ckv
