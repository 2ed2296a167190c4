#pragma once
// The task-family builders behind data/ruler.h (one per RULER script), and the shipped data
// they draw from. Internal to lib/data.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/spans.h"
#include "data/needles.h"
#include "data/ruler.h"

namespace ckv {

class Tokenizer;

// One candidate prompt: context + question (which ends with RULER's answer prefix).
struct RulerPrompt {
  std::string context;
  std::string question;
  std::vector<std::string> answers;
  NamedSpans spans;
};

// Appends pieces to a text, keeping the code-point span of each.
struct TextBuilder {
  std::string text;
  int64_t cp = 0;
  SpanRange add(std::string_view piece) {
    const int64_t start = cp;
    text += piece;
    cp += code_points(piece);
    return {start, cp};
  }
};

class RulerTaskGenerator {
 public:
  virtual ~RulerTaskGenerator() = default;
  // The smallest haystack size the task's construction allows (in its unit).
  virtual int64_t min_size() const = 0;
  // Record `index`'s prompt at haystack size `size`, every random draw from `stream`.
  virtual RulerPrompt build(int64_t index, uint64_t stream, int64_t size) const = 0;
  // The record's "ruler" fields particular to the task: haystack kind and unit, stand-ins.
  virtual nlohmann::ordered_json settings() const = 0;
};

std::unique_ptr<RulerTaskGenerator> make_niah_generator(const RulerTask& task);
std::unique_ptr<RulerTaskGenerator> make_vt_generator(const Tokenizer& tokenizer, uint64_t seed);
std::unique_ptr<RulerTaskGenerator> make_cwe_generator(int64_t length);
std::unique_ptr<RulerTaskGenerator> make_fwe_generator(int64_t length);
std::unique_ptr<RulerTaskGenerator> make_qa_generator(const RulerTask& task);

// RULER's noise haystack sentence group (its niah.py and variable_tracking.py).
extern const char* const kRulerNoise;

// Shipped data, compiled in (lib/data/ruler_data.cpp).
struct RulerText {
  std::string_view name;  // "constitution", ... (data/texts/<name>.txt)
  std::string_view text;
};
const std::vector<RulerText>& ruler_texts();    // data/texts/*.txt, in the essay's order
std::string_view ruler_questions_json();        // data/texts/questions.json
const std::vector<std::string>& ruler_words();  // data/words/words.txt
// The essay stand-in: the texts' words (whitespace-separated), in ruler_texts() order.
const std::vector<std::string>& ruler_essay_words();

// Stand-in descriptions shared by the tasks (docs/RULER.md "Stand-ins").
extern const char* const kStandInWords;
extern const char* const kStandInEssay;
extern const char* const kStandInSentences;

}  // namespace ckv
