#!/usr/bin/env bash
# test_slurm_real.sh: tools/slurm/eval.sbatch under a real one-node Slurm (test_shard_cli.sh
# runs it through a stand-in sbatch). The test starts munged with a key it makes, and slurmctld
# + slurmd for this host on 127.0.0.1 (free ports, everything in a temporary directory, no
# cgroups, as the current user: root is not needed). The node declares 2 GPUs (generic
# resources on stand-in device files), so that the script's own --gpus-per-task=1 is what Slurm
# schedules. Then it submits the script as a user would, on the tiny fixture (CPU backend, 3
# short audio clips): a job array of 2 shards and the merge job, held (G4_SBATCH_OPTS=--hold)
# until the merge's afterok dependency on the whole array has been read, then released. Each
# job must complete, each array task must take its shard and its GPU from the variables Slurm
# set, the merge must start after the last shard ended, the shards must hold, per item, the
# unsharded run's tokens, and the merged scores must be the unsharded run's. Then 2 shards of a
# 1-item manifest: the empty shard succeeds, so the merge still runs. At the end (and on
# any exit: trap) it cancels what is queued, stops every daemon it started, and checks that no
# process it started is left. Without the Slurm or MUNGE binaries (Debian: slurmctld slurmd
# slurm-client munge) it skips (77) saying why; under CI=true (.ci/run, after
# tools/install_deps.sh) that is a failure. G4_SLURM_LOGS=1 prints the daemons' logs and the
# jobs' outputs even when every check passes.
set -u
: "${G4CU:?run through ctest}" "${G4_TINY_PKG:?run through ctest}" "${G4_FIXTURES:?run through ctest}"
: "${G4_SOURCE_DIR:?run through ctest}"
PATH=$PATH:/usr/sbin:/sbin # the daemons, for a user whose PATH lacks them
for b in munged munge slurmctld slurmd sbatch squeue scontrol sinfo; do
    command -v "$b" >/dev/null && continue
    if [ "${CI:-}" = true ]; then
        echo "test_slurm_real: FAIL: no $b (tools/install_deps.sh installs it; CI must run this)" >&2
        exit 1
    fi
    echo "test_slurm_real: skipped: no $b (Debian: apt-get install slurmctld slurmd slurm-client munge)"
    exit 77
done
source "$(dirname "${BASH_SOURCE[0]}")/cli_check.sh"
# Nothing of a Slurm or launcher around this run reaches the test's cluster or the jobs (they
# get this environment: eval.sbatch submits with --export=ALL).
for v in $(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|SQUEUE|SINFO|SCONTROL)_'); do unset "$v"; done
unset RANK WORLD_SIZE LOCAL_RANK CUDA_VISIBLE_DEVICES G4_SBATCH_OPTS
pids=() stragglers="" ctld_pid=""
# ours: the processes this test started that still run: $tmp is in their command line (the
# daemons) or their environment (slurmstepd and the jobs: SLURM_CONF). The pattern's last
# character in brackets keeps grep from matching its own command line; the subshell drops
# SLURM_CONF from the environment of grep, sed and sort.
ours() {
    (
        unset SLURM_CONF
        grep -lsa -- "${tmp%?}[${tmp: -1}]" /proc/[0-9]*/cmdline /proc/[0-9]*/environ |
            sed -E 's|/proc/([0-9]+)/.*|\1|' | sort -u | grep -vx "$$"
    )
}
# stop_all: the jobs still queued or running cancelled, then every daemon this test started
# (TERM, then KILL after 10 s); then whatever of ours is left (a job step retrying to report to
# the stopped daemons) is listed in $stragglers and killed.
stop_all() {
    local p k
    if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2>/dev/null && [ -n "$(squeue -h -o %A 2>/dev/null)" ]; then
        squeue -h -o %A | xargs -r scancel
        wait_for 15 no_jobs
    fi
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for ((k = 0; k < 100; k++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
        wait "$p" 2>/dev/null
    done
    pids=()
    stragglers=$(ours)
    if [ -n "$stragglers" ]; then
        echo "left running after the daemons stopped (killed now):"
        ps -o pid,ppid,stat,args -p "$(tr '\n' ',' <<<"$stragglers" | sed 's/,$//')"
        # shellcheck disable=SC2086 # a list of pids
        kill -KILL $stragglers 2>/dev/null
    fi
}
trap 'stop_all; rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM # (through the EXIT trap)
# show_logs: the daemons' logs and the jobs' outputs, for a failure
show_logs() {
    local f
    for f in "$tmp"/munged.log "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/work/*.log; do
        [ -f "$f" ] && { echo "--- $f (last 30 lines)"; tail -30 "$f"; }
    done
}
# bail: stop here after a failed step that the rest needs
bail() { show_logs; finish test_slurm_real; exit 1; }
# wait_for SECONDS CMD...: CMD succeeds within SECONDS (polled every 0.2 s)
wait_for() {
    local end=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -ge $end ] && return 1
        sleep 0.2
    done
}
no_jobs() { [ -z "$(squeue -h -o %A)" ]; }
# free_port: a TCP port below the ephemeral range that nothing listens on (/proc/net/tcp*)
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        grep -qi ":$(printf '%04X' "$p") " /proc/net/tcp /proc/net/tcp6 2>/dev/null || { echo "$p"; return; }
    done
}

# --- MUNGE: a key of our own, a socket in $tmp ------------------------------------------
mkdir -m 700 "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/work"
head -c 1024 /dev/urandom >"$tmp/munge/munge.key" && chmod 400 "$tmp/munge/munge.key"
sock="$tmp/munge/munge.socket"
# --force: munged refuses a socket directory that not everyone may enter; only this user (who
# runs the daemons and the jobs) needs to.
munged --foreground --force --socket="$sock" --key-file="$tmp/munge/munge.key" \
    --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/munged.seed" \
    --log-file="$tmp/munged.log" >>"$tmp/munged.log" 2>&1 &
pids+=($!)
munge_ok() { munge -n -S "$sock" | unmunge -S "$sock"; }
wait_for 10 munge_ok
check "munged: a credential made and decoded through its socket" $?
[ "$fail" -eq 0 ] || bail

# --- slurm.conf: this host, one node, its CPUs and memory as slurmd sees them --------------
node=$(slurmd -C | head -1) # NodeName=HOST CPUs=.. Boards=.. SocketsPerBoard=.. ... RealMemory=..
case "$node" in NodeName=?*" CPUs="*) ;; *)
    check "slurmd -C: expected 'NodeName=HOST CPUs=...', got '$node'" 1
    bail
    ;;
esac
host=${node%% *} && host=${host#NodeName=} # the name slurmd registers under
user=$(id -un)
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(free_port); done
export SLURM_CONF="$tmp/slurm.conf" # the daemons, sbatch, squeue, scontrol and the jobs
cat >"$SLURM_CONF" <<EOF
ClusterName=g4cutest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# a cancelled job (the test stopped early) is killed 2 s after its SIGTERM
KillWait=2
MailProg=/bin/true
# No cgroups (a container has no writable cgroup tree): processes tracked by their parent
# chain, tasks not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
# jobs start at the next 1 s pass after they became eligible (the default waits up to 3 s)
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 ${node#* } Gres=gpu:2 State=UNKNOWN
PartitionName=g4cu Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
# Slurm drops a GPU without a device file: /dev/null and /dev/zero stand in (nothing opens or
# fences them: no cgroups); the jobs' CUDA_VISIBLE_DEVICES is what Slurm gives them.
printf 'NodeName=%s Name=gpu File=%s\n' "$host" /dev/null "$host" /dev/zero >"$tmp/gres.conf"

slurmctld -D -i -f "$SLURM_CONF" >>"$tmp/slurmctld.out" 2>&1 &
ctld_pid=$!
pids+=($!)
slurmd -D -f "$SLURM_CONF" >>"$tmp/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { [ "$(sinfo -h -n "$host" -o %T)" = idle ]; }
wait_for 30 node_idle
check "slurmctld + slurmd: node $host idle" $?
[ "$fail" -eq 0 ] || bail

# --- the eval: unsharded, then through eval.sbatch ------------------------------------------
tok="$G4_FIXTURES/chat/chat_bpe.json"
# Short audio clips (librispeech): the tiny fixture's image tower costs ~20 s of CPU per item
# under AddressSanitizer, these clips 0.5-1.5 s.
media="$G4_FIXTURES/frontends/media"
k=0
for clip in short_200.wav tone_1s_f32.wav silence_1s.wav; do
    k=$((k + 1))
    echo "{\"id\": \"a$k\", \"audio\": \"$media/$clip\", \"transcript\": \"clip number $k\", \"category\": \"c$k\"}"
done >"$tmp/m.jsonl"
run_opts=("$tmp/m.jsonl" --task librispeech "$G4_TINY_PKG" --tokenizer "$tok" --max-new 2 --backend cpu)
per_item() { # DIR: "id tokens" lines of every predictions file, sorted
    cat "$1"/predictions*.jsonl | sed -E 's/.*"id":"([^"]*)".*"tokens":\[([^]]*)\].*/\1 \2/' | sort
}
"$G4CU" eval "${run_opts[@]}" --out "$tmp/one" >"$tmp/one.out" 2>&1
check "unsharded run" $?
per_item "$tmp/one" >"$tmp/one.items"
[ "$(wc -l <"$tmp/one.items")" -eq 3 ]
check "unsharded run: 3 items" $?

# Submitted from $tmp/work (the jobs' logs, --output=g4cu-eval-%A_%a.log, land there) and held
# (--hold through G4_SBATCH_OPTS), so that the merge's dependency is read before anything ran.
(cd "$tmp/work" && G4CU="$G4CU" G4_SBATCH_OPTS=--hold \
    bash "$G4_SOURCE_DIR/tools/slurm/eval.sbatch" submit 2 "${run_opts[@]}" --out "$tmp/slurm") \
    >"$tmp/submit.out" 2>&1
check "eval.sbatch submit 2: exit 0" $?
read -r array_job merge_job < <(sed -nE 's/^submitted: array job ([0-9]+) \(2 shards\), merge job ([0-9]+) -> .*/\1 \2/p' "$tmp/submit.out")
[ -n "${merge_job:-}" ]
check "eval.sbatch: an array job and a merge job submitted" $?
array_job=${array_job:-none} merge_job=${merge_job:-none}
scontrol show job -o "$merge_job" 2>&1 | grep -q " Dependency=afterok:${array_job}_\*"
check "the merge job waits on afterok of the whole array" $?
scontrol release "$array_job" "$merge_job"
check "the jobs released" $?
# done: the queue is empty, or the merge can never start (a shard failed: fail now, not later)
jobs_done() {
    no_jobs || squeue -h -j "$merge_job" -o %r | grep -q DependencyNeverSatisfied
}
wait_jobs() { # NAME
    if ! wait_for 60 jobs_done || ! no_jobs; then
        check "$1: the jobs ran to the end within 60 s (the queue empty)" 1
        squeue
        scontrol show job "$merge_job"
    fi
}
wait_jobs "2 shards of 3 items"
scontrol show job -o >"$tmp/jobs"
# field JOB_LINE NAME: the value of NAME= in one `scontrol show job -o` line
field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
shard_end=""
for t in 0 1; do
    line=$(grep " ArrayJobId=$array_job ArrayTaskId=$t " "$tmp/jobs")
    [ "$(field "$line" JobState)" = COMPLETED ] && [ "$(field "$line" ExitCode)" = 0:0 ] &&
        [ "$(field "$line" TresPerTask)" = gres:gpu:1 ]
    check "array task $t: COMPLETED, exit 0, one GPU (the script's --gpus-per-task=1)" $?
    end=$(field "$line" EndTime)
    [[ "$end" > "$shard_end" ]] && shard_end=$end
    grep -q "shard $t of 2 from SLURM_ARRAY_TASK_ID=$t, SLURM_ARRAY_TASK_COUNT=2; GPU: CUDA_VISIBLE_DEVICES=[0-9] (one device, as the scheduler bound it)$" \
        "$tmp/work/g4cu-eval-${array_job}_$t.log" 2>/dev/null
    check "array task $t: took shard $t of 2 and the one GPU Slurm bound" $?
done
line=$(grep "^JobId=$merge_job " "$tmp/jobs")
[ "$(field "$line" JobState)" = COMPLETED ] && [ "$(field "$line" ExitCode)" = 0:0 ]
check "merge job: COMPLETED, exit 0" $?
# (ISO times to the second compare as strings)
start=$(field "$line" StartTime)
[ -n "$shard_end" ] && [ -n "$start" ] && ! [[ "$start" < "$shard_end" ]]
check "merge job: started ($start) after the last shard ended ($shard_end)" $?
[ "$(wc -l <"$tmp/jobs")" -eq 3 ]
check "3 job records (2 array tasks and the merge)" $?
per_item "$tmp/slurm" | cmp -s - "$tmp/one.items"
check "the shards: per item, the unsharded run's tokens" $?
grep -q "librispeech wer = .* over 3 items" "$tmp/work/g4cu-eval-${merge_job}_"*.log 2>/dev/null
check "merge job: eval-merge scored the 3 items" $?
# The merged scores are the unsharded run's: the WER and, per category and item, the edits and
# reference words (items by id).
python3 - "$tmp/one/scores.json" "$tmp/slurm/scores.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for s in (a, b):
    s["items"] = sorted(s.get("items", []), key=lambda i: i["id"])
keys = ("task", "metric", "value", "count", "failed", "scores", "categories", "items")
bad = [k for k in keys if a.get(k) != b.get(k)]
if bad or b.get("count") != 3:
    sys.exit(f"merged scores differ from the unsharded run's in {bad} (count {b.get('count')})")
PY
check "the merged scores equal the unsharded run's" $?

# More shards than items: the empty shard is a success with 0 items, so the merge (afterok)
# still runs and scores the one item.
head -1 "$tmp/m.jsonl" >"$tmp/m1.jsonl"
(cd "$tmp/work" && G4CU="$G4CU" bash "$G4_SOURCE_DIR/tools/slurm/eval.sbatch" submit 2 \
    "$tmp/m1.jsonl" "${run_opts[@]:1}" --out "$tmp/slurm1") >"$tmp/submit1.out" 2>&1
check "eval.sbatch submit 2 on 1 item: exit 0" $?
read -r array_job merge_job < <(sed -nE 's/^submitted: array job ([0-9]+) \(2 shards\), merge job ([0-9]+) -> .*/\1 \2/p' "$tmp/submit1.out")
merge_job=${merge_job:-none}
wait_jobs "2 shards of 1 item"
line=$(scontrol show job -o "$merge_job" 2>&1)
[ "$(field "$line" JobState)" = COMPLETED ] && [ "$(field "$line" ExitCode)" = 0:0 ] &&
    grep -q "librispeech wer = .* over 1 items" "$tmp/work/g4cu-eval-${merge_job}_"*.log 2>/dev/null
check "2 shards of 1 item: the empty shard succeeded, the merge ran and scored the item" $?
if [ "$fail" -ne 0 ] || [ -n "${G4_SLURM_LOGS:-}" ]; then cat "$SLURM_CONF" "$tmp/jobs"; show_logs; fi

# --- stopped: nothing this test started still runs ----------------------------------------
stop_all
[ -z "$stragglers" ]
check "after the stop, no process of this test runs" $?
finish test_slurm_real
