// Tokenizer from a Hugging Face tokenizer.json (model type BPE, byte-level or with byte
// fallback), plus the chat template and BOS/EOS settings of a tokenizer_config.json beside it.
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/error.h"
#include "model/tokenizer_spec.h"

namespace ckv {
namespace {

using nlohmann::json;

json read_json(const std::filesystem::path& path) {
  const std::string text = read_regular_file(path, "the tokenizer file");
  refuse_nul_in_json(text, path.string());
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail<FormatError>("{}: not valid JSON ({})", path.string(), e.what());
  }
}

// The list of components of a (possibly Sequence) normalizer / pre-tokenizer / decoder.
std::vector<json> components(const json& node, const char* list_key) {
  if (node.is_null()) return {};
  if (node.value("type", "") == "Sequence") return node.at(list_key).get<std::vector<json>>();
  return {node};
}

std::string token_content(const json& t) {  // "<s>" or {"content": "<s>", ...}
  return t.is_string() ? t.get<std::string>() : t.is_object() ? t.value("content", "") : "";
}

struct Loader {
  std::string source;
  TokenizerSpec& spec;
  std::map<std::string, int32_t> ids;

  [[noreturn]] void unsupported(const std::string& what) const {
    fail<UnsupportedError>("{}: {} is not supported", source, what);
  }

  // A token id as the file states it: an integer (3.7 or "3" is not one, never truncated).
  int64_t token_id(const json& id, std::string_view token) const {
    if (!id.is_number_integer())
      fail<FormatError>("{}: token '{}' has id {}, not an integer", source, token, id.dump());
    return id.get<int64_t>();
  }

  void vocab(const json& model, const json& added) {
    int64_t max_id = -1;
    for (const auto& [token, id] : model.at("vocab").items()) max_id = std::max<int64_t>(max_id, token_id(id, token));
    for (const auto& a : added)
      max_id = std::max<int64_t>(max_id, token_id(a.at("id"), a.value("content", "(added token)")));
    if (max_id < 0 || max_id > (1 << 24))
      fail<FormatError>("{}: vocabulary size {} is not plausible", source, max_id + 1);
    spec.tokens.assign(max_id + 1, "");
    spec.roles.assign(max_id + 1, TokenRole::unused);  // ids with no token stay unused
    for (const auto& [token, id] : model.at("vocab").items()) {
      const int64_t i = token_id(id, token);
      if (i < 0) fail<FormatError>("{}: token '{}' has negative id {}", source, token, i);
      spec.tokens[i] = token;
      spec.roles[i] = TokenRole::normal;
    }
    for (const auto& a : added) {
      const int64_t i = token_id(a.at("id"), "(added token)");
      if (i < 0) fail<FormatError>("{}: added token has negative id {}", source, i);
      spec.tokens[i] = a.at("content").get<std::string>();
      spec.roles[i] = a.value("special", false) ? TokenRole::control : TokenRole::user_defined;
    }
    for (size_t i = 0; i < spec.tokens.size(); ++i)
      ids.emplace(spec.tokens[i], static_cast<int32_t>(i));
    for (const auto& m : model.value("merges", json::array())) {
      if (m.is_array() && m.size() == 2) {
        spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else if (m.is_string()) {
        const auto s = m.get<std::string>();
        size_t space = s.find(' ', 1);
        if (space == std::string::npos)
          fail<FormatError>("{}: merge '{}' is not 'left right'", source, s);
        spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else {
        fail<FormatError>("{}: a merge is neither \"left right\" nor [left, right]", source);
      }
    }
  }

  // Byte-level: ByteLevel alone, Digits + ByteLevel (SmolLM), or Split(regex) + ByteLevel.
  void byte_level_pre(const json& pre) {
    std::vector<std::string> patterns;
    bool digits = false, regex_in_byte_level = false;
    for (const auto& p : components(pre, "pretokenizers")) {
      std::string type = p.value("type", "");
      if (type == "ByteLevel") {
        if (p.value("add_prefix_space", false)) unsupported("ByteLevel add_prefix_space=true");
        regex_in_byte_level = p.value("use_regex", true);
      } else if (type == "Digits" && p.value("individual_digits", false)) {
        digits = true;
      } else if (type == "Split" && p.value("behavior", "") == "Isolated" &&
                 !p.value("invert", false) && p.at("pattern").contains("Regex")) {
        patterns.push_back(p.at("pattern").at("Regex").get<std::string>());
      } else {
        unsupported(fmt::format("pre-tokenizer {}", p.dump()));
      }
    }
    if (regex_in_byte_level) {
      auto gpt2 = pre_tokenizer_patterns(PreTokenizerKind::gpt2);
      patterns.insert(patterns.end(), gpt2.begin(), gpt2.end());
    }
    if (digits) patterns.insert(patterns.begin(), R"(\p{N})");
    // A known kind when the patterns are exactly its own; otherwise run them as given.
    spec.pre = PreTokenizerKind::none;
    spec.pre_patterns = patterns;
    for (auto kind : {PreTokenizerKind::gpt2, PreTokenizerKind::smollm, PreTokenizerKind::llama3,
                      PreTokenizerKind::qwen2}) {
      if (patterns == pre_tokenizer_patterns(kind)) {
        spec.pre = kind;
        spec.pre_patterns.clear();
      }
    }
  }

  // SentencePiece-style: Prepend("▁") + Replace(" ", "▁") normalizer (Llama 2), or a
  // Metaspace pre-tokenizer without splitting (newer conversions).
  void spm_text_handling(const json& normalizer, const json& pre) {
    bool replaces_space = false;
    for (const auto& n : components(normalizer, "normalizers")) {
      std::string type = n.value("type", "");
      if (type == "Prepend" && n.value("prepend", "") == "\xE2\x96\x81") {
        spec.prefix_space = PrefixSpace::every_fragment;
      } else if (type == "Replace" && n.at("pattern").value("String", "") == " " &&
                 n.value("content", "") == "\xE2\x96\x81") {
        replaces_space = true;
      } else {
        unsupported(fmt::format("normalizer {}", n.dump()));
      }
    }
    for (const auto& p : components(pre, "pretokenizers")) {
      if (p.value("type", "") != "Metaspace" || p.value("split", true) ||
          p.value("replacement", "") != "\xE2\x96\x81")
        unsupported(fmt::format("pre-tokenizer {} with byte fallback", p.dump()));
      replaces_space = true;
      std::string scheme = p.value("prepend_scheme", "always");
      spec.prefix_space = scheme == "always"  ? PrefixSpace::every_fragment
                          : scheme == "first" ? PrefixSpace::first_fragment
                                              : PrefixSpace::none;
    }
    if (!replaces_space)
      unsupported("a byte-fallback BPE that keeps spaces as ' ' (no '▁' replacement)");
  }

  int32_t id_of(const std::string& token) const {
    auto it = ids.find(token);
    return it == ids.end() ? -1 : it->second;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_json(const std::filesystem::path& tokenizer_json) {
  TokenizerSpec spec;
  spec.source = tokenizer_json.string();
  Loader loader{spec.source, spec, {}};
  json root = read_json(tokenizer_json);
  try {
    const json& model = root.at("model");
    if (model.value("type", "BPE") != "BPE")
      loader.unsupported(fmt::format("model type '{}' (only BPE)", model.value("type", "")));
    loader.vocab(model, root.value("added_tokens", json::array()));
    spec.ignore_merges = model.value("ignore_merges", false);
    spec.byte_fallback = model.value("byte_fallback", false);
    if (model.contains("unk_token") && model.at("unk_token").is_string())
      spec.unk_id = loader.id_of(model.at("unk_token").get<std::string>());
    const json pre = root.value("pre_tokenizer", json());
    const json normalizer = root.value("normalizer", json());
    bool byte_level = false;
    for (const auto& p : components(pre, "pretokenizers"))
      byte_level |= p.value("type", "") == "ByteLevel";
    spec.byte_level = byte_level;
    if (byte_level) {
      for (const auto& n : components(normalizer, "normalizers")) {  // Qwen2: NFC
        if (n.value("type", "") != "NFC") loader.unsupported(fmt::format("normalizer {}", n.dump()));
        spec.nfc = true;
      }
      loader.byte_level_pre(pre);
    } else {
      spec.pre = PreTokenizerKind::none;
      loader.spm_text_handling(normalizer, pre);
      for (size_t i = 0; i < spec.tokens.size(); ++i)
        if (spec.roles[i] == TokenRole::normal && spec.tokens[i].size() == 6 &&
            spec.tokens[i].starts_with("<0x") && spec.tokens[i].ends_with(">"))
          spec.roles[i] = TokenRole::byte;
      for (const auto& d : components(root.value("decoder", json()), "decoders")) {
        std::string type = d.value("type", "");
        if ((type == "Strip" && d.value("start", 0) > 0) ||
            (type == "Metaspace" && d.value("prepend_scheme", "always") != "never"))
          spec.strip_decoded_prefix = true;
      }
    }
    // BOS from a TemplateProcessing post-processor whose single template starts with a token.
    for (const auto& p : components(root.value("post_processor", json()), "processors")) {
      if (p.value("type", "") != "TemplateProcessing") continue;
      const json& first = p.at("single").at(0);
      if (first.contains("SpecialToken")) {
        spec.bos_id = loader.id_of(first.at("SpecialToken").at("id").get<std::string>());
        spec.add_bos = spec.bos_id >= 0;
      }
    }
  } catch (const json::exception& e) {
    fail<FormatError>("{}: unexpected tokenizer.json layout ({})", spec.source, e.what());
  }
  auto config_path = tokenizer_json.parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config_path)) {
    json config = read_json(config_path);
    try {
      if (config.contains("chat_template")) {
        const json& t = config.at("chat_template");
        if (t.is_string())
          spec.chat_template = t.get<std::string>();
        else
          for (const auto& named : t)
            if (named.value("name", "") == "default")
              spec.chat_template = named.value("template", "");
      }
      if (config.contains("bos_token"))
        spec.bos_id = loader.id_of(token_content(config.at("bos_token")));
      if (config.contains("eos_token"))
        spec.eos_id = loader.id_of(token_content(config.at("eos_token")));
      if (config.contains("add_bos_token") && config.at("add_bos_token").is_boolean())
        spec.add_bos = config.at("add_bos_token").get<bool>() && spec.bos_id >= 0;
    } catch (const json::exception& e) {
      fail<FormatError>("{}: unexpected tokenizer_config.json layout ({})", config_path.string(),
                        e.what());
    }
  }
  if (spec.eos_id < 0)  // no config: the usual end-of-text token names
    for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>"})
      if ((spec.eos_id = loader.id_of(name)) >= 0) break;
  return make_tokenizer(std::move(spec));
}

}  // namespace ckv
