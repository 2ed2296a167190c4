#!/usr/bin/env python3
"""Writes words.txt, the word list of `ckv ruler` (docs/RULER.md "Stand-ins"), from Debian's
wamerican package (SCOWL size 50, /usr/share/dict/american-english; `apt-get install
wamerican`): the entries of 4 to 8 lowercase ASCII letters (no capitals, apostrophes or
accents), every second one in the file's order, one a line. RULER draws its words from the
wonderwords package's noun, adjective and verb lists; those are not copied here.

    python3 data/words/make_words.py [/usr/share/dict/american-english]
"""
import re
import sys
from pathlib import Path

source = Path(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/dict/american-english")
entries = [line.strip() for line in source.read_text(encoding="utf-8").splitlines()]
kept = [w for w in entries if re.fullmatch(r"[a-z]{4,8}", w)][::2]
out = Path(__file__).with_name("words.txt")
out.write_text("".join(w + "\n" for w in kept), encoding="ascii")
print(f"{out}: {len(kept)} words from {source}")
