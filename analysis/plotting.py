"""What every figure module shares: the Figure record, saving PNG + PDF, title headers."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Figure:
    name: str
    fig: object
    paths: list                                  # [png, pdf]
    arrays: dict = field(default_factory=dict)   # what was drawn, by name
    images: list = field(default_factory=list)   # AxesImage per panel (heatmaps)
    source: object = ""                          # the ckv command line(s) of the data
    caption: str = ""


def _save(fig, out_dir, name) -> list:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    fig.savefig(paths[0], dpi=130, bbox_inches="tight")
    fig.savefig(paths[1], bbox_inches="tight")
    return paths


def _header(f) -> str:
    n_rec = len(f.records)
    return f"{f.model} · {f.data} ({n_rec} record{'s' if n_rec != 1 else ''})"


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s).strip("_").replace("__", "_")
