"""Reference test of ckv.kvpress (needs torch, transformers and kvpress; skipped without):
ckv's snapkv kept sets, computed by ckv.select on the HF model's own post-RoPE q/k/v
(ckv.hf.record) with kvpress's SnapKVPress settings (window 64, avg pooling, kernel 5),
applied through KeptSetPress, give the same greedy tokens as kvpress's SnapKVPress, decoded
as kvpress's pipeline decodes (prefill of the context under the press, then the question
and each new token at their true positions): 10 NIAH records x 2 budgets."""
import os
from pathlib import Path

import numpy as np
import pytest

import ckv

torch = pytest.importorskip("torch", reason="torch not installed: the kvpress reference test is skipped")
transformers = pytest.importorskip("transformers", reason="transformers not installed")
kvpress = pytest.importorskip("kvpress", reason="kvpress not installed")
import ckv.hf  # noqa: E402
import ckv.kvpress  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(os.environ.get("CKV_MODEL", str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")))
RATIOS = [0.5, 0.75]  # kvpress compression ratios: 50 % and 25 % of the context kept
STEPS = 6
RECORDS = int(os.environ.get("CKV_KVPRESS_RECORDS", "10"))

pytestmark = pytest.mark.skipif(not MODEL.exists(), reason="default model absent")


def greedy(hf, press, context, question):
    cache = transformers.DynamicCache()
    c = len(context)
    with torch.no_grad():
        with press(hf):
            hf.model(input_ids=torch.tensor([context]), past_key_values=cache)
        pos = torch.arange(c, c + len(question)).unsqueeze(0)
        out = hf(input_ids=torch.tensor([question]), past_key_values=cache, position_ids=pos, logits_to_keep=1)
        tokens = [int(out.logits[0, -1].argmax())]
        pos = pos[:, -1:] + 1
        for i in range(STEPS - 1):
            out = hf(input_ids=torch.tensor([[tokens[-1]]]), past_key_values=cache, position_ids=pos + i)
            tokens.append(int(out.logits[0, -1].argmax()))
    return tokens


def test_kept_sets_through_kvpress_match_snapkvpress():
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    model = ckv.load(str(MODEL))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name,
                                                            dtype=torch.float32).eval()
    n_layer = model.config["n_layer"]
    same, total = 0, 0
    for seed in range(RECORDS):
        rec = model.niah(length=320, seed=seed)
        ids, c = model.tokenize_record(rec["context"], rec["question"])
        context, question = ids[:c], ids[c:]
        recorded = ckv.hf.record(hf, context, logits=False)
        for ratio in RATIOS:
            budget = ckv.budget_from_fraction(c, 1 - ratio)
            kept = {}
            for layer in range(n_layer):
                kept[layer] = ckv.select("snapkv", budget, recorded.q[layer], recorded.k[layer], recorded.v[layer],
                                         recorded.wo[layer], context_end=c, window=64, pool="avg", kernel=5)
            ours = greedy(hf, ckv.kvpress.KeptSetPress(kept=kept), context, question)
            theirs = greedy(hf, kvpress.SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5),
                            context, question)
            total += 1
            same += ours == theirs
            assert ours == theirs, f"seed {seed}, ratio {ratio}: {ours} != {theirs}"
    assert same == total == RECORDS * len(RATIOS)


def test_kept_positions():
    mask = np.zeros((2, 6), bool)
    mask[0, [0, 3]] = mask[1, [4, 5]] = True
    np.testing.assert_array_equal(ckv.kvpress.kept_positions(mask), [[0, 3], [4, 5]])
    mask[1, 1] = True
    with pytest.raises(ValueError, match="different counts"):
        ckv.kvpress.kept_positions(mask)


def test_kept_sets_of_a_kvpress_press_feed_ckv_bound(tmp_path):
    # kvpress -> ckv: SnapKVPress's kept sets recorded during its own prefill equal ckv's snapkv
    # with the same settings, and `ckv bound --methods file` reads them from the selection file
    # write_selection makes: its file method keeps exactly what its snapkv keeps.
    import json
    import subprocess

    import h5py

    torch.set_num_threads(min(4, os.cpu_count() or 1))
    model = ckv.load(str(MODEL))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(MODEL.parent), gguf_file=MODEL.name,
                                                            dtype=torch.float32).eval()
    rec = model.niah(length=320, seed=3)
    ids, c = model.tokenize_record(rec["context"], rec["question"])
    context = ids[:c]
    press = kvpress.SnapKVPress(compression_ratio=0.5, window_size=64, kernel_size=5)
    kept = ckv.kvpress.kept_sets(press, hf, context)
    assert sorted(kept) == list(range(model.config["n_layer"]))
    recorded = ckv.hf.record(hf, context, logits=False)
    budget = ckv.budget_from_fraction(c, 0.5)
    for layer in (0, 7, 29):
        ours = ckv.select("snapkv", budget, recorded.q[layer], recorded.k[layer], recorded.v[layer],
                          recorded.wo[layer], context_end=c, window=64, pool="avg", kernel=5)
        np.testing.assert_array_equal(kept[layer], ours, err_msg=f"layer {layer}")
    sel = tmp_path / "snapkv.json"
    ckv.kvpress.write_selection(sel, kept, c)
    jsonl = tmp_path / "rec.jsonl"
    jsonl.write_text(json.dumps({"id": "r", "context": rec["context"], "question": rec["question"]}) + "\n")
    binary = os.environ.get("CKV_BINARY", str(ROOT / "build" / "ckv"))
    r = subprocess.run([binary, "-q", "bound", "-m", str(MODEL), "-t", "2", "-i", str(jsonl), "--layers", "0,7,29",
                        "--methods", "snapkv,file", "--selection-file", str(sel), "--budgets", "0.5",
                        "--window", "64", "--pool", "avg", "--kernel", "5", "-o", str(tmp_path / "b")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "b.h5", "r") as f:
        km = f["records/r/kept_mask"][()]  # [method, budget, layer, kv_head, pos]
        np.testing.assert_array_equal(km[1, 0], km[0, 0])
        np.testing.assert_array_equal(km[1, 0, 1].astype(bool), kept[7])
