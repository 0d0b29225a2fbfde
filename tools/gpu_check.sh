#!/usr/bin/env bash
# The checks to run once on a machine with a CUDA GPU, in one call (CUDA support and the paper-scale Table 3):
#   1. the CUDA tests (native KFAC on CUDA against the CPU and ASDL; a CUDA run resumed on the CPU);
#   2. the whole suite, in parallel where pytest-xdist is installed;
#   3. Table 3's learned rotated-MNIST row at the paper profile, stopped after PAPER_SECONDS
#      (a whole run takes about an hour on an H100: experiments/results/table3_paper_h100/).
# Each step has its own time limit, so a slow step cannot take the others' time.
#
# Needs a python with a CUDA build of torch and ella's dependencies importable (on a machine
# without internet, install their wheels with `pip install --no-index --target DIR` and put DIR
# on PYTHONPATH), and MNIST at ../shared/data beside this checkout (the tests read it there).
#
#   tools/gpu_check.sh OUT_DIR [PAPER_SECONDS [LR]]     # defaults: 420 s, lr 0.02
#
# OUT_DIR gets gpu.txt, cuda_tests.log, suite.log, paper.log and the row's metrics.jsonl.
set -u
out=${1:?usage: tools/gpu_check.sh OUT_DIR [PAPER_SECONDS [LR]]}
seconds=${2:-420}
lr=${3:-0.02}
py=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
data="$root/../shared/data"
device=${ELLA_CHECK_DEVICE:-cuda}  # cpu: try this script on a machine without a GPU
mkdir -p "$out"
cd "$root" || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
[ -d "$data/MNIST" ] || { echo "no MNIST at $data: put the data directory there" >&2; exit 2; }

{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
  echo "cpus $(nproc)"; } | tee "$out/gpu.txt"

# 3 runs in the background while 1 and 2 use the CPUs
run="$(mktemp -d)/paper_row"
( timeout "$seconds" "$py" -m ella train --dataset rotated_mnist --data-dir "$data" \
    --train-size 60000 --width 4 --epochs 200 --n-epochs-burnin 10 --marglik-frequency 5 \
    --optimizer sgd --lr "$lr" --prior-precision 1 --prior-update adam --prior-step 1 \
    --batch-size 500 --device "$device" --no-progress --out "$run" >"$out/paper.log" 2>&1
  echo "exit status $? (124: stopped at ${seconds} s)" >>"$out/paper.log" ) &

tests=(-p no:cacheprovider -m "slow or not slow")
timeout 300 "$py" -m pytest -q "${tests[@]}" tests/marglik/test_native.py tests/train/test_loop.py \
    -k cuda >"$out/cuda_tests.log" 2>&1
tail -1 "$out/cuda_tests.log"
parallel=()
"$py" -c "import xdist" 2>/dev/null && parallel=(-n 8)
"$py" -c "import nbformat" 2>/dev/null || parallel+=(--ignore=tests/notebooks)
OMP_NUM_THREADS=2 timeout 600 "$py" -m pytest -q "${tests[@]}" "${parallel[@]}" \
    >"$out/suite.log" 2>&1
tail -1 "$out/suite.log"
wait
cp "$run/metrics.jsonl" "$out/metrics.jsonl" 2>/dev/null
tail -1 "$out/paper.log"
epochs=0
[ -f "$out/metrics.jsonl" ] && epochs=$(wc -l <"$out/metrics.jsonl")
echo "epochs finished: $epochs"
