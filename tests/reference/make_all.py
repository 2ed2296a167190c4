#!/usr/bin/env python3
"""Regenerate every reference file under tests/data/, then run the checks.

Runs, in order: make_tiny_models.py (the golden generators read its models),
every other make_*.py in this folder (forward, quant, tokenizer, ... goldens;
a generator another engineer adds is picked up without editing this file),
then every check_*.py. Stops at the first failure. `--dry-run` lists the order.
"""
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIRST = ["make_tiny_models.py"]


def scripts():
    makes = sorted(p.name for p in HERE.glob("make_*.py") if p.name != "make_all.py")
    ordered = [s for s in FIRST if s in makes] + [s for s in makes if s not in FIRST]
    return ordered + sorted(p.name for p in HERE.glob("check_*.py"))


def main():
    if "--dry-run" in sys.argv[1:]:  # print the order only
        print("\n".join(scripts()))
        return
    for name in scripts():
        print(f"== {name}", flush=True)
        t = time.time()
        rc = subprocess.call([sys.executable, str(HERE / name)], cwd=HERE.parents[1])
        if rc != 0:
            sys.exit(f"make_all: {name} failed with exit code {rc}")
        print(f"== {name} done in {time.time() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
