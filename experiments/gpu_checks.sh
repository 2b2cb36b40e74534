#!/usr/bin/env bash
# Every check that needs a GPU, in one bounded command, its results in a fresh folder:
#
#   bash experiments/gpu_checks.sh [--steps LIST] OUT [ONLINE_MODEL.zip]
#
# Each run writes OUT/run-<UTC time>/ (OUT and the model are taken relative to where you call it
# from; a second run beside the first gets a folder of its own) and, at the end, the same folder
# packed as OUT/run-<UTC time>.tar.gz (one file to carry off a machine that returns few). In it:
# gpu_checks.log (everything printed), goals.txt (the table of GPU goals) and what each step wrote.
# Steps, in this order (the most telling first, should the budget run out), on the GPUs of this
# machine (one is enough: the multi-rank checks run on emulated hosts):
#   install        the wheels in .whl/ (if there), then `pip install --no-build-isolation --no-deps -e .`
#   mps            the CUDA MPS daemon, started when none answers (ranks sharing a GPU need it):
#                  its pipe in CUDA_MPS_PIPE_DIRECTORY if set (a folder of yours), else in a private
#                  folder made for the run (mktemp -d, 0700), where the daemon started is stopped
#                  and the folder removed at the end; its log in CUDA_MPS_LOG_DIRECTORY, else
#                  OUT/run-.../mps_log
#   bench_real     the whole user path: sweep, tune, deploy, A/B, DDP, the self-tuning job (with
#                  ONLINE_MODEL.zip when given, from `experiments/bench_online.py --model
#                  ONLINE_MODEL.zip` on any CPU) -> bench_real/
#   pytest         `pytest -m gpu`, every GPU test, in one process -> pytest_gpu.xml
#   bench_runtime  the runtime's StragglAR on NCCL and its cost (delays 0 and 20 ms)
#                  -> bench_runtime_nccl.json
#   profiler       the profiler plugin's cost: per event pair (its C harness) and in a DDP step
#                  (interleaved launches with and without it) -> profiler.json, profiler_ddp.json
#   profiled       the self-tuning job and StragglAR with the profiler loaded, timing by GPU time
#                  -> profiled/, bench_runtime_profiled.json
#   chunk          two chunk sizes pinned through the plugin's getChunkSize, NCCL's INFO log
#                  showing it asked for them, timed interleaved -> chunk/chunk_nccl.json
#   goals          one table of the GPU goals (issues 28, 30, 31, 38): met, not met or not run
# --steps LIST runs only the named steps of bench_real, pytest, bench_runtime, profiler, profiled,
# chunk (comma-separated; install, mps and goals always run): a second call for what the first one's
# budget did not reach. Every step runs under `timeout`, all within GPU_CHECKS_BUDGET_S seconds
# (default 470: the whole run fits 8 minutes); a step the budget cannot reach is "not run". A
# failing step does not stop the next; the exit status is the number of steps that failed.
#
# On a lent GPU machine whose results come back from one folder, $OUT:
#   bash experiments/gpu_checks.sh /tmp/gc; cp /tmp/gc/*.tar.gz "$OUT"/
#
# The GPU machines have PyTorch with its NCCL, CMake and gcc but no internet. Carry these wheels in
# .whl/ (a git-ignored folder at the repository root), made on any machine with internet by:
#   pip download --no-deps -d .whl gymnasium stable-baselines3 sb3-contrib hydra-core \
#     omegaconf==2.3.0 cloudpickle farama-notifications scikit-build-core pathspec \
#     && pip wheel --no-deps -w .whl antlr4-python3-runtime==4.9.3
# PIP (default `python -m pip`) is the pip that installs them.
set -uo pipefail

usage="usage: bash experiments/gpu_checks.sh [--steps LIST] OUT [ONLINE_MODEL.zip] (--help says more)"
all_steps=bench_real,pytest,bench_runtime,profiler,profiled,chunk
if [[ $# -ge 1 && ( $1 == -h || $1 == --help ) ]]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
chosen=$all_steps
positional=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) chosen=${2-}; shift $(( $# > 1 ? 2 : 1 ));;
    --steps=*) chosen=${1#--steps=}; shift;;
    -*) echo "gpu_checks: unknown option $1; $usage" >&2; exit 2;;
    *) positional+=("$1"); shift;;
  esac
done
IFS=, read -r -a wanted <<<"$chosen"
if [[ ${#wanted[@]} -eq 0 ]]; then
  echo "gpu_checks: --steps needs a comma-separated list of $all_steps" >&2
  exit 2
fi
for name in "${wanted[@]}"; do
  if [[ ,$all_steps, != *,$name,* ]]; then
    echo "gpu_checks: --steps: no step '$name'; choose from $all_steps" >&2
    exit 2
  fi
done
set -- "${positional[@]}"
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "gpu_checks: $usage" >&2
  exit 2
fi
if [[ -z $1 ]]; then
  echo "gpu_checks: OUT is empty (an unset variable?); name the folder for the results" >&2
  exit 2
fi
absolute() { [[ $1 == /* ]] && printf '%s' "$1" || printf '%s/%s' "$PWD" "$1"; }
out=$(absolute "$1")
model=${2:+$(absolute "$2")}
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_checks: no NVIDIA driver here (nvidia-smi not found); run it on a machine with a GPU" >&2
  exit 2
fi
if [[ -n "$model" && ! -f "$model" ]]; then
  echo "gpu_checks: $2: no such file; train it first: python experiments/bench_online.py --model $2" >&2
  exit 2
fi
if [[ -e "$out" && ! -d "$out" ]]; then
  echo "gpu_checks: $1 is a file; name a folder for the results" >&2
  exit 2
fi
if [[ -n ${CUDA_MPS_PIPE_DIRECTORY-} && -e $CUDA_MPS_PIPE_DIRECTORY && ! -O $CUDA_MPS_PIPE_DIRECTORY ]]; then
  echo "gpu_checks: CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY belongs to another user, who" \
    "would hold the MPS daemon's pipe; unset it (a private folder is made) or name a folder of yours" >&2
  exit 2
fi
run="$out/run-$(date -u +%Y%m%dT%H%M%SZ)"
suffix=1
while [[ -e "$run" ]]; do run="$out/run-$(date -u +%Y%m%dT%H%M%SZ)-$((suffix++))"; done
if ! mkdir -p "$run"; then
  echo "gpu_checks: cannot create $run; name a folder you can write" >&2
  exit 2
fi
log="$run/gpu_checks.log"
export PYTHONUNBUFFERED=1
mps_private=  # the daemon's pipe folder made here (never a fixed shared path another user can make first)
mps_started=
if [[ -z ${CUDA_MPS_PIPE_DIRECTORY-} ]]; then
  if ! mps_private=$(mktemp -d "${TMPDIR:-/tmp}/dynamiccl-mps.XXXXXX"); then
    echo "gpu_checks: cannot create a private folder for the MPS daemon's pipe in ${TMPDIR:-/tmp}" >&2
    exit 2
  fi
  export CUDA_MPS_PIPE_DIRECTORY=$mps_private
fi
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-$run/mps_log}
running=  # the step now running: its timeout's pid
end_run() {  # a step still running is stopped (timeout passes SIGTERM on, SIGKILL 10 s later); the
  # daemon started in the private folder is this run's: stopped, its folder removed
  if [[ -n $running ]]; then
    kill -TERM "$running" 2>/dev/null
    wait
  fi
  [[ -z $mps_private ]] && return
  [[ -n $mps_started ]] && echo quit | timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1
  rm -rf "$mps_private"
}
trap end_run EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
deadline=$((SECONDS + ${GPU_CHECKS_BUDGET_S:-470}))
failed=0

step() {  # step TITLE CAP_S COMMAND...: runs within min(CAP_S, the time left), logs, counts a failure
  local title=$1 cap=$2; shift 2
  local left=$((deadline - SECONDS))
  (( left < cap )) && cap=$left
  if (( cap < 10 )); then
    echo "=== $title: not run (the time budget is spent)" | tee -a "$log"
    failed=$((failed + 1))
    return
  fi
  echo "=== $title: $* (at most ${cap} s, $(date -u +%H:%M:%S))" | tee -a "$log"
  # in the background, waited for: Ctrl-C or a kill stops the script at once, and it stops the step
  timeout --kill-after=10 "$cap" "$@" > >(tee -a "$log") 2>&1 &
  running=$!
  wait "$running"
  local rc=$?
  running=
  wait  # the log's tee, so the lines below come after the step's
  (( rc == 124 || rc == 137 )) && echo "=== $title: stopped after ${cap} s" | tee -a "$log"
  echo "=== $title: exit $rc" | tee -a "$log"
  (( rc == 0 )) || failed=$((failed + 1))
}

install_step() {  # the carried wheels, then this tree (its plugin built by CMake)
  local pip
  read -r -a pip <<<"${PIP:-python -m pip}"
  if compgen -G ".whl/*.whl" >/dev/null; then
    "${pip[@]}" install --no-index --no-deps --find-links .whl .whl/*.whl || return
  fi
  "${pip[@]}" install --no-build-isolation --no-deps -e .
}

json_step() {  # json_step FILE COMMAND...: the JSON the command prints, only once complete
  local file=$1; shift
  "$@" > "$file.tmp" && mv "$file.tmp" "$file" && cat "$file" || { local rc=$?; rm -f "$file.tmp"; return $rc; }
}
export -f install_step json_step

selected() { [[ ,$chosen, == *,$1,* ]]; }

echo "gpu_checks: results in $run (steps: $chosen)" | tee -a "$log"
step gpu 30 nvidia-smi
step install 150 bash -c install_step
mkdir -p -m 700 "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if ! echo get_server_list | timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1; then
  # not through step's pipe: the daemon could keep it open, and tee would wait for ever
  echo "=== mps: starting nvidia-cuda-mps-control -d (pipe in $CUDA_MPS_PIPE_DIRECTORY)" | tee -a "$log"
  if timeout 30 nvidia-cuda-mps-control -d </dev/null >>"$log" 2>&1; then
    mps_started=1
  else
    failed=$((failed + 1))
  fi
  sleep 2
fi
if selected bench_real; then
  step bench_real 200 python experiments/bench_real.py --out "$run/bench_real" ${model:+--online-model "$model"}
fi
if selected pytest; then  # one process (-n 0): the GPU tests share the GPU and its MPS daemon
  step "pytest -m gpu" 180 python -m pytest -m gpu -n 0 -v -rs -p no:cacheprovider \
    --junitxml="$run/pytest_gpu.xml"
fi
if selected bench_runtime; then
  step "bench_runtime on NCCL" 90 bash -c 'json_step "$@"' _ "$run/bench_runtime_nccl.json" \
    python experiments/bench_runtime.py --json --backend nccl --emulate-hosts --delays 0,20
fi
if selected profiler; then
  step "profiler per event pair" 30 bash -c 'json_step "$@"' _ "$run/profiler.json" \
    python experiments/bench_profiler.py --json
  step "profiler in a DDP step" 90 bash -c 'json_step "$@"' _ "$run/profiler_ddp.json" \
    python experiments/bench_profiler.py --ddp --json --pairs 3 --steps 100
fi
if selected profiled; then
  step "profiled self-tuning job" 120 python experiments/bench_real.py --online-only --profiler \
    --out "$run/profiled" ${model:+--online-model "$model"}
  step "profiled bench_runtime" 90 bash -c 'json_step "$@"' _ "$run/bench_runtime_profiled.json" \
    python experiments/bench_runtime.py --json --backend nccl --emulate-hosts --delays 0,20 --profiler
fi
if selected chunk; then
  step "chunk size on NCCL" 90 python experiments/chunk_nccl.py --out "$run/chunk"
fi
python experiments/gpu_goals.py "$run" > "$run/goals.txt" 2>&1 || failed=$((failed + 1))
tee -a "$log" < "$run/goals.txt"
echo "gpu_checks: $failed step(s) failed; everything is in $run and $run.tar.gz" | tee -a "$log"
tar -czf "$run.tar.gz.tmp" -C "$out" "$(basename "$run")" && mv "$run.tar.gz.tmp" "$run.tar.gz"
exit "$failed"
