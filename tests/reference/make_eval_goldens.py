#!/usr/bin/env python3
"""Generated tokens of kvpress's pipeline under eviction, for tests/test_eval_golden.cpp.

Issue 13 item 6: `ckv eval` (prefill the context into a KV cache, select per layer and KV
head, physically drop the evicted entries, feed the question, decode greedily) must give
the same tokens as kvpress 0.5.5's KVPressTextGenerationPipeline with the same press on
the same model: the default model's GGUF, loaded by transformers (dequantised to float32,
sdpa attention: AdaKV's head-wise masking refuses eager).

Records: `ckv niah` NIAH records (needs build/ckv or $CKV_BINARY) over a noise haystack
and over data/texts/gpl2.txt and apache.txt (no other test uses these NIAH records); their
context and question are tokenized by transformers' GGUF tokenizer separately, as ckv's
tokenize_record does (no BOS: the GGUF says add_bos_token false; the C++ test checks that
ckv's tokenizer gives the same ids), and the ids go to kvpress's code directly, bypassing
only the pipeline's `preprocess` (which would apply the chat template):

  * the prefill is the pipeline's (`model.model(context_ids, past_key_values=cache)`) with
    kvpress's hooks, but run once per record for all presses (FanOut below: each press's
    `compress` gets exactly the inputs of its own prefill, so this is the same computation
    without a prefill per press; on records PIPELINE_CHECKED the pipeline's own `_forward`,
    one prefill per press, is run as well and must give the same tokens);
  * the answer is the pipeline's `generate_answer` (question fed at positions c.., greedy
    argmax, stop at generation_config.eos_token_id, EOS kept in the ids); the ids are taken
    from its call of tokenizer.decode.

Presses, compression_ratio = 1 - budget (kvpress's n_kept = int(c * (1 - ratio)) is
ckv's budget_from_fraction):

    snapkv                      SnapKVPress(window_size, kernel_size)   (ckv --pool avg)
    adakv(snapkv)               AdaKVPress(SnapKVPress(...), alpha_safeguard 0.2)
    criticalkv(snapkv)          CriticalKVPress(SnapKVPress(...), 1e-4, 0.5)
    criticalkv(adakv(snapkv))   CriticalAdaKVPress(SnapKVPress(...), 0.2, 1e-4, 0.5)
    full                        no press

Writes tests/data/kvpress/eval_v1.h5 (format_version 1):

    /  attrs: format_version, generator, kvpress_version, transformers_version,
              torch_version, model, window, kernel, pool ("avg"), compress ("context"),
              max_new_tokens, eos_id, alpha_safe, eps, alpha, methods (";"-joined),
              n_records
       budgets float64 [B]
    /records/<i>/  attrs: id, context, question, haystack, context_end (int64)
        prompt int32 [n]        context + question ids
        runs/<k>/  attrs: method ("full" or a ckv method name), budget_index (-1 for full)
            tokens  int32 [t]    kvpress's generated ids (EOS included when generated)
            margin  float32 [t]  top-1 minus top-2 logit at each generated step

With --check (default when the binary exists) it then runs `ckv eval` on the same records
and prints how many record x run token sequences agree (the full set; the C++ test runs a
subset in CI).

Usage: make_eval_goldens.py [--no-check] [--pipeline-check I ...]
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402


class _Anything:
    def __init__(self, *a, **k):
        pass

    def __call__(self, *a, **k):
        return _Anything()

    def __getattr__(self, k):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _Stub(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__"):
            raise AttributeError(k)
        return _Anything()


for _name in ["datasets", "fire"]:
    if _name not in sys.modules:
        try:
            __import__(_name)
        except ImportError:
            sys.modules[_name] = _Stub(_name)

import kvpress  # noqa: E402
import transformers  # noqa: E402
from kvpress import (AdaKVPress, CriticalAdaKVPress, CriticalKVPress,  # noqa: E402
                     KVPressTextGenerationPipeline, SnapKVPress)
from kvpress.presses.base_press import is_prefilling  # noqa: E402
from kvpress.utils import extract_keys_and_values  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests/data/kvpress/eval_v1.h5"
FORMAT_VERSION = 1

WINDOW, KERNEL = 32, 7          # ckv's defaults; kvpress pools by average (ckv --pool avg)
ALPHA_SAFE, EPS, ALPHA = 0.2, 1e-4, 0.5
BUDGETS = [0.2, 0.4]
MAX_NEW_TOKENS = 16
METHODS = ["snapkv", "adakv(snapkv)", "criticalkv(snapkv)", "criticalkv(adakv(snapkv))"]
# (haystack, length, count, seed): 21 records, 512-768 tokens.
RECORD_SETS = [
    ("noise", 512, 7, 1301),
    ("data/texts/gpl2.txt", 640, 7, 1302),
    ("data/texts/apache.txt", 768, 7, 1303),
]
# --pipeline-check I: on these records the pipeline's own _forward (one prefill per press) is
# run too and must give the fan-out's tokens (slow: a prefill per press).
PIPELINE_CHECKED = set()


def make_press(method, budget):
    ratio = 1.0 - budget
    snap = SnapKVPress(compression_ratio=ratio, window_size=WINDOW, kernel_size=KERNEL)
    if method == "snapkv":
        return snap
    if method == "adakv(snapkv)":
        return AdaKVPress(snap, alpha_safeguard=ALPHA_SAFE)
    if method == "criticalkv(snapkv)":
        return CriticalKVPress(snap, epsilon=EPS, first_stage_ratio=ALPHA)
    if method == "criticalkv(adakv(snapkv))":
        return CriticalAdaKVPress(snap, alpha_safeguard=ALPHA_SAFE, epsilon=EPS, first_stage_ratio=ALPHA)
    raise ValueError(method)


def ckv_binary():
    b = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
    if not Path(b).exists():
        sys.exit(f"make_eval_goldens: {b} missing (build ckv or set CKV_BINARY)")
    return b


def make_records(work):
    ckv = ckv_binary()
    records = []
    for k, (haystack, length, count, seed) in enumerate(RECORD_SETS):
        path = Path(work) / f"niah{k}.jsonl"
        cmd = [ckv, "niah", "-m", str(GGUF), "--length", str(length), "--count", str(count), "--seed", str(seed),
               "--id-prefix", f"evalref{k}", "-o", str(path), "--force"]
        if haystack != "noise":
            cmd += ["--haystack", str(ROOT / haystack)]
        subprocess.run(cmd, check=True, cwd=ROOT)
        for line in path.read_text().splitlines():
            r = json.loads(line)
            r["_haystack"] = haystack
            records.append(r)
    return records


class Recorder:
    """Captures the pipeline's generated ids (its tokenizer.decode call) and each step's
    top-1 minus top-2 logit (a hook on lm_head)."""

    def __init__(self, pipe):
        self.ids, self.margins = None, []
        self.decode = decode = pipe.tokenizer.decode

        def capture(ids, *a, **k):
            self.ids = [int(x) for x in ids.tolist()]
            return decode(ids, *a, **k)

        pipe.tokenizer.decode = capture
        pipe.model.lm_head.register_forward_hook(self._hook)

    def _hook(self, mod, args, out):
        top = out[0, -1].float().topk(2).values
        self.margins.append(float(top[0] - top[1]))

    def reset(self):
        self.ids, self.margins = None, []


class FanOut:
    """kvpress's prefill with several presses at once. The pipeline prefills the context inside
    `with press(model)`: after each attention layer, BasePress.forward_hook calls
    press.compress(module, hidden_states, keys, values, attentions, kwargs) on that layer's
    cache and stores the result in it (AdaKV-style presses leave keys and values and set
    module.masked_key_indices instead). Compressing layer l's cache does not change what any
    layer computes during the prefill (layer l + 1 reads its own keys), so every press sees
    the same inputs as in its own prefill: this hook makes the same compress call for each
    press on a clone of the uncompressed keys and values and keeps each result (and
    masked_key_indices) apart, while the prefill itself runs once with the full cache. Each
    press then answers over a copy of the full cache with its layers replaced as
    forward_hook would have replaced them, through the pipeline's own generate_answer."""

    def __init__(self, model, presses):
        self.model, self.presses = model, presses
        self.kept = [dict() for _ in presses]     # press -> layer -> (keys, values, masked)

    def hook(self, module, input, kwargs, output):
        hidden_states = kwargs["hidden_states"]
        if not is_prefilling(kwargs["cache_position"], hidden_states.shape[1]):
            return output
        keys, values = extract_keys_and_values(kwargs["past_key_values"], module.layer_idx)
        for i, press in enumerate(self.presses):
            module.masked_key_indices = None
            k, v = press.compress(module, hidden_states, keys.clone(), values.clone(), output[1], kwargs)
            self.kept[i][module.layer_idx] = (k, v, getattr(module, "masked_key_indices", None))
        module.masked_key_indices = None
        return output

    def prefill(self, context_ids):
        """The pipeline's prefill (`self.model.model(input_ids=context_ids, past_key_values=cache)`)
        with the presses' hooks registered as BasePress.__call__ registers them."""
        language_model = self.model.model
        hooks = []
        for press in self.presses:
            press.post_init_from_model(self.model)
        try:
            for layer in language_model.layers:
                layer.self_attn.rotary_emb = language_model.rotary_emb
                hooks.append(layer.self_attn.register_forward_hook(self.hook, with_kwargs=True))
            cache = DynamicCache()
            language_model(input_ids=context_ids, past_key_values=cache)
        finally:
            for h in hooks:
                h.remove()
        return cache

    def cache_of(self, full, i):
        """The cache press i leaves: forward_hook's `cache_layer.keys = keys` per layer, and
        the modules' masked_key_indices (attention_patch masks them while decoding)."""
        cache = copy.deepcopy(full)
        for layer, (k, v, masked) in self.kept[i].items():
            cache.layers[layer].keys = k
            cache.layers[layer].values = v
            self.model.model.layers[layer].self_attn.masked_key_indices = masked
        return cache


def clear_masks(model):
    for layer in model.model.layers:
        layer.self_attn.masked_key_indices = None


def answer(pipe, rec, cache, context_length, question_ids):
    """The pipeline's greedy loop (generate_answer) over `cache`; its ids and margins."""
    rec.reset()
    pipe.generate_answer(question_ids=torch.tensor([question_ids]), cache=cache, context_length=context_length,
                         max_new_tokens=MAX_NEW_TOKENS)
    assert rec.ids is not None and len(rec.margins) == len(rec.ids), "the pipeline's decode was not captured"
    return rec.ids, rec.margins


def run_record(pipe, rec, context_ids, question_ids, runs):
    """[(ids, margins)] per run of `runs` [(method, budget index, press or None)]."""
    presses = [p for _, _, p in runs if p is not None]
    fan = FanOut(pipe.model, presses)
    out = []
    with torch.inference_mode():
        full = fan.prefill(torch.tensor([context_ids]))
        i = 0
        for _, _, press in runs:
            clear_masks(pipe.model)
            if press is None:
                cache = copy.deepcopy(full)
            else:
                cache = fan.cache_of(full, i)
                i += 1
            out.append(answer(pipe, rec, cache, len(context_ids), question_ids))
        clear_masks(pipe.model)
    return out


def check_fan_out(pipe, rec, context_ids, question_ids, runs, results):
    """The pipeline itself (`_forward`: its prefill inside `with press(model)`, then
    generate_answer) on one record, which must give what the fan-out gave."""
    for (method, b, press), want in zip(runs, results):
        clear_masks(pipe.model)
        rec.reset()
        with torch.inference_mode():
            pipe._forward({"context_ids": torch.tensor([context_ids]), "questions_ids": [torch.tensor([question_ids])]},
                          max_new_tokens=MAX_NEW_TOKENS, press=press)
        assert rec.ids == want[0], f"fan-out differs from the pipeline for {method} {b}: {rec.ids} vs {want[0]}"
    clear_masks(pipe.model)


def set_str(obj, key, value):
    obj.attrs.create(key, value, dtype=h5py.string_dtype("utf-8"))


def write_golden(records, tok, pipe):
    rec = Recorder(pipe)
    eos = pipe.model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    tmp = OUT.with_suffix(".h5.tmp")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    results = {}
    with h5py.File(tmp, "w", libver=("v108", "v110")) as f:
        f.attrs["format_version"] = np.int64(FORMAT_VERSION)
        set_str(f, "generator", "tests/reference/make_eval_goldens.py")
        set_str(f, "kvpress_version", str(getattr(kvpress, "__version__", "0.5.5")))
        set_str(f, "transformers_version", transformers.__version__)
        set_str(f, "torch_version", torch.__version__)
        set_str(f, "model", "models/SmolLM2-135M-Instruct.Q4_1.gguf")
        set_str(f, "pool", "avg")
        set_str(f, "compress", "context")
        set_str(f, "methods", ";".join(METHODS))
        for key, val in dict(window=WINDOW, kernel=KERNEL, max_new_tokens=MAX_NEW_TOKENS, eos_id=int(eos),
                             n_records=len(records)).items():
            f.attrs[key] = np.int64(val)
        for key, val in dict(alpha_safe=ALPHA_SAFE, eps=EPS, alpha=ALPHA).items():
            f.attrs[key] = np.float64(val)
        f["budgets"] = np.array(BUDGETS, np.float64)
        for i, r in enumerate(records):
            t0 = time.time()
            question = r.get("question") or ""
            context_ids = tok.encode(r["context"], add_special_tokens=False)
            question_ids = tok.encode(question, add_special_tokens=False)
            g = f.create_group(f"records/{i}")
            set_str(g, "id", r["id"])
            set_str(g, "context", r["context"])
            set_str(g, "question", question)
            set_str(g, "haystack", r["_haystack"])
            g.attrs["context_end"] = np.int64(len(context_ids))
            g["prompt"] = np.array(context_ids + question_ids, np.int32)
            runs = [("full", -1, None)] + [(m, b, make_press(m, BUDGETS[b])) for m in METHODS
                                            for b in range(len(BUDGETS))]
            answers = run_record(pipe, rec, context_ids, question_ids, runs)
            if i in PIPELINE_CHECKED:
                check_fan_out(pipe, rec, context_ids, question_ids, runs, answers)
            for k, ((method, b, press), (ids, margins)) in enumerate(zip(runs, answers)):
                rg = g.create_group(f"runs/{k}")
                set_str(rg, "method", method)
                rg.attrs["budget_index"] = np.int64(b)
                rg["tokens"] = np.array(ids, np.int32)
                rg["margin"] = np.array(margins, np.float32)
                results[(r["id"], method, b)] = ids
            print(f"{r['id']}: {len(context_ids)}+{len(question_ids)} tokens, full "
                  f"{rec.decode(results[(r['id'], 'full', -1)])!r} ({time.time() - t0:.1f} s"
                  f"{', pipeline checked' if i in PIPELINE_CHECKED else ''})", flush=True)
    tmp.replace(OUT)
    print(f"wrote {OUT}")
    return results, int(eos)


def check_with_ckv(records, results, eos, work):
    """Runs `ckv eval` on the same records and counts identical token sequences."""
    jsonl = Path(work) / "all.jsonl"
    with open(jsonl, "w") as out:
        for r in records:
            out.write(json.dumps({k: v for k, v in r.items() if not k.startswith("_")}) + "\n")
    prefix = Path(work) / "eval"
    cmd = [ckv_binary(), "eval", "-m", str(GGUF), "-i", str(jsonl), "--methods", ",".join(METHODS),
           "--budgets", ",".join(str(b) for b in BUDGETS), "--compress", "context", "--window", str(WINDOW),
           "--kernel", str(KERNEL), "--pool", "avg", "--alpha-safe", str(ALPHA_SAFE), "--eps", str(EPS),
           "--max-new-tokens", str(MAX_NEW_TOKENS), "-o", str(prefix), "--force", "-q"]
    subprocess.run(cmd, check=True, cwd=ROOT)
    same = total = 0
    diverged = []
    with h5py.File(f"{prefix}.h5", "r") as f, h5py.File(OUT, "r") as gold:
        for i, r in enumerate(records):
            rg = f[f"records/{r['id']}"] if f"records/{r['id']}" in f else None
            assert rg is not None, f"ckv eval wrote no record {r['id']}"
            assert np.array_equal(rg["prompt"][:], gold[f"records/{i}/prompt"][:]), f"{r['id']}: prompt ids differ"
            for k in gold[f"records/{i}/runs"]:
                gr = gold[f"records/{i}/runs/{k}"]
                ours = rg[f"runs/{k}"]
                tokens = [int(x) for x in ours["tokens"][:]]
                if ours.attrs["stop"] == "eos":  # ckv stops before EOS, kvpress appends it
                    tokens.append(eos)
                ref = [int(x) for x in gr["tokens"][:]]
                total += 1
                if tokens == ref:
                    same += 1
                else:
                    diverged.append((r["id"], gr.attrs["method"], int(gr.attrs["budget_index"]), ref, tokens))
    print(f"ckv eval vs kvpress: {same} of {total} record x run token sequences identical "
          f"({len(records)} records x (full + {len(METHODS)} methods x {len(BUDGETS)} budgets))")
    for d in diverged:
        print("  diverged:", d)
    return same == total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-check", action="store_true", help="do not run ckv eval afterwards")
    ap.add_argument("--pipeline-check", type=int, action="append", default=[], metavar="I",
                    help="also run the pipeline's own _forward on record I (repeatable)")
    args = ap.parse_args()
    PIPELINE_CHECKED.update(args.pipeline_check)
    torch.set_num_threads(int(os.environ.get("CKV_REF_THREADS", "2")))
    if not GGUF.exists():
        sys.exit(f"make_eval_goldens: {GGUF} missing")
    with tempfile.TemporaryDirectory() as work:
        records = make_records(work)
        tok = AutoTokenizer.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name)
        model = AutoModelForCausalLM.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name, dtype=torch.float32,
                                                     attn_implementation="sdpa").eval()
        pipe = KVPressTextGenerationPipeline(model=model, tokenizer=tok, device="cpu")
        results, eos = write_golden(records, tok, pipe)
        if not args.no_check and not check_with_ckv(records, results, eos, work):
            sys.exit(1)


if __name__ == "__main__":
    main()
