#!/usr/bin/env python3
"""Build tiny tokenizers of every supported family and record reference ids for hard strings.

Writes under tests/data/tokenizers/:
  <family>.tokenizer.json   tiny BPE models trained with HF `tokenizers` (gpt2, smollm, llama3,
                            qwen2 byte-level; spm = Llama-2-style BPE with byte fallback)
  <family>.vocab.gguf       the same vocabularies as vocab-only GGUF files (gguf-py)
  golden_hf.json            HF `tokenizers` ids/decodes for each tokenizer.json
  golden_llamacpp.json      llama.cpp ids/decodes (llama-cpp-python) for each vocab GGUF and
                            for the default model GGUF, plus transformers' GGUF conversion of the
                            default model and its apply_chat_template renderings

Usage: python3 tests/reference/make_tokenizer_goldens.py [--hf-only | --llamacpp-only]
See tests/reference/README-tokenizers.md for where the references disagree.
"""
import argparse
import json
import os
import sys

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers.processors import TemplateProcessing

sys.path.insert(0, os.path.dirname(__file__))
from tokenizer_cases import CHATS, CORPUS, HARD, NO_SPECIAL  # noqa: E402

FORMAT_VERSION = 1
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "tokenizers")
DEFAULT_GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

GPT2_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3_RE = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
             r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_RE = LLAMA3_RE.replace(r"\p{N}{1,3}", r"\p{N}")
CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# family -> (ggml pre name, vocab size, special tokens, bos token or None)
BYTE_LEVEL = {
    "gpt2": ("gpt-2", 700, CHATML, None),
    "smollm": ("smollm", 700, CHATML, None),
    "llama3": ("llama-bpe", 800, ["<|begin_of_text|>", "<|end_of_text|>"] + CHATML[1:],
               "<|begin_of_text|>"),
    "qwen2": ("qwen2", 800, CHATML, None),
}


def byte_level_pre(family):
    if family == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if family == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                 use_regex=True)])
    regex = LLAMA3_RE if family == "llama3" else QWEN2_RE
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def train_byte_level(family):
    _, vocab_size, specials, bos = BYTE_LEVEL[family]
    # Llama 3 looks a whole pre-token up in the vocab before merging (llama.cpp does the same).
    tok = Tokenizer(models.BPE(ignore_merges=family == "llama3"))
    # qwen2 and smollm are trained with the Llama 3 / GPT-2 split so that their vocabularies
    # have multi-digit tokens and the goldens tell their digit splits from those.
    trained_as = {"qwen2": "llama3", "smollm": "gpt2"}.get(family, family)
    tok.pre_tokenizer = byte_level_pre(trained_as)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    tok.pre_tokenizer = byte_level_pre(family)
    if bos:
        tok.post_processor = TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                special_tokens=[(bos, tok.token_to_id(bos))])
    return tok


def train_spm():
    """Llama-2-style: SentencePiece BPE pieces with '▁', byte fallback <0xXX>, BOS <s>."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer)
    # Rebuild the vocab in Llama 2's order: specials, 256 byte tokens, then the trained pieces.
    spec = json.loads(tok.to_str())
    trained = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in trained:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    spec["model"]["vocab"] = vocab
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    # Llama 2's tokenizer.json: no pre-tokenizer, the normalizer adds the prefix space.
    spec["pre_tokenizer"] = None
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return Tokenizer.from_str(json.dumps(spec))


def hf_records(tok):
    rec = {"encode": [], "encode_bos": [], "decode": [], "no_special": []}
    for s in HARD:
        ids = tok.encode(s, add_special_tokens=False).ids
        rec["encode"].append(ids)
        rec["encode_bos"].append(tok.encode(s, add_special_tokens=True).ids)
        rec["decode"].append(tok.decode(ids, skip_special_tokens=False))
    tok.encode_special_tokens = True
    rec["no_special"] = [tok.encode(s, add_special_tokens=False).ids for s in NO_SPECIAL]
    tok.encode_special_tokens = False
    return rec


def write_vocab_gguf(family, tok, path, pre=None):
    """A vocab-only GGUF (tokenizer metadata plus the minimum llama hparams llama.cpp reads)."""
    import gguf
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    tokens = [None] * len(vocab)
    for piece, i in vocab.items():
        tokens[i] = piece
    added = {a["content"]: a for a in spec["added_tokens"]}
    w = gguf.GGUFWriter(path, "llama")
    for key, value in [("context_length", 4096), ("embedding_length", 64), ("block_count", 1),
                       ("feed_forward_length", 128), ("attention.head_count", 1)]:
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    types = []
    for piece in tokens:
        if piece in added:
            types.append(gguf.TokenType.CONTROL if added[piece]["special"]
                         else gguf.TokenType.USER_DEFINED)
        elif family == "spm" and piece.startswith("<0x") and len(piece) == 6:
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    if family == "spm":
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        types[0] = gguf.TokenType.UNKNOWN
        # SentencePiece BPE scores: a piece made by merge number r scores -r (earlier = better).
        merged = {"".join(m.split(" ") if isinstance(m, str) else m): r
                  for r, m in enumerate(spec["model"]["merges"])}
        w.add_token_scores([-float(merged.get(p, 0)) if p in merged else 0.0 for p in tokens])
        w.add_add_space_prefix(True)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
    else:
        family_pre, _, specials, bos = BYTE_LEVEL[family]
        pre = pre or family_pre
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_merges([m if isinstance(m, str) else " ".join(m)
                            for m in spec["model"]["merges"]])
        w.add_bos_token_id(vocab[bos or specials[0]])
        w.add_eos_token_id(vocab[specials[1] if bos else specials[0]])
        w.add_add_bos_token(bos is not None)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_bad_ggufs():
    """Inputs for the error tests: a GGUF without a tokenizer and one with an unknown model."""
    import gguf
    for name, model in [("no_tokenizer.gguf", None), ("bert_tokenizer.gguf", "bert")]:
        w = gguf.GGUFWriter(os.path.join(OUT, name), "llama")
        if model:
            w.add_tokenizer_model(model)
            w.add_token_list(["[PAD]", "a", "b"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def llama_detokenize(llm, ids):
    """llama.cpp's own detokenizer (the Python wrapper's detokenize re-implements it)."""
    import ctypes
    import llama_cpp
    arr = (llama_cpp.llama_token * max(len(ids), 1))(*ids)
    buf = ctypes.create_string_buffer(16 * len(ids) + 64)
    n = llama_cpp.llama_detokenize(llm._model.vocab, arr, len(ids), buf, len(buf),
                                   False, True)  # remove_special=False, unparse_special=True
    assert n >= 0, n
    return buf.raw[:n].decode("utf-8", "replace")


def llamacpp_records(path):
    from llama_cpp import Llama
    llm = Llama(model_path=path, vocab_only=True, verbose=False)
    rec = {"encode": [], "decode": [], "no_special": []}
    for s in HARD:
        ids = llm.tokenize(s.encode(), add_bos=False, special=True)
        rec["encode"].append(ids)
        rec["decode"].append(llama_detokenize(llm, ids))
    rec["encode_bos"] = [llm.tokenize(s.encode(), add_bos=True, special=True) for s in HARD]
    rec["no_special"] = [llm.tokenize(s.encode(), add_bos=False, special=False) for s in NO_SPECIAL]
    return rec


def transformers_default_model():
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(DEFAULT_GGUF),
                                                     gguf_file=os.path.basename(DEFAULT_GGUF))
    encode = [tok.encode(s, add_special_tokens=False) for s in HARD]
    chats = [{"messages": m,
              "rendered": tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True),
              "rendered_no_prompt": tok.apply_chat_template(m, tokenize=False,
                                                            add_generation_prompt=False)}
             for m in CHATS]
    return transformers.__version__, encode, chats


def dump(obj, name):
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf-only", action="store_true")
    ap.add_argument("--llamacpp-only", action="store_true")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    families = {f: train_byte_level(f) for f in BYTE_LEVEL}
    families["spm"] = train_spm()
    if not args.llamacpp_only:
        golden = {"format_version": FORMAT_VERSION, "generator": "tests/reference/make_tokenizer_goldens.py",
                  "tokenizers_version": tokenizers.__version__, "strings": HARD,
                  "no_special_strings": NO_SPECIAL, "families": {}}
        for fam, tok in families.items():
            tok.save(os.path.join(OUT, f"{fam}.tokenizer.json"), pretty=False)
            tok = Tokenizer.from_file(os.path.join(OUT, f"{fam}.tokenizer.json"))
            golden["families"][fam] = {"file": f"{fam}.tokenizer.json", **hf_records(tok)}
            write_vocab_gguf(fam, tok, os.path.join(OUT, f"{fam}.vocab.gguf"))
            if fam == "gpt2":  # llama.cpp's "default" pre-tokeniser is not GPT-2's regex
                write_vocab_gguf(fam, tok, os.path.join(OUT, "gpt2-default.vocab.gguf"), "default")
        dump(golden, "golden_hf.json")
        write_bad_ggufs()
    if not args.hf_only:
        import llama_cpp
        golden = {"format_version": FORMAT_VERSION, "generator": "tests/reference/make_tokenizer_goldens.py",
                  "llama_cpp_python_version": llama_cpp.__version__, "strings": HARD,
                  "no_special_strings": NO_SPECIAL, "gguf": {}}
        for fam in list(families) + ["gpt2-default"]:
            golden["gguf"][fam] = {"file": f"{fam}.vocab.gguf",
                                   **llamacpp_records(os.path.join(OUT, f"{fam}.vocab.gguf"))}
        golden["gguf"]["default_model"] = {"file": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                                           **llamacpp_records(DEFAULT_GGUF)}
        version, encode, chats = transformers_default_model()
        golden["transformers_version"] = version
        golden["default_model_transformers_encode"] = encode
        golden["default_model_chats"] = chats
        golden["default_model_differences"] = [
            i for i, ids in enumerate(encode) if ids != golden["gguf"]["default_model"]["encode"][i]]
        dump(golden, "golden_llamacpp.json")


if __name__ == "__main__":
    main()
