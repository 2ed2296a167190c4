#!/usr/bin/env bash
# Integration test of scripts/slurm/ on a real single-node Slurm cluster.
#
#   tests/slurm/run_slurm_test.sh BUILD_DIR      (BUILD_DIR/ckv; root, Debian 12, no systemd)
#
# Installs Debian's slurmctld, slurmd, slurm-client and munge when missing (a policy-rc.d
# that exits 101 keeps the package scripts from starting system daemons), starts munged,
# slurmctld and slurmd on 127.0.0.1 with every file in a temporary folder (SLURM_CONF points
# there), then:
#   1. makes a 4-record NIAH set (ckv niah) and dumps it in one process (the reference);
#   2. submits a 2-shard array of `ckv dump --input` with its merge job (scripts/slurm/submit.sh),
#      waits, and checks the merged file equals the reference (tests/slurm/compare_dumps.py);
#   3. submits again into a fresh folder where shard 1's output path is taken by a directory,
#      so task 1 fails for real; checks task 0 succeeded, task 1 failed and the merge job
#      never ran (cancelled); frees the path, reruns shard 1 alone (submit.sh --only 1),
#      checks shard 0 was not redone and the new merge equals the reference;
#   4. runs `ckv bound` over the same set in one process, submits a 2-shard array of
#      `ckv bound --input` with its merge job, and checks the merged PREFIX.h5/.csv/.json equal
#      the single-process ones (tests/slurm/compare_bounds.py: same records, kept entries
#      equal, metrics to float rounding) and the merge job printed the same Table 9 summary.
# Every daemon it started is stopped by PID on exit. Prints "SLURM TEST: PASS" or
# "SLURM TEST: FAIL (...)"; exit 0 on success, 77 when it cannot run here (skip).
# Environment: CKV_MODEL (default models/SmolLM2-135M-Instruct.Q4_1.gguf), CKV_SLURM_KEEP=1
# keeps the work folder.
set -euo pipefail
T0=${EPOCHREALTIME/./}
ts() { printf '[%7.1f s] %s\n' "$(( (${EPOCHREALTIME/./} - T0) / 100000 ))e-1" "$*"; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -eq 1 ] || { echo "usage: $0 BUILD_DIR" >&2; exit 2; }
ckv=$(cd "$1" && pwd)/ckv
model=${CKV_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
REPORTED=0
skip() { echo "SLURM TEST: SKIP ($*)"; REPORTED=1; exit 77; }
fail() { echo "SLURM TEST: FAIL ($*)"; REPORTED=1; exit 1; }
[ -x "$ckv" ] || fail "no ckv executable at $ckv"
top_help=$("$ckv" --help 2>&1 || true)
for sub in dump bound niah merge; do
  grep -qE "^ +$sub " <<<"$top_help" || fail "$ckv has no '$sub' subcommand"
done
[ -f "$model" ] || fail "no model at $model (scripts/fetch_model.sh, or set CKV_MODEL)"
# A test run inside a Slurm job must not talk to the outer cluster or inherit its array.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^SLURM_' || true)

W=$(mktemp -d -t ckv-slurm-test.XXXXXX)
PIDS=() RCD=/usr/sbin/policy-rc.d RCD_SAVED=''
restore_policy_rc_d() {
  [ -n "$RCD_SAVED" ] || return 0
  if [ "$RCD_SAVED" = none ]; then rm -f "$RCD"; else cp -p "$W/policy-rc.d.orig" "$RCD"; fi
  RCD_SAVED=''
}
stop_daemons() {
  local i p
  if [ ${#PIDS[@]} -ge 2 ] && command -v scancel >/dev/null &&
     kill -0 "${PIDS[1]}" 2>/dev/null; then
    scancel --quiet --user="$(id -un)" 2>/dev/null || true   # every job of this private cluster
    for _ in $(seq 100); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do   # reverse start order: slurmd, slurmctld, munged
    p=${PIDS[i]}
    kill -TERM "$p" 2>/dev/null || continue
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  PIDS=()
}
on_exit() {
  local rc=$?
  stop_daemons
  restore_policy_rc_d
  if [ $rc != 0 ] && [ $rc != 77 ]; then
    for f in "$W"/log/* "$W"/run*/logs/*; do [ -f "$f" ] && { echo "--- $f"; tail -n 15 "$f"; }; done
  fi
  if [ $rc != 0 ] && [ $REPORTED = 0 ]; then echo "SLURM TEST: FAIL (a command failed or was interrupted: exit $rc)"; fi
  if [ "${CKV_SLURM_KEEP:-0}" = 1 ]; then echo "work folder kept: $W"; else rm -rf "$W"; fi
  exit $rc
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# --- packages -----------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null ||
   ! command -v munged >/dev/null; then
  [ "$(id -u)" = 0 ] || skip "Slurm is not installed and installing it needs root"
  command -v apt-get >/dev/null || skip "Slurm is not installed and there is no apt-get"
  if [ -e "$RCD" ]; then cp -p "$RCD" "$W/policy-rc.d.orig"; RCD_SAVED=saved; else RCD_SAVED=none; fi
  printf '#!/bin/sh\nexit 101\n' >"$RCD"; chmod 755 "$RCD"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >"$W/apt.log" 2>&1 || { tail -n 20 "$W/apt.log"; fail "apt-get install"; }
  restore_policy_rc_d
fi
ts "slurm: $(dpkg-query -W -f='${Package}=${Version} ' slurmctld slurmd slurm-client munge 2>/dev/null)"
[ "$(id -u)" = 0 ] || skip "the single-node cluster runs its daemons as root"

# --- cluster ------------------------------------------------------------------------------
mkdir -p "$W"/{munge,run,log,state/ctld,state/d}
chmod 700 "$W/munge"
chmod 755 "$W" "$W/run"   # munged's socket folder must be o+x for clients
mungekey -c -k "$W/munge/munge.key"
munged -F -S "$W/run/munge.sock" --key-file="$W/munge/munge.key" --pid-file="$W/run/munged.pid" \
  --seed-file="$W/munge/seed" >"$W/log/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do [ -S "$W/run/munge.sock" ] && break; sleep 0.1; done
[ -S "$W/run/munge.sock" ] || fail "munged did not create its socket"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ctld_port='' d_port=''
for _ in $(seq 50); do   # two free adjacent ports away from a real cluster's 6817/6818
  p=$((20000 + RANDOM % 20000))
  if port_free "$p" && port_free $((p + 1)); then ctld_port=$p d_port=$((p + 1)); break; fi
done
[ -n "$ctld_port" ] || fail "no free TCP ports"
node=$(hostname -s)
hw=$(slurmd -C | head -n1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ RealMemory=[0-9]*//')
export SLURM_CONF=$W/slurm.conf
# One global setting per line: several on a line is a parse error that kills slurmctld.
printf '%s\n' ClusterName=ckvtest "SlurmctldHost=$node(127.0.0.1)" "SlurmctldPort=$ctld_port" \
  "SlurmdPort=$d_port" SlurmUser=root SlurmdUser=root AuthType=auth/munge CredType=cred/munge \
  "AuthInfo=socket=$W/run/munge.sock" "StateSaveLocation=$W/state/ctld" "SlurmdSpoolDir=$W/state/d" \
  "SlurmctldPidFile=$W/run/slurmctld.pid" "SlurmdPidFile=$W/run/slurmd.pid" \
  "SlurmctldLogFile=$W/log/slurmctld.log" "SlurmdLogFile=$W/log/slurmd.log" \
  ProctrackType=proctrack/linuxproc TaskPlugin=task/none JobAcctGatherType=jobacct_gather/none \
  AccountingStorageType=accounting_storage/none JobCompType=jobcomp/none SchedulerType=sched/backfill \
  SelectType=select/cons_tres SelectTypeParameters=CR_Core MpiDefault=none MailProg=/bin/true \
  ReturnToService=2 MinJobAge=600 \
  "NodeName=$node NodeAddr=127.0.0.1 $hw RealMemory=1024 State=UNKNOWN" \
  "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >"$SLURM_CONF"
slurmctld -D -i -f "$SLURM_CONF" >"$W/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" >"$W/log/slurmd.out" 2>&1 &
PIDS+=($!)
for i in $(seq 120); do
  [ "$(sinfo -h -n "$node" -o %t 2>/dev/null)" = idle ] && break
  for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || fail "daemon $p died"; done
  [ "$i" = 120 ] && fail "node $node not idle after 60 s"
  sleep 0.5
done
ts "cluster up: node $node idle, ports $ctld_port/$d_port, pids ${PIDS[*]}"

# --- helpers ------------------------------------------------------------------------------
# Wait until none of the given jobs is in the queue (timeout in seconds as $1).
wait_jobs() {
  local limit=$1 q
  shift
  for _ in $(seq $((limit * 5))); do
    q=$(squeue -h -o '%i %T %r' -j "$(IFS=,; echo "$*")" 2>/dev/null || true)
    [ -z "$q" ] && return 0
    sleep 0.2
  done
  fail "jobs still queued after $limit s: $(echo "$q" | tr '\n' ';')"
}
# "STATE EXIT" of a job, or of one task (job_state ID TASK).
job_state() {
  local line
  line=$(scontrol -o show job "$1" 2>/dev/null | grep -E "ArrayTaskId=${2:-[^ ]*}( |$)" | head -n1 || true)
  [ -n "${2:-}" ] || line=$(scontrol -o show job "$1" 2>/dev/null | head -n1)
  sed -E 's/.* JobState=([A-Z_]+) .* ExitCode=([0-9:]+).*/\1 \2/' <<<"$line"
}
submit() {   # submit.sh ARGS... -> sets array_job, merge_job
  local out
  out=$("$root/scripts/slurm/submit.sh" --ckv "$ckv" "$@") || fail "submit.sh $*"
  array_job=$(sed -n 's/^array_job=//p' <<<"$out")
  merge_job=$(sed -n 's/^merge_job=//p' <<<"$out")
  if [ -z "$array_job" ] || [ -z "$merge_job" ]; then fail "submit.sh printed no job ids: $out"; fi
}
expect_state() {   # WHAT ACTUAL EXPECTED-REGEX
  [[ $2 =~ ^$3$ ]] || fail "$1: state '$2', expected '$3'"
}

# --- 1. data and the single-process reference ---------------------------------------------
"$ckv" niah -m "$model" --count 4 --length 256 --seed 7 -o "$W/niah.jsonl"
args=(dump -m "$model" --input "$W/niah.jsonl" --layers "0,29")
"$ckv" -q "${args[@]}" -t 1 -o "$W/single.h5"
ts "reference: 4 NIAH records of 256 tokens dumped in one process"

# --- 2. array of 2 shards + merge ---------------------------------------------------------
submit -n 2 -d "$W/run1" -- "${args[@]}"
wait_jobs 180 "$array_job" "$merge_job"
for t in 0 1; do expect_state "run1 task $t" "$(job_state "$array_job" $t)" "COMPLETED 0:0"; done
expect_state "run1 merge" "$(job_state "$merge_job")" "COMPLETED 0:0"
/usr/bin/python3 "$root/tests/slurm/compare_dumps.py" "$W/single.h5" "$W/run1/merged.h5" ||
  fail "run1: merged file differs from the single-process run"
ts "run1: array $array_job (2 tasks) and merge $merge_job completed; merged == single-process"

# --- 3. a failing task, its rerun alone, merge again --------------------------------------
mkdir -p "$W/run2/shard-1.h5"   # shard 1's output path is a directory: ckv cannot write it
submit -n 2 -d "$W/run2" -- "${args[@]}"
wait_jobs 180 "$array_job" "$merge_job"
expect_state "run2 task 0" "$(job_state "$array_job" 0)" "COMPLETED 0:0"
expect_state "run2 task 1" "$(job_state "$array_job" 1)" "FAILED [1-9][0-9]*:0"
expect_state "run2 merge" "$(job_state "$merge_job")" "CANCELLED [0-9]+:[0-9]+"
[ ! -e "$W/run2/merged.h5" ] || fail "run2: a merged file exists although task 1 failed"
grep -q "is a directory" "$W"/run2/logs/ckv-dump_"${array_job}"_1.out || fail "run2: task 1 failed for another reason"
ts "run2: task 1 of $array_job failed, merge $merge_job cancelled, no merged file"
rmdir "$W/run2/shard-1.h5"
shard0_before=$(stat -c '%y %s' "$W/run2/shard-0.h5")
submit -n 2 -d "$W/run2" --only 1 -- "${args[@]}"
wait_jobs 180 "$array_job" "$merge_job"
expect_state "run2 rerun task 1" "$(job_state "$array_job" 1)" "COMPLETED 0:0"
[ -z "$(job_state "$array_job" 0)" ] || fail "run2 rerun: task 0 was submitted again"
expect_state "run2 rerun merge" "$(job_state "$merge_job")" "COMPLETED 0:0"
[ "$(stat -c '%y %s' "$W/run2/shard-0.h5")" = "$shard0_before" ] || fail "run2: shard 0 was rewritten"
/usr/bin/python3 "$root/tests/slurm/compare_dumps.py" "$W/single.h5" "$W/run2/merged.h5" ||
  fail "run2: merged file differs from the single-process run"
# The comparison must be able to fail: one shard is not the whole run.
if /usr/bin/python3 "$root/tests/slurm/compare_dumps.py" "$W/single.h5" "$W/run2/shard-0.h5" >/dev/null; then
  fail "compare_dumps.py found a single shard equal to the whole run"
fi
ts "run2: shard 1 rerun alone ($array_job), merge $merge_job completed; merged == single-process"

# --- 4. a 2-shard `ckv bound` array + merge == one `ckv bound` process --------------------
bargs=(bound -m "$model" --input "$W/niah.jsonl" --layers "0,29" --budgets 0.1,0.3)
# (no -q: `ckv -q bound` prints no summary, and the Table 9 console is compared below)
"$ckv" "${bargs[@]}" -t 1 -o "$W/single_bound" >"$W/single_bound.out" 2>&1 ||
  { tail -n 5 "$W/single_bound.out"; fail "single-process ckv bound"; }
ts "bound reference: 4 records in one process"
submit -n 2 -d "$W/run3" -- "${bargs[@]}"
wait_jobs 180 "$array_job" "$merge_job"
for t in 0 1; do expect_state "run3 task $t" "$(job_state "$array_job" $t)" "COMPLETED 0:0"; done
expect_state "run3 merge" "$(job_state "$merge_job")" "COMPLETED 0:0"
for f in merged.h5 merged.csv merged.json shard-0.csv shard-1.json; do
  [ -f "$W/run3/$f" ] || fail "run3: no $f"
done
/usr/bin/python3 "$root/tests/slurm/compare_bounds.py" "$W/single_bound" "$W/run3/merged" ||
  fail "run3: merged bound differs from the single-process run"
if /usr/bin/python3 "$root/tests/slurm/compare_bounds.py" "$W/single_bound" "$W/run3/shard-0" >/dev/null; then
  fail "compare_bounds.py found a single shard equal to the whole run"
fi
# The console summary (Table 9 layout, kept entries) of the merge is the single run's.
table() { awk '/^Table 9 layout/ {on = 1} / records from |^wrote / {on = 0} on && NF' "$1"; }
table "$W/single_bound.out" >"$W/single_table.txt"
table "$W/run3/logs/ckv-merge_${merge_job}.out" >"$W/merged_table.txt"
[ -s "$W/single_table.txt" ] || fail "run3: the single-process run printed no Table 9 summary"
diff "$W/single_table.txt" "$W/merged_table.txt" >&2 || fail "run3: the merge printed another summary"
ts "run3: bound array $array_job (2 tasks) and merge $merge_job completed; merged == single-process"

stop_daemons
ts "daemons stopped"
echo "SLURM TEST: PASS"
