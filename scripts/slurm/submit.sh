#!/usr/bin/env bash
# Submit a ckv batch job to Slurm: one array task per shard, then a merge job that runs only
# when every task succeeded. Prints the job ids.
#
#   scripts/slurm/submit.sh [OPTIONS] -- SUBCOMMAND [ARGS...]
#   scripts/slurm/submit.sh -n 8 -d run1 -- dump -m model.gguf --input niah.jsonl --layers 0-3
#   scripts/slurm/submit.sh -n 8 -d run1 --only 3 -- dump ...   # rerun failed shard 3, merge again
#   scripts/slurm/submit.sh -n 8 -d run2 -- bound -m model.gguf --input niah.jsonl --budgets 0.1,0.2
#   scripts/slurm/submit.sh -n 8 -d run3 -- mask -m model.gguf --input niah.jsonl --span-name needle
#
# Subcommands: dump, bound, check, mask (those with --shard). Task i writes DIR/shard-<i>.h5
# (bound/check: also shard-<i>.csv, .json); the merge writes DIR/merged.h5 (bound/check:
# also merged.csv and merged.json, regenerated from merged.h5).
#
# Options:
#   -n, --shards N      number of shards = array tasks 0..N-1 (default 4)
#   -d, --out-dir DIR   shard outputs DIR/shard-<i>.h5 and logs DIR/logs/ (default ckv-job)
#   -o, --merged FILE   merged output (default DIR/merged.h5)
#       --only LIST     submit only these array task ids (Slurm syntax: 3 or 1,5 or 2-4), e.g.
#                       to rerun failed shards with the same arguments; the merge job follows
#   -c, --cpus N        CPUs per task (default 1; passed to ckv as -t unless ARGS set it)
#       --ckv PATH      ckv executable (default: $CKV, else `ckv` on PATH)
#       --no-merge      submit only the array
#       --sbatch ARG    extra sbatch argument for both jobs, repeatable
#                       (--sbatch=--partition=gpu --sbatch=--time=2:00:00 --sbatch=--gres=gpu:1)
# Output (stdout): `array_job=<id>` and `merge_job=<id>` lines.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "submit.sh: $*" >&2; exit 2; }

n=4 out_dir=ckv-job merged='' only='' cpus=1 ckv=${CKV:-} merge=1 sbatch_extra=()
while [ $# -gt 0 ]; do
  case $1 in
    -n | --shards) n=${2:?}; shift 2 ;;
    --shards=*) n=${1#*=}; shift ;;
    -d | --out-dir) out_dir=${2:?}; shift 2 ;;
    --out-dir=*) out_dir=${1#*=}; shift ;;
    -o | --merged) merged=${2:?}; shift 2 ;;
    --merged=*) merged=${1#*=}; shift ;;
    --only) only=${2:?}; shift 2 ;;
    --only=*) only=${1#*=}; shift ;;
    -c | --cpus) cpus=${2:?}; shift 2 ;;
    --cpus=*) cpus=${1#*=}; shift ;;
    --ckv) ckv=${2:?}; shift 2 ;;
    --ckv=*) ckv=${1#*=}; shift ;;
    --no-merge) merge=0; shift ;;
    --sbatch) sbatch_extra+=("${2:?}"); shift 2 ;;
    --sbatch=*) sbatch_extra+=("${1#*=}"); shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    *) die "unknown option '$1' (the ckv command goes after --; --help for usage)" ;;
  esac
done
[ $# -ge 1 ] || die "no ckv subcommand given (after --), e.g. -- dump --input batch.jsonl"
[[ $n =~ ^[1-9][0-9]*$ ]] || die "--shards: '$n' is not a positive integer"
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus: '$cpus' is not a positive integer"
[ -z "$only" ] || [[ $only =~ ^[0-9,-]+$ ]] || die "--only: '$only' is not a list of task ids (3 or 1,5 or 2-4)"
command -v sbatch >/dev/null || die "sbatch not found: is this a Slurm login node?"

# Jobs may start in another directory of a shared file system: pass absolute paths.
ckv=${ckv:-$(command -v ckv || true)}
[ -n "$ckv" ] || die "no ckv executable: put it on PATH, set \$CKV or give --ckv"
[ -x "$ckv" ] || die "--ckv: '$ckv' is not executable"
ckv=$(cd "$(dirname "$ckv")" && pwd)/$(basename "$ckv")
mkdir -p "$out_dir/logs"
out_dir=$(cd "$out_dir" && pwd)
merged=${merged:-$out_dir/merged.h5}
case $merged in /*) ;; *) merged=$PWD/$merged ;; esac

array=${only:-0-$((n - 1))}
sub=$1
array_id=$(sbatch --parsable --array="$array" --cpus-per-task="$cpus" --job-name="ckv-$sub" \
  --output="$out_dir/logs/%x_%A_%a.out" "${sbatch_extra[@]}" \
  "$here/ckv-array.sbatch" "$ckv" "$n" "$out_dir" "$@")
array_id=${array_id%%;*}   # --parsable prints "id[;cluster]"
echo "array_job=$array_id"
if [ $merge = 1 ]; then
  # --kill-on-invalid-dep: a failed task cancels the merge instead of leaving it pending.
  merge_id=$(sbatch --parsable --dependency="afterok:$array_id" --kill-on-invalid-dep=yes \
    --job-name=ckv-merge --output="$out_dir/logs/%x_%j.out" "${sbatch_extra[@]}" \
    "$here/ckv-merge.sbatch" "$ckv" "$n" "$out_dir" "$merged")
  merge_id=${merge_id%%;*}
  echo "merge_job=$merge_id"
fi
echo "submit.sh: shards in $out_dir, merged output $merged (squeue -u \$USER to follow)" >&2
