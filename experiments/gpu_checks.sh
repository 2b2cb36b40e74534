#!/usr/bin/env bash
# Every check that needs a GPU, in one command, its results in one folder:
#
#   bash experiments/gpu_checks.sh OUT [ONLINE_MODEL.zip]
#
# On the GPUs of this machine (one is enough: the multi-rank checks run on emulated hosts): the CUDA
# MPS daemon (started when none answers; the ranks sharing a GPU need it), `pytest -m gpu`, the whole
# user path (experiments/bench_real.py: sweep, tune, deploy, interleaved A/B launches, DDP with and
# without the policy, the self-tuning job with ONLINE_MODEL.zip when given, trained on any CPU by
# `experiments/bench_online.py --model ONLINE_MODEL.zip`), and the runtime on NCCL
# (experiments/bench_runtime.py --backend nccl --emulate-hosts). OUT gets gpu_checks.log (everything
# printed), bench_runtime_nccl.json and bench_real/ (its records, policy and bench_real.json, which
# `bench_real.py --analyse` re-prints anywhere). One failing step does not stop the next; the exit
# status is the number of steps that failed.
set -uo pipefail

if [[ $# -ge 1 && ( $1 == -h || $1 == --help ) ]]; then
  sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "gpu_checks: usage: bash experiments/gpu_checks.sh OUT [ONLINE_MODEL.zip] (--help says more)" >&2
  exit 2
fi
out=$1
model=${2:-}
cd "$(dirname "$0")/.."
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_checks: no NVIDIA driver here (nvidia-smi not found); run it on a machine with a GPU" >&2
  exit 2
fi
if [[ -n "$model" && ! -f "$model" ]]; then
  echo "gpu_checks: $model: no such file; train it first: python experiments/bench_online.py --model $model" >&2
  exit 2
fi
if [[ -e "$out/bench_real" ]]; then
  echo "gpu_checks: $out/bench_real exists; give an empty or new folder" >&2
  exit 2
fi
mkdir -p "$out"
log="$out/gpu_checks.log"
export PYTHONUNBUFFERED=1
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/mps}
export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/mpslog}
failed=0

step() {  # step TITLE COMMAND...: runs, logs, counts a failure
  local title=$1; shift
  echo "=== $title: $* ($(date -u +%H:%M:%S))" | tee -a "$log"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "=== $title: exit $rc" | tee -a "$log"
  (( rc == 0 )) || failed=$((failed + 1))
}

step gpu nvidia-smi
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
if ! echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
  # not through step's pipe: the daemon could keep it open, and tee would wait for ever
  echo "=== mps: starting nvidia-cuda-mps-control -d" | tee -a "$log"
  nvidia-cuda-mps-control -d </dev/null >>"$log" 2>&1 || failed=$((failed + 1))
  sleep 2
fi
step "pytest -m gpu" python -m pytest -m gpu -v -rs -p no:cacheprovider
step bench_real python experiments/bench_real.py --out "$out/bench_real" ${model:+--online-model "$model"}
step "bench_runtime on NCCL" bash -c 'python experiments/bench_runtime.py --json --backend nccl \
  --emulate-hosts > "$1.tmp" && mv "$1.tmp" "$1" && cat "$1" || { rc=$?; rm -f "$1.tmp"; exit $rc; }' \
  _ "$out/bench_runtime_nccl.json"
echo "gpu_checks: $failed step(s) failed; everything is in $out" | tee -a "$log"
exit "$failed"
