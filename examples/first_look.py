"""A first look with ckv from Python (docs/PYTHON.md): load the default model, record a
needle-in-a-haystack prompt, compare two selection methods' actual perturbation L1 per
head (docs/MATH.md §3), and draw one figure. About half a minute on the default model.

    .venv/bin/python examples/first_look.py [--length 1024] [--budget 0.2] [-o first_look.png]
"""
import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import ckv  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a .gguf file or HF folder (default: the default model)")
    ap.add_argument("--length", type=int, default=1024, help="NIAH prompt length in tokens")
    ap.add_argument("--budget", type=float, default=0.2, help="kept fraction of the context")
    ap.add_argument("--methods", default="snapkv,criticalkv(snapkv)", help="two `ckv bound` methods")
    ap.add_argument("-o", "--out", default="first_look.png")
    args = ap.parse_args()
    methods = _split(args.methods)
    if len(methods) != 2:
        ap.error(f"--methods: give two methods, not {len(methods)}")

    start = time.perf_counter()
    model = ckv.load(args.model)
    record = model.niah(length=args.length, seed=0, depth=0.5)
    rec = model.run(record["context"], question=record["question"], record="q,k,v,logits")
    print(f"{model}: {len(rec.tokens)} tokens, context {rec.context_end}, "
          f"recorded in {time.perf_counter() - start:.1f} s")
    answer = model.token_text(int(np.argmax(rec.logits)))
    print(f"needle {record['answers']}, the model's next token {answer!r}")

    n_layer, n_head = model.config["n_layer"], model.config["n_head"]
    l1 = np.zeros((2, n_layer, n_head))  # [method, layer, head], mean over the question's queries
    for layer in rec.layers:
        res = model.bound(rec, layer, methods, [args.budget], threads=0)
        l1[:, layer] = res.mean("L1")[:, 0]
    print(f"bounds of {n_layer} layers in {time.perf_counter() - start:.1f} s total")
    for m, name in enumerate(methods):
        print(f"  {name:>24}: mean L1 {l1[m].mean():.4f}")
    better = (l1[1] < l1[0]).mean()
    print(f"  {methods[1]} perturbs less than {methods[0]} in {100 * better:.0f}% of heads")

    fig, ax = plt.subplots(figsize=(5.5, 5))
    sc = ax.scatter(l1[0].ravel(), l1[1].ravel(), c=np.repeat(np.arange(n_layer), n_head), cmap="viridis", s=12)
    lo, hi = l1[l1 > 0].min(), l1.max()
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel=f"L1 of {methods[0]}", ylabel=f"L1 of {methods[1]}",
           title=f"per-head perturbation at {100 * args.budget:g}% of {rec.context_end} tokens")
    fig.colorbar(sc, ax=ax, label="layer")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


def _split(text):
    """Split a method list at top-level commas: "criticalkv(adakv(snapkv)),h2o"."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


if __name__ == "__main__":
    main()
