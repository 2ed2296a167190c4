#!/usr/bin/env python3
"""Runs every example of README.md and docs/*.md as written, after the main job.

    /usr/bin/python3 scripts/check_examples.py [--build DIR] [--list] [doc.md ...]

An example block is an indented (4 spaces) or fenced code block whose first command line
starts with a shell command this script knows (`build/ckv`, `ckv`, `scripts/`, `python3`,
`mkdir`, `echo`, ...); every line of it is an example (a trailing backslash continues it).
The lines of one document run in order, each in `bash` with a time limit, in one scratch
copy of the repository root per document (the tracked files, `models/` and the main job's
`out/` linked in, `build/ckv` and `ckv` on PATH the binary under test), so a document's
later blocks read what its earlier ones wrote, as a reader following it would. The inputs
the docs name as the reader's own (`batch.jsonl`, `data.jsonl`, `niah.jsonl`, `qa.jsonl`, `ctx.txt`,
`ids.txt`, `sel.json`, `full_attention_heads.tsv`) are small stand-ins written into the copy
(FIXTURES). A line that exits non-zero fails the check; its output is printed.

Skipped, and listed with the reason: examples that need a Slurm cluster, a model that is
not here (a placeholder path such as `path/to/model.gguf` or `-m M`), a template with
placeholders (`FILE`, `PREFIX`, `[...]`, `a|b`), that are this script's own callers or
hours-long experiment scripts (the set-up, the test command, the paper reproduction), or
that the doc marks as a long run (a comment with "(hours" or "(minutes": a measurement
that takes a quarter of an hour or more, and what reads its output).
Exit status: 0 when every example that ran passed, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("build/ckv ", "ckv ", "scripts/", "python3 ", "/usr/bin/python3 ", "mkdir ", "echo ", "cp ",
            "ls ", "cat ", "head ", "h5ls ")

# (reason, pattern): the first that matches a line skips it.
SKIPS = [
    ("needs a Slurm cluster", re.compile(r"sbatch|squeue|srun|scripts/slurm/|\bless run1/|tests/slurm/")),
    ("needs a model that is not here", re.compile(r"path/to/|(^|\s)(-m|--model)\s+(M|model\.gguf|MODEL\S*)(\s|$)"
                                                    r"|(^|\s)-m\s+\S*(llama|Llama|mistral|Qwen|qwen|gemma)\S*")),
    ("a template with placeholders", re.compile(r"\b(FILE|PREFIX|INPUT|NAME|DIR|BASE|CRIT|RUN|OUT|LAYER|HEAD|"
                                                r"RECORDS|SHARD|F)\b(\.\w+)?|\[[^\]]*\]|\s\.\.\.(\s|$)|<[a-z_]+>|"
                                                r"\w\|\w")),
    ("the set-up or test command itself (it runs this check)", re.compile(
        r"^scripts/(main|test|setup|sanitize|fuzz|fuzz_corpus)\.sh|^scripts/check_examples")),
    ("an hours-long experiment script", re.compile(r"^scripts/(reproduce_paper|results|eval_results|"
                                                    r"methods_results|ruler_results)\.sh|bench/")),
]


def blocks(text: str):
    """(first line number, [lines]) of each code block: fenced, or indented by 4 spaces
    after a blank line."""
    lines = text.split("\n")
    i, out = 0, []
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((i + 2, lines[i + 1:j]))
            i = j + 1
        elif line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            out.append((i + 1, [x[4:] for x in lines[i:j]]))
            i = j
        else:
            i += 1
    return out


OUTPUT = re.compile(r"ckv( [a-z]+)?: ")   # what ckv prints ("ckv mask: note: ..."), shown under a command
HEREDOC = re.compile(r"<<-?\s*'?\"?([A-Za-z_]+)'?\"?")


def examples(path: Path):
    """(line number, command) of every example line of a document: a trailing backslash
    continues a line, a here-document (`<<'EOF'` ... `EOF`) is part of its line."""
    out = []
    for first, body in blocks(path.read_text(encoding="utf-8")):
        cmds, k = [], 0
        while k < len(body):
            n, c = first + k, body[k].strip()
            k += 1
            if not c or c.startswith("#"):
                continue
            while c.endswith("\\") and k < len(body):
                c = c[:-1].rstrip() + " " + body[k].strip()
                k += 1
            here = HEREDOC.search(c)
            if here:
                lines = [c]
                while k < len(body) and body[k].strip() != here.group(1):
                    lines.append(body[k])
                    k += 1
                lines.append(here.group(1))
                k += 1
                c = "\n".join(lines)
            cmds.append((n, c))
        cmds = [(n, c) for n, c in cmds if not OUTPUT.match(c)]
        if cmds and cmds[0][1].startswith(COMMANDS):
            out += [(n, c) for n, c in cmds if c.startswith(COMMANDS)]
    return out


def skip_reason(command: str) -> str:
    code = re.sub(r"\s#.*$", "", command.split("\n")[0])   # nor a here-document's text; the comment
    code = re.sub(r"'[^']*'|\"[^\"]*\"", "''", code)  # is not the command, nor are quoted arguments
    for reason, pattern in SKIPS:
        if pattern.search(code):
            return reason
    if re.search(r"#.*\((hours|minutes)\b", command.split("\n")[0]):
        return "marked in the doc as a long run (hours, or many minutes)"
    return ""


# The inputs the docs name as the reader's own (`--input batch.jsonl`, `--prompt-file
# ctx.txt`, ...): small stand-ins written into each scratch copy.
_FACTS = ("The ferry to Lindholm leaves at seven and returns at noon. The fish market opens on Tuesdays. "
          "The lighthouse keeper is called Mara Olsen. Repairs to the north pier start in March. "
          "The harbor office closes at five. Visitors can rent bicycles next to the cafe. ")
_RECORDS = [
    {"id": "keeper", "context": _FACTS * 4, "question": " Question: What is the lighthouse keeper called? Answer:",
     "answers": ["Mara Olsen"], "task": "qa", "spans": {"needle": [[94, 137]]}},
    {"id": "office", "context": _FACTS * 4, "question": " Question: When does the harbor office close? Answer:",
     "answers": ["five"], "task": "qa", "spans": {"needle": [[180, 213]]}},
]
FIXTURES = {
    "batch.jsonl": "".join(json.dumps(r) + "\n" for r in _RECORDS),
    "data.jsonl": "".join(json.dumps(r) + "\n" for r in _RECORDS),
    "niah.jsonl": "".join(json.dumps(r) + "\n" for r in _RECORDS),
    "qa.jsonl": "".join(json.dumps(r) + "\n" for r in _RECORDS),
    "ctx.txt": _FACTS * 4,
    "ids.txt": "504 3458 282 4649 314 260 1441 30\n",
    # one list of kept positions per KV head of the default model (3), for layer 0
    "sel.json": json.dumps({"format": "ckv.selection", "format_version": 1, "layers": {
        "0": {"kept": [list(range(0, 40)), list(range(10, 50)), list(range(20, 60))]}}}) + "\n",
    # DuoAttention's layout: one line per layer, one score per KV head (30 x 3)
    "full_attention_heads.tsv": "".join("\t".join(f"{((l * 3 + g) % 7) / 6:.3f}" for g in range(3)) + "\n"
                                        for l in range(30)),
}


def scratch(ckv: Path, doc_text: str = "") -> Path:
    """A copy of the repository as a fresh clone after the main job would be: tracked
    files, models/ and out/ of the main job linked, build/ckv the binary under test."""
    d = Path(tempfile.mkdtemp(prefix="ckv-examples-"))
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if not name:
            continue
        src, dst = ROOT / name, d / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    for name in ("models",):
        if (ROOT / name).exists():
            os.symlink(ROOT / name, d / name)
    for name, text in FIXTURES.items():
        # not a stand-in for what the document itself writes (`-o niah.jsonl`)
        writes = re.search(r"(-o|--out)\s+" + re.escape(name) + r"(\s|$)", doc_text)
        if not (d / name).exists() and not writes:
            (d / name).write_text(text)
    (d / "build").mkdir(exist_ok=True)
    os.symlink(ckv, d / "build" / "ckv")
    bin_dir = d / ".bin"
    bin_dir.mkdir()
    os.symlink(ckv, bin_dir / "ckv")
    return d


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", help="documents (default: README.md and docs/*.md)")
    p.add_argument("--build", default=os.environ.get("CKV_BUILD_DIR", str(ROOT / "build")))
    p.add_argument("--timeout", type=int, default=900, help="seconds per example line")
    p.add_argument("--list", action="store_true", help="list the examples and what would be skipped")
    a = p.parse_args(argv)
    docs = [Path(f).resolve() for f in a.files] or [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    ckv = Path(a.build).resolve() / "ckv"
    if not a.list and not ckv.is_file():
        print(f"check_examples: {ckv} does not exist: build it first (scripts/setup.sh --cli)", file=sys.stderr)
        return 1
    failed, ran, skipped = [], 0, []
    for doc in docs:
        rel = doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc
        todo = examples(doc)
        if not todo:
            continue
        work = None if a.list else scratch(ckv, doc.read_text(encoding="utf-8"))
        env = dict(os.environ, PATH=f"{work / '.bin'}:{os.environ['PATH']}" if work else os.environ["PATH"])
        env.pop("CKV_MODEL", None)
        try:
            for line, cmd in todo:
                why = skip_reason(cmd)
                if why:
                    skipped.append(f"{rel}:{line}: {cmd}  [{why}]")
                    continue
                if a.list:
                    print(f"run  {rel}:{line}: {cmd}")
                    continue
                t = time.monotonic()
                try:
                    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=work, env=env, capture_output=True,
                                       text=True, timeout=a.timeout)
                    rc, out = r.returncode, (r.stdout + r.stderr)
                except subprocess.TimeoutExpired as e:
                    rc, out = 124, f"(timed out after {a.timeout} s)\n{e.stdout or ''}{e.stderr or ''}"
                ran += 1
                status = "ok  " if rc == 0 else f"FAIL({rc})"
                print(f"{status} {time.monotonic() - t:6.1f}s {rel}:{line}: {cmd}", flush=True)
                if rc != 0:
                    failed.append(f"{rel}:{line}: {cmd}")
                    print("      " + "\n      ".join(str(out).strip().splitlines()[-15:]), flush=True)
        finally:
            if work:
                shutil.rmtree(work, ignore_errors=True)
    print(f"\nskipped {len(skipped)} examples:")
    for s in skipped:
        print("  " + s)
    print(f"\ncheck_examples: {ran} ran, {len(failed)} failed, {len(skipped)} skipped")
    for f in failed:
        print("  failed: " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
