// JSONL batch fuzzer (`--input F.jsonl` of dump, bound, check and mask): the input is a
// whole batch file. Every line goes through the record parser (RecordReader with
// --skip-bad, as dump reads it) and every parsed record through the tokenisation that
// converts its character spans to token positions (tokenize_record), with the SmolLM
// vocabulary of tests/data, and with --chat through the default model's tokenizer when
// models/ has it. The batch loop of the subcommands (RecordJob::for_each_record: the strict
// reader, which refuses an id used twice, then the tokenisation) and the record count of
// --shard (count_input_records) read the same file.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>

#include "core/shard.h"
#include "data/records.h"
#include "fuzz_util.h"
#include "io/gguf.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "output/batch_output.h"

namespace {

struct Tokenizers {
  std::unique_ptr<ckv::Tokenizer> plain;  // SmolLM vocabulary, no chat template
  std::unique_ptr<ckv::Tokenizer> chat;   // the default model's, when present
};

const Tokenizers& tokenizers() {
  static const Tokenizers t = [] {
    Tokenizers out;
    out.plain = ckv::tokenizer_from_gguf(
        ckv::GgufFile(ckv::fuzz::source_dir() / "tests/data/tokenizers/smollm.vocab.gguf"));
    const auto model = ckv::fuzz::source_dir() / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (std::filesystem::exists(model)) out.chat = ckv::tokenizer_from_gguf(ckv::GgufFile(model));
    return out;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizers& tok = tokenizers();
  // Odd sizes use the chat template (when the default model is there).
  const bool chat = (size & 1) != 0 && tok.chat;
  const ckv::Tokenizer& tokenizer = chat ? *tok.chat : *tok.plain;
  const auto path = ckv::fuzz::write_file("fuzz.jsonl", data, size);
  try {
    ckv::RecordReader reader(path, /*skip_bad=*/true);
    while (std::optional<ckv::InputRecord> r = reader.next()) {
      try {
        (void)ckv::tokenize_record(*r, tokenizer, chat);
      } catch (const ckv::Error&) {
      }
    }
  } catch (const ckv::Error&) {
  }
  try {
    (void)ckv::count_input_records(path);
    ckv::RecordReader strict(path);  // as RecordJob::for_each_record reads a batch
    while (std::optional<ckv::InputRecord> r = strict.next()) (void)ckv::tokenize_record(*r, tokenizer, chat);
  } catch (const ckv::Error&) {
  }
  return 0;
}
