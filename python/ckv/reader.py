"""One reader for ckv's HDF5 outputs: dump (docs/DUMP.md), bound and check (docs/BOUND.md),
mask (docs/MASK.md), eval (docs/EVAL.md). `ckv.open` is `open_ckv`; analysis/ckv_reader.py
loads this file, so it imports nothing of the package (h5py and numpy only).

`open_ckv(path)` reads the root attributes `schema` / `schema_version` and returns a
DumpFile, BoundFile (kind "bound" or "check"), MaskFile or EvalFile; a file of another schema or
version raises SchemaError naming the file, so a figure is never drawn from a layout this
code does not know. Records without `complete = TRUE` (an interrupted run) are skipped.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

# schema name -> the versions this reader implements (the newest last). Each rename made the
# names one vocabulary across the schemas, and this reader gives older records the new names
# (_renamed): ckv.eval 2 named version 1's context end `c` and prompt ids `prompt`
# `context_end` and `tokens`; ckv.bound 3 and ckv.eval 3 name the record's token count
# `n_tokens` (was `n`), ckv.mask 2 likewise (was `prompt_tokens`), and ckv.eval 3 the root's
# fractions `budget_fractions` (was `budgets`).
SUPPORTED = {"ckv.dump": (1,), "ckv.bound": (2, 3), "ckv.mask": (1, 2), "ckv.eval": (1, 2, 3)}
# (schema, the first version with the new names) -> {old name: new name} of record attributes.
_RENAMED = {("ckv.eval", 2): {"c": "context_end"}, ("ckv.eval", 3): {"n": "n_tokens"},
            ("ckv.bound", 3): {"n": "n_tokens"}, ("ckv.mask", 2): {"prompt_tokens": "n_tokens"}}


def _renamed(attrs: dict, schema: str, version: int) -> dict:
    """A record's attributes with the names of the newest version of its schema."""
    for (s, since), names in _RENAMED.items():
        if s == schema and version < since:
            for old, new in names.items():
                if old in attrs and new not in attrs:
                    attrs[new] = attrs.pop(old)
    return attrs


class SchemaError(Exception):
    """A file that is not a ckv output of a schema version this reader knows."""

    def __init__(self, path, message):
        self.path = str(path)
        super().__init__(f"{path}: {message}")


def _str(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [_str(x) for x in v.tolist()]
    return v


def _attrs(obj) -> dict:
    return {k: _str(v) for k, v in obj.attrs.items()}


def criticalkv_pairs(methods) -> list:
    """(criticalkv method, its base method) for each criticalkv(X) of `methods` whose X is
    among them too, in their order."""
    out = []
    for m in methods:
        if m.startswith("criticalkv(") and m.endswith(")"):
            base = m[len("criticalkv("):-1]
            if base in methods:
                out.append((m, base))
    return out


@dataclass
class CkvFile:
    """Common part: path, schema, provenance (the root attributes) and settings."""
    path: Path
    schema: str
    version: int
    attrs: dict
    settings: dict = field(default_factory=dict)

    @property
    def command_line(self) -> str:
        return self.attrs.get("command_line", "")

    @property
    def sliding_layers(self) -> list:
        """The model layers with a sliding window (the root's `sliding_layers`, JSON), [] for
        a model without; the other layers attend over every entry."""
        return [int(x) for x in json.loads(self.attrs.get("sliding_layers", "[]") or "[]")]

    @property
    def model(self) -> str:
        """Model name for titles: the file name without extension."""
        p = self.attrs.get("model_path", "") or ""
        name = os.path.basename(p.rstrip("/")) or "(embedded model)"
        for ext in (".gguf",):
            if name.endswith(ext):
                name = name[: -len(ext)]
        return name

    @property
    def data(self) -> str:
        """Input for titles: the input file name, or 'built-in prompt'."""
        p = self.attrs.get("input_file", "") or ""
        return os.path.basename(p) if p else "built-in prompt"


@dataclass
class BoundRecord:
    id: str
    n_tokens: int
    context_end: int
    budgets: np.ndarray        # [budget] kept entries per KV head
    layers: np.ndarray         # [layer] model layer indices
    metrics_mean: np.ndarray   # [method, budget, layer, head, metric], mean over queries
    metrics: np.ndarray        # [method, budget, layer, head, query, metric]
    kept_count: np.ndarray     # [method, budget, layer, kv_head]
    eval_rows: np.ndarray = None   # [query] prompt positions of the evaluation queries
    below_window: np.ndarray = None  # [budget] 1 where the budget is below the snapkv window
    eval_token: int = -1           # --eval first-decode: the greedy token appended
    question_start: int = 0        # the input's context end (context_end is the evictable end)


@dataclass
class BoundFile(CkvFile):
    """`ckv bound` (kind "bound": axis 0 = method) or `ckv check` (kind "check": axis 0 = alpha)."""
    kind: str = "bound"
    methods: list = field(default_factory=list)   # bound: methods; check: "alpha=0.5" labels
    alphas: list = field(default_factory=list)    # check only
    metric_names: list = field(default_factory=list)
    records: list = field(default_factory=list)

    def metric_index(self, name: str) -> int:
        return self.metric_names.index(name)

    def method_index(self, method: str) -> int:
        if method not in self.methods:
            raise KeyError(f"{self.path}: no method {method!r}; it has {', '.join(self.methods)}")
        return self.methods.index(method)

    @property
    def layers(self) -> np.ndarray:
        return self.records[0].layers

    @property
    def budget_labels(self) -> list:
        """One label per budget: the fraction (e.g. '20%') or 'keep N'."""
        keep = int(self.settings.get("keep", 0) or 0)
        if keep:
            return [f"keep {keep}"]
        return [f"{100 * x:g}%" for x in self.budget_fractions]

    @property
    def budget_fractions(self) -> list:
        """The --budgets fractions as numbers (the root's budget_fractions; [] with --keep)."""
        if "budget_fractions" in self.attrs:
            return [float(x) for x in np.atleast_1d(self.attrs["budget_fractions"])]
        out = []  # a file from before the attribute: the settings' text, 0.2 or 20%
        for x in str(self.settings.get("budgets", "")).split(","):
            x = x.strip()
            if x:
                out.append(float(x[:-1]) / 100 if x.endswith("%") else float(x))
        return out

    @property
    def protocol(self) -> str:
        """The protocol settings for titles: eval, compress and nu_min reading."""
        s = self.settings
        return (f"eval {s.get('eval', 'question')}, compress {s.get('compress', 'context')}, "
                f"nu_min {s.get('nu_min', 'all')}")

    def below_window(self, budget_index: int) -> int:
        """Records whose budget `budget_index` is below the snapkv window (docs/BOUND.md)."""
        return int(sum(int(r.below_window[budget_index]) for r in self.records))

    def mean_metric(self, name: str) -> np.ndarray:
        """[method, budget, layer, head]: the mean over queries, then over records."""
        i = self.metric_index(name)
        return np.mean([r.metrics_mean[..., i] for r in self.records], axis=0)

    def kept_mask(self, record_id: str) -> np.ndarray:
        """[method, budget, layer, kv_head, context_end] uint8, 1 where the selection keeps the
        entry: read from the file when asked (it is the largest dataset of a record)."""
        with h5py.File(self.path, "r") as f:
            return f[f"records/{record_id}/kept_mask"][()]

    def min_metric(self, name: str) -> np.ndarray:
        """[method, budget, layer, head]: the smallest value over queries and records."""
        i = self.metric_index(name)
        return np.min([r.metrics[..., i].min(axis=-1) for r in self.records], axis=0)

    @property
    def base_pairs(self) -> list:
        """(criticalkv method, its base method) for each criticalkv(X) whose X is present."""
        return criticalkv_pairs(self.methods)


@dataclass
class MaskRun:
    name: str
    attrs: dict
    data: dict                 # dataset name -> array (dims in docs/MASK.md)


@dataclass
class MaskRecord:
    id: str
    attrs: dict
    context_end: int
    runs: dict                 # run name ("target", "placebo0", ...) -> MaskRun
    s_attn: np.ndarray         # [layer, head, pos<c]
    s_val: np.ndarray
    eval_rows: np.ndarray = None   # [eval] prompt positions of the evaluation rows


@dataclass
class MaskFile(CkvFile):
    records: list = field(default_factory=list)

    @property
    def method(self) -> str:
        """The selection method run inside the masked pass (`--method`), else ''."""
        return self.settings.get("method", "") or ""

    @property
    def budget_fraction(self):
        """`--budget` as a number (the root's budget_fraction; parsed from the settings' 0.2 or
        20% for older files), None without --budget (--keep, spans, a selection file)."""
        if "budget_fraction" in self.attrs:
            return float(self.attrs["budget_fraction"])
        text = str(self.settings.get("budget", "") or "").strip()
        if not text:
            return None
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)


@dataclass
class DumpFile(CkvFile):
    """Dumps can be large: records stay in the open file, read lazily via `h5`."""
    h5: h5py.File = None
    model_attrs: dict = field(default_factory=dict)
    record_ids: list = field(default_factory=list)

    def close(self):
        self.h5.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def array(self, record_id, name: str, layer=None) -> np.ndarray:
        """One dataset as numpy, in its stored dtype (f16 or f32, docs/DUMP.md): `q`, `k`,
        `v`, `attn`, `nu_l1`, `nu_l2`, `attn_out`, `resid` of a layer, or `tokens`,
        `attn_rows`, `logits_last` of the record (layer None)."""
        g = self.h5[f"records/{record_id}"]
        return (g[name] if layer is None else g[f"layers/{layer}/{name}"])[()]

    def record_attrs(self, record_id) -> dict:
        """n_tokens, context_end, the record's text fields (docs/DUMP.md)."""
        return _attrs(self.h5[f"records/{record_id}"])

    def wo(self, layer) -> np.ndarray:
        """o_proj.weight of a layer, [d_model, n_head*d_head] float32 (`--what wo`)."""
        return self.h5[f"model/layers/{layer}/W_O"][()]


@dataclass
class EvalRun:
    """One decoding of one record: the full cache (method "full", fraction 1) or a method at
    a budget (lib/io/eval_schema.h lists the attributes)."""
    method: str
    fraction: float
    attrs: dict
    scores: dict               # the task's scores ({} when the record has no task)
    tokens: np.ndarray
    # --track-steps (docs/EVAL.md "Along the answer"): step_l1, step_l2, step_theta_hat,
    # step_theta_hat_l2 [step, layer, head], step_kl, step_top1_agree [step]; {} without it
    # and for the full cache.
    steps: dict = field(default_factory=dict)

    @property
    def score(self) -> float:
        """The task's headline score (accuracy), NaN when unscored."""
        return float(self.scores.get("score", float("nan")))

    @property
    def logp_answer(self) -> float:
        return float(self.attrs.get("logp_answer", float("nan")))

    @property
    def mean_l1(self) -> float:
        return float(self.attrs.get("mean_l1", float("nan")))


@dataclass
class EvalRecord:
    id: str
    index: int
    attrs: dict
    runs: list                 # [EvalRun]: the full cache first, then methods x budgets

    @property
    def full(self) -> EvalRun:
        return self.runs[0]


@dataclass
class EvalFile(CkvFile):
    methods: list = field(default_factory=list)
    budgets: list = field(default_factory=list)   # fractions: the root's budget_fractions
    records: list = field(default_factory=list)   # [EvalRecord] in input order

    @property
    def base_pairs(self) -> list:
        """(criticalkv method, its base method) for each criticalkv(X) whose X is present."""
        return criticalkv_pairs(self.methods)


def _complete(group) -> bool:
    return bool(group.attrs.get("complete", False))


def _read_bound(f, base: dict) -> BoundFile:
    a = base["attrs"]
    kind = a.get("kind", "bound")
    if kind not in ("bound", "check"):
        raise SchemaError(base["path"], f"unknown kind {kind!r} (expected bound or check)")
    alphas = [float(x) for x in a.get("alphas", [])] if kind == "check" else []
    methods = list(a.get("methods", [])) if kind == "bound" else [f"alpha={x:g}" for x in alphas]
    out = BoundFile(kind=kind, methods=methods, alphas=alphas,
                    metric_names=list(a.get("metrics", [])), **base)
    for rid, g in f["records"].items():
        if not _complete(g):
            continue
        ga = _renamed(_attrs(g), "ckv.bound", base["version"])
        out.records.append(BoundRecord(
            id=rid, n_tokens=int(ga["n_tokens"]), context_end=int(g.attrs["context_end"]),
            budgets=np.asarray(g.attrs["budgets"]), layers=np.asarray(g.attrs["layers"]),
            metrics_mean=g["metrics_mean"][()], metrics=g["metrics"][()],
            kept_count=g["kept_count"][()], eval_rows=np.asarray(g.attrs["eval_rows"]),
            below_window=np.asarray(g.attrs["below_window"]), eval_token=int(g.attrs["eval_token"]),
            question_start=int(g.attrs["question_start"])))
    if not out.records:
        raise SchemaError(base["path"], "no complete record")
    return out


def _read_mask(f, base: dict) -> MaskFile:
    out = MaskFile(**base)
    for rid, g in f["records"].items():
        if not _complete(g):
            continue
        runs = {}
        for name, rg in g["runs"].items():
            runs[name] = MaskRun(name=name, attrs=_attrs(rg),
                                 data={k: rg[k][()] for k in rg.keys()})
        out.records.append(MaskRecord(id=rid, attrs=_renamed(_attrs(g), "ckv.mask", base["version"]),
                                      context_end=int(g.attrs["context_end"]),
                                      runs=runs, s_attn=g["s_attn"][()], s_val=g["s_val"][()],
                                      eval_rows=g["eval_rows"][()]))
    if not out.records:
        raise SchemaError(base["path"], "no complete record")
    return out


def _read_eval(f, base: dict) -> EvalFile:
    a = base["attrs"]
    fractions = a.get("budget_fractions", a.get("budgets", []))  # "budgets" before version 3
    out = EvalFile(methods=list(a.get("methods", [])), budgets=[float(x) for x in fractions], **base)
    for rid, g in f["records"].items():
        if not _complete(g):
            continue
        runs = []
        for k in sorted(g["runs"].keys(), key=int):
            rg = g["runs"][k]
            ra = _attrs(rg)
            runs.append(EvalRun(method=ra["method"], fraction=float(ra["fraction"]), attrs=ra,
                                scores=json.loads(ra["scores"]) if ra.get("scores") else {},
                                tokens=rg["tokens"][()],
                                steps={k: rg[k][()] for k in rg.keys() if k.startswith("step_")}))
        attrs = _renamed(_attrs(g), "ckv.eval", base["version"])
        out.records.append(EvalRecord(id=rid, index=int(g.attrs["index"]), attrs=attrs, runs=runs))
    if not out.records:
        raise SchemaError(base["path"], "no complete record")
    out.records.sort(key=lambda r: r.index)
    return out


def open_ckv(path):
    """Open any ckv output; dispatch on its schema. Raises SchemaError for other files."""
    path = Path(path)
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise SchemaError(path, f"not a readable HDF5 file ({e})") from None
    keep_open = False
    try:
        attrs = _attrs(f)
        schema = attrs.get("schema")
        if schema is None:
            raise SchemaError(path, "no 'schema' root attribute: not a ckv output")
        if schema not in SUPPORTED:
            raise SchemaError(path, f"schema {schema!r} is not one of {', '.join(SUPPORTED)}")
        version = int(attrs.get("schema_version", -1))
        if version not in SUPPORTED[schema]:
            known = " and ".join(str(v) for v in SUPPORTED[schema])
            raise SchemaError(path, f"schema {schema} version {version}; this reader reads "
                                    f"version {known} only")
        settings = json.loads(attrs.get("settings", "{}") or "{}")
        base = dict(path=path, schema=schema, version=version, attrs=attrs, settings=settings)
        if schema == "ckv.bound":
            return _read_bound(f, base)
        if schema == "ckv.mask":
            return _read_mask(f, base)
        if schema == "ckv.eval":
            return _read_eval(f, base)
        ids = [k for k, g in f["records"].items() if _complete(g)]
        keep_open = True
        return DumpFile(h5=f, model_attrs=_attrs(f["model"]), record_ids=ids, **base)
    finally:
        if not keep_open:
            f.close()
