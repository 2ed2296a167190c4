// RULER's qa_1 (SQuAD) and qa_2 (HotpotQA) (scripts/data/synthetic/qa.py), with the
// hand-checked questions on data/texts as the stand-in for both datasets: the documents are
// passages of the shipped texts, the gold passage the one holding the answer's line.
#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/ruler_task.h"

namespace ckv {

namespace {

struct Passage {
  std::string title;                      // "<text> <k>" (qa_2's HotpotQA form "title\ntext")
  std::string text;                       // its lines, whitespace runs as one space
  size_t source = 0;                      // index into ruler_texts()
  int64_t first_line = 0, last_line = 0;  // 1-based, inclusive
};

struct Question {
  std::string id, question;
  std::vector<std::string> answers;
  size_t source = 0;
  int64_t line = 0;
};

// Passages: runs of non-blank lines, closed at a blank line once they have 4 lines, or at 8.
std::vector<Passage> passages() {
  std::vector<Passage> out;
  const std::vector<RulerText>& texts = ruler_texts();
  for (size_t t = 0; t < texts.size(); ++t) {
    std::vector<std::string> lines;
    int64_t first = 0, line_no = 0, k = 0;
    auto close = [&](int64_t last) {
      if (lines.empty()) return;
      std::string joined;
      for (const std::string& l : lines)
        for (const std::string& w : split_words(l)) joined += (joined.empty() ? "" : " ") + w;
      out.push_back({fmt::format("{} {}", texts[t].name, ++k), joined, t, first, last});
      lines.clear();
    };
    std::string_view rest = texts[t].text;
    while (!rest.empty()) {
      const size_t nl = rest.find('\n');
      const std::string_view line = rest.substr(0, nl);
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
      ++line_no;
      if (split_words(line).empty()) {
        if (lines.size() >= 4) close(line_no - 1);
        continue;
      }
      if (lines.empty()) first = line_no;
      lines.emplace_back(line);
      if (lines.size() >= 8) close(line_no);
    }
    close(line_no);
  }
  return out;
}

std::vector<Question> questions() {
  const nlohmann::json j = nlohmann::json::parse(ruler_questions_json());
  std::vector<Question> out;
  const std::vector<RulerText>& texts = ruler_texts();
  for (size_t t = 0; t < texts.size(); ++t)
    for (const nlohmann::json& q : j.at("texts").at(std::string(texts[t].name)))
      out.push_back({q.at("id").get<std::string>(), q.at("question").get<std::string>(),
                     q.at("answers").get<std::vector<std::string>>(), t,
                     q.at("line").get<int64_t>()});
  return out;
}

class QaGenerator final : public RulerTaskGenerator {
 public:
  explicit QaGenerator(const RulerTask& task)
      : hotpot_(task.name == "qa_2"), passages_(passages()), questions_(questions()) {
    for (const Question& q : questions_) {
      // The gold passage (qa_2: with its neighbours in the same text, as a HotpotQA question
      // comes with its own paragraphs).
      std::vector<int64_t> gold;
      for (size_t i = 0; i < passages_.size(); ++i)
        if (passages_[i].source == q.source && passages_[i].first_line <= q.line &&
            q.line <= passages_[i].last_line)
          gold.push_back(static_cast<int64_t>(i));
      if (gold.size() != 1)
        fail("ckv ruler: question {} has no passage holding line {}", q.id, q.line);
      const int64_t g = gold[0];
      if (hotpot_) {
        if (g > 0 && passages_[static_cast<size_t>(g - 1)].source == q.source)
          gold.insert(gold.begin(), g - 1);
        if (g + 1 < static_cast<int64_t>(passages_.size()) &&
            passages_[static_cast<size_t>(g + 1)].source == q.source)
          gold.push_back(g + 1);
      }
      gold_.push_back({gold, g});
    }
  }

  int64_t min_size() const override { return hotpot_ ? 3 : 1; }

  nlohmann::ordered_json settings() const override {
    nlohmann::ordered_json s;
    s["haystack"] = "documents";
    s["haystack_unit"] = "documents";
    s["dataset"] = hotpot_ ? "hotpotqa" : "squad";
    s["stand_in"] = {
        fmt::format("{}: the hand-checked questions of data/texts/questions.json on passages of "
                    "data/texts, the gold passage the one holding the answer (RULER: {} {})",
                    hotpot_ ? "qa_2" : "qa_1", hotpot_ ? "HotpotQA" : "SQuAD",
                    hotpot_ ? "dev distractor set" : "v2.0 dev set")};
    return s;
  }

  RulerPrompt build(int64_t index, uint64_t stream, int64_t size) const override {
    Rng rng(stream);
    const size_t qi = static_cast<size_t>(index) % questions_.size();
    const Question& q = questions_[qi];
    const auto& [gold, answer_passage] = gold_[qi];
    // Distractors: passages of the other texts (no second passage of the answer's text),
    // drawn without repeats, then again from the whole pool when more are needed.
    std::vector<int64_t> pool;
    for (size_t i = 0; i < passages_.size(); ++i)
      if (passages_[i].source != q.source) pool.push_back(static_cast<int64_t>(i));
    std::vector<int64_t> docs = gold;
    while (static_cast<int64_t>(docs.size()) < size) {
      const int64_t need = std::min<int64_t>(size - static_cast<int64_t>(docs.size()),
                                             static_cast<int64_t>(pool.size()));
      for (const int64_t i : rng.sample(static_cast<int64_t>(pool.size()), need))
        docs.push_back(pool[static_cast<size_t>(i)]);
    }
    docs.resize(static_cast<size_t>(std::max<int64_t>(size, static_cast<int64_t>(gold.size()))));
    rng.shuffle(docs);
    const std::string instruction =
        "Answer the question based on the given documents. Only give me the answer and do not "
        "output any other words.";
    RulerPrompt p;
    TextBuilder b;
    b.add(instruction + "\n\nThe following are given documents.\n\n");
    for (size_t i = 0; i < docs.size(); ++i) {
      const Passage& d = passages_[static_cast<size_t>(docs[i])];
      b.add(fmt::format("{}Document {}:\n", i ? "\n\n" : "", i + 1));
      if (hotpot_) b.add(d.title + "\n");
      const SpanRange sp = b.add(d.text);
      if (docs[i] == answer_passage && p.spans["needle"].empty()) p.spans["needle"].push_back(sp);
    }
    b.add("\n\n");
    p.context = std::move(b.text);
    p.question = instruction + "\n\nQuestion: " + q.question + " Answer:";
    p.answers = q.answers;
    return p;
  }

 private:
  bool hotpot_;
  std::vector<Passage> passages_;
  std::vector<Question> questions_;
  std::vector<std::pair<std::vector<int64_t>, int64_t>>
      gold_;  // per question: gold docs, the answer's
};

}  // namespace

std::unique_ptr<RulerTaskGenerator> make_qa_generator(const RulerTask& task) {
  return std::make_unique<QaGenerator>(task);
}

}  // namespace ckv
