// The shipped texts and word list `ckv ruler` draws from, compiled in (lib/data/ruler_data.cmake).
#include <string_view>

#include "data/ruler_task.h"

namespace ckv {

namespace {
#include "ckv/ruler_data.inc"
}  // namespace

const char* const kStandInWords =
    "words: data/words/words.txt, from Debian's wamerican (RULER: wonderwords' noun, adjective and "
    "verb lists)";
const char* const kStandInEssay =
    "essay: the texts of data/texts (jargon, constitution, genesis, apache, gpl2) (RULER: Paul "
    "Graham's essays)";
const char* const kStandInSentences =
    "sentences: split after a word ending in . ! or ? (RULER: nltk's punkt sent_tokenize)";

const std::vector<RulerText>& ruler_texts() {
  static const std::vector<RulerText> texts{{"jargon", kData_texts_jargon_txt},
                                            {"constitution", kData_texts_constitution_txt},
                                            {"genesis", kData_texts_genesis_txt},
                                            {"apache", kData_texts_apache_txt},
                                            {"gpl2", kData_texts_gpl2_txt}};
  return texts;
}

std::string_view ruler_questions_json() {
  return kData_texts_questions_json;
}

const std::vector<std::string>& ruler_words() {
  static const std::vector<std::string> words = split_words(kData_words_words_txt);
  return words;
}

const std::vector<std::string>& ruler_essay_words() {
  static const std::vector<std::string> words = [] {
    std::vector<std::string> out;
    for (const RulerText& t : ruler_texts()) {
      std::vector<std::string> w = split_words(t.text);
      out.insert(out.end(), w.begin(), w.end());
    }
    return out;
  }();
  return words;
}

}  // namespace ckv
