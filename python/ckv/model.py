"""ckv.load and ckv.Model: a model the library loads (GGUF or an HF safetensors folder), its
tokenizer and chat template, and `run`, which records what `ckv dump` records (docs/DUMP.md)
in memory.

Names follow TransformerLens: rec["blocks.3.attn.hook_q"] is layer 3's post-RoPE queries,
hook_k / hook_v the keys and values, hook_pattern the attention rows. Shapes are ckv's (one
prompt, no batch axis, heads first): hook_q [head, pos, d_head] where TransformerLens has
[batch, pos, head_index, d_head].
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import numpy as np

from . import _ckv
from .analysis import BoundResult, bound

_ITEMS = ("q", "k", "v", "attn", "nu", "nu_l1", "nu_l2", "logits")
_HOOKS = {"hook_q": "q", "hook_k": "k", "hook_v": "v", "hook_pattern": "attn",
          "hook_nu_l1": "nu_l1", "hook_nu_l2": "nu_l2"}


@dataclass
class Recording:
    """What one `Model.run` recorded (float32 numpy arrays that own ckv's buffers).

    tokens       int32 [pos]
    layers       int [layer]: the recorded model layers; axis 0 of every per-layer array
    q            [layer, head, pos, d_head]     post-RoPE queries      (hook_q)
    k, v         [layer, kv_head, pos, d_head]  post-RoPE keys, values (hook_k, hook_v)
    attn         [layer, head, row, pos]        softmax rows of `attn_rows`, causal (hook_pattern)
    attn_rows    int [row]: the query positions of attn's rows
    nu_l1, nu_l2 [layer, head, pos]             ‖v_i W_h‖₁, ‖v_i W_h‖₂ (docs/MATH.md §1)
    logits       [vocab] of the last position (or [row, vocab] for logit_rows)
    context_end  c: positions [0, c) are the evictable context
    """
    tokens: np.ndarray
    layers: list
    context_end: int
    attn_rows: np.ndarray
    q: Optional[np.ndarray] = None
    k: Optional[np.ndarray] = None
    v: Optional[np.ndarray] = None
    attn: Optional[np.ndarray] = None
    nu_l1: Optional[np.ndarray] = None
    nu_l2: Optional[np.ndarray] = None
    logits: Optional[np.ndarray] = None
    logit_rows: list = field(default_factory=list)

    def slot(self, layer: int) -> int:
        """Index on axis 0 of the per-layer arrays of model layer `layer`."""
        try:
            return self.layers.index(layer)
        except ValueError:
            raise KeyError(f"layer {layer} was not recorded (recorded: {self.layers})") from None

    def __getitem__(self, name: str) -> np.ndarray:
        """TransformerLens names: "blocks.{l}.attn.hook_q" (hook_k, hook_v, hook_pattern,
        hook_nu_l1, hook_nu_l2) -> that layer's array; or an attribute name ("q", "logits")."""
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "blocks" and parts[2] == "attn" and parts[3] in _HOOKS:
            arr = getattr(self, _HOOKS[parts[3]])
            if arr is None:
                raise KeyError(f"{name}: {_HOOKS[parts[3]]} was not recorded")
            return arr[self.slot(int(parts[1]))]
        if name in ("q", "k", "v", "attn", "nu_l1", "nu_l2", "logits") and getattr(self, name) is not None:
            return getattr(self, name)
        raise KeyError(name)


def _items(record: Union[str, Iterable[str]]) -> set:
    items = set(x.strip() for x in (record.split(",") if isinstance(record, str) else record) if x.strip())
    for x in items:
        if x not in _ITEMS:
            raise _ckv.UsageError(f"record: unknown item '{x}' (known: {', '.join(_ITEMS)})")
    if "nu" in items:
        items |= {"nu_l1", "nu_l2"}
    return items


class Model:
    """A model loaded by ckv's library. `config` is a dict (n_layer, n_head, n_kv_head,
    d_head, d_model, vocab, context_length, rope_theta, ...)."""

    def __init__(self, path: Optional[str] = None):
        self._m = _ckv.Model(str(path) if path else "")
        self.config = self._m.config

    def __repr__(self):
        c = self.config
        return (f"ckv.Model({c['path']!r}: {c['arch']}, {c['n_layer']} layers, {c['n_head']} heads "
                f"({c['n_kv_head']} KV), d_head {c['d_head']})")

    # --- tokenizer -------------------------------------------------------------------------
    def encode(self, text: str, add_bos: bool = True, parse_special: bool = True) -> list:
        """Text to token ids, as `ckv dump --prompt` (special tokens in the text recognised)."""
        return self._m.encode(text, add_bos, parse_special)

    def decode(self, ids: Sequence[int]) -> str:
        return self._m.decode([int(i) for i in ids])

    def token_text(self, token_id: int) -> str:
        return self._m.token_text(int(token_id))

    @property
    def chat_template(self) -> str:
        return self._m.chat_template

    def apply_chat_template(self, messages: list, add_generation_prompt: bool = True) -> str:
        """messages: [{"role": "user", "content": "..."}]; ChatML templates only."""
        return self._m.apply_chat_template(list(messages), add_generation_prompt)

    def tokenize_record(self, context: str, question: Optional[str] = None, chat: bool = False):
        """(ids, context_end) of a record {context, question}, as `ckv dump --input` makes it."""
        return self._m.tokenize_record(context, question, chat)

    def niah(self, length: int = 4096, seed: int = 0, depth: Optional[float] = None, index: int = 0) -> dict:
        """One needle-in-a-haystack record as `ckv niah` writes it: context, question,
        answers, depths, n_tokens (docs/NIAH.md)."""
        return self._m.niah(length, seed, depth, index)

    # --- weights ---------------------------------------------------------------------------
    def wo(self, layer: int) -> np.ndarray:
        """o_proj.weight of `layer`: W_O, [d_model, n_head*d_head] float32 (HF layout)."""
        return self._m.wo(layer)

    def rope_inv_freq(self, layer: int = 0, end: int = 0) -> np.ndarray:
        """The RoPE inverse frequencies [rope_dim/2] that `layer` rotates by in a pass over
        `end` positions (expectedattention needs them): a Gemma 3 local layer's own base,
        longrope's long factors for a long pass."""
        return self._m.rope_inv_freq(layer, end)

    # --- the forward pass ------------------------------------------------------------------
    def tokens_of(self, text_or_ids, question: Optional[str] = None, chat: bool = False):
        """(ids, context_end) for `run`: a text (with its question), or ids as given."""
        if isinstance(text_or_ids, str):
            if question is not None:
                return self.tokenize_record(text_or_ids, question, chat)
            text = self.apply_chat_template([{"role": "user", "content": text_or_ids}]) if chat else text_or_ids
            ids = self.encode(text, add_bos=not chat, parse_special=True)
            return ids, len(ids)
        ids = [int(i) for i in np.asarray(text_or_ids).reshape(-1)]
        return ids, len(ids)

    def run(self, text_or_ids, record: Union[str, Iterable[str]] = "q,k,v,attn,nu,logits",
            layers: Optional[Iterable[int]] = None, attn_rows: Union[str, Sequence[int]] = "window",
            window: Optional[int] = None, question: Optional[str] = None, context_end: Optional[int] = None,
            chat: bool = False, logit_rows: Optional[Sequence[int]] = None, threads: int = 0) -> Recording:
        """One forward pass recording what `ckv dump --what RECORD` records, in memory.

        text_or_ids: a prompt text (tokenised as `ckv dump --prompt`: BOS when the model asks
            for one; with chat=True the chat template, no BOS), or token ids.
        question: with a text, the record's question: the prompt is `ckv dump --input`'s
            tokenisation of {context, question} and context_end the context's end.
        record: items of q,k,v,attn,nu (nu_l1,nu_l2),logits (the dump's --what names).
        layers: model layers to record (default all); attn_rows: "window" (the last `window`
            context positions, default 32 clipped to the context, and the question), "last:N",
            "all", or a list of positions — `ckv dump --attn-rows`.
        Returns a Recording (shapes there). The GIL is released during the pass.
        """
        items = _items(record)
        ids, c = self.tokens_of(text_or_ids, question, chat)
        if context_end is not None:
            c = int(context_end)
        n = len(ids)
        rows = []
        if "attn" in items:
            if isinstance(attn_rows, str):
                rows = _ckv.attention_rows(attn_rows, 32 if window is None else int(window), window is not None, c, n)
            else:
                rows = [int(r) for r in attn_rows]
        out = self._m.run(ids, None if layers is None else [int(x) for x in layers],
                          qkv=bool(items & {"q", "k", "v"}), nu=bool(items & {"nu_l1", "nu_l2"}),
                          attn_rows=rows, logit_rows=[] if logit_rows is None else [int(r) for r in logit_rows],
                          threads=int(threads))
        logits = out["logits"]
        if logit_rows is None:
            logits = logits.reshape(-1)
        rec = Recording(tokens=np.asarray(out["tokens"], dtype=np.int32), layers=list(out["layers"]),
                        context_end=c, attn_rows=np.asarray(rows, dtype=np.int32),
                        logits=logits if "logits" in items else None, logit_rows=list(out["logit_rows"]))
        for name in ("q", "k", "v", "attn", "nu_l1", "nu_l2"):
            if name in items and name in out:
                setattr(rec, name, out[name])
        return rec

    def eval(self, record: dict, methods: Sequence[str] = ("snapkv", "criticalkv(snapkv)"),
             budgets: Sequence[float] = (0.2,), **settings) -> dict:
        """`ckv eval` of one record (docs/EVAL.md): the full cache and every method x budget,
        each answer decoded greedily over its compressed KV cache, scored by the record's task,
        with the perturbation measured as the CLI measures it (the very library calls).

        record: a dict as one line of ckv's JSONL input ({"id", "context", "question",
        "answer"/"answers", "task", ...}; `Model.niah` makes one). budgets: kept fractions of
        the evictable entries, in (0, 1). settings (the CLI's flags): compress="context" or
        "prompt", max_new_tokens=32, track_steps=0 (docs/EVAL.md "Along the answer"),
        stop=[...], ignore_eos=False, chat=False, answer_space=True, window=32, kernel=7,
        pool="max", gqa_reduce="mean", h2o_rows=256, sinks=4, alpha=0.5, eps=1e-4,
        alpha_safe=0.2, every other selection parameter by its key (ckv.selection_params()),
        threads=0 (all cores). The methods that read a file need its path: file
        selection_file=, headkv headkv_profile=, duoattention duo_pattern=.

        Returns {"id", "n_tokens", "context_end", "question_start", "first_token", "step_tokens",
        "runs"}: runs[0] the full cache, then methods x budgets (methods outer), each a dict
        of the HDF5 run's attributes (method, fraction, budget, text, tokens, stop, kl,
        top1_agree, mean_l1, mean_l2, logp_answer, scores) and arrays kept [layer, kv_head],
        l1 / l2 [layer, head], and with track_steps step_l1 / step_l2 / step_theta_hat /
        step_theta_hat_l2 [step, layer, head], step_kl / step_top1_agree [step]."""
        import json

        a = _ckv.EvalArgs()
        a.methods = [str(m) for m in methods]
        a.budgets = [float(b) for b in budgets]
        for key, value in settings.items():
            if key == "stop" and isinstance(value, str):
                value = [value]
            if not hasattr(a, key) or key in ("methods", "budgets"):
                known = [k for k in dir(a) if not k.startswith("_") and k not in ("methods", "budgets")]
                raise _ckv.UsageError(f"eval: unknown setting '{key}' (known: {', '.join(sorted(known))})")
            setattr(a, key, value)
        rec = dict(record)
        rec.setdefault("id", "0")
        return self._m.eval(json.dumps(rec), a)

    def bound(self, rec: Recording, layer: int, methods: Sequence[str], budgets: Sequence, **params) -> BoundResult:
        """`ckv.bound` on one recorded layer, with this model's W_O and RoPE frequencies;
        the context end and depth from the recording and the model."""
        if rec.q is None or rec.k is None or rec.v is None:
            raise _ckv.InputError("the recording has no q, k, v (run with record='q,k,v,...')")
        s = rec.slot(layer)
        params.setdefault("inv_freq", self.rope_inv_freq(layer, rec.q.shape[-2]))
        return bound(rec.q[s], rec.k[s], rec.v[s], self.wo(layer), context_end=rec.context_end,
                     methods=methods, budgets=budgets, layer=layer, n_layer=self.config["n_layer"], **params)


_DEFAULT_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load(path: Optional[str] = None) -> Model:
    """Load a model: a .gguf file or an HF folder (config.json, safetensors, tokenizer.json).
    Without a path, the default model as the CLI finds it: $CKV_MODEL, else
    models/SmolLM2-135M-Instruct.Q4_1.gguf searched upwards from the working directory (and
    the interpreter), then upwards from this package (a .venv inside the checkout)."""
    if path is None and not os.environ.get("CKV_MODEL"):
        try:
            _ckv.default_model_path()
        except _ckv.InputError:
            for parent in Path(__file__).resolve().parents:
                if (parent / "models" / _DEFAULT_MODEL).is_file():
                    path = parent / "models" / _DEFAULT_MODEL
                    break
    return Model(path)
