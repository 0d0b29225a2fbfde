#!/usr/bin/env bash
# The checks to run once on a machine with a CUDA GPU, in one call, within SECONDS in all:
#   1. the CUDA tests (augmentation on the device against the CPU, an epoch's synchronisations
#      counted by torch's sync debug mode, a CUDA run resumed on the CPU);
#   2. python -m benchmarks.speed --profile gpu (epoch time per --precision and --compile,
#      throughput against the card's peaks, evidence fit / epoch, ELLA / MAP, peak memory, a
#      profile of ten steps), writing benchmarks/results/speed_gpu.{json,md};
#   3. the learned and the MAP run of Table 3's rotated-MNIST row at the paper profile, side by
#      side on the GPU, each writing its metrics.jsonl as it goes, until the time is up.
# Each step has its own time limit (about 15%, 55% and the rest), so a slow step cannot take
# the others' time.
#
# Needs a python with a CUDA build of torch and ella's dependencies importable (on a machine
# without internet, install their wheels with `pip install --no-index --target DIR` and put DIR
# on PYTHONPATH), and MNIST/raw under DATA (default: ../shared/data beside this checkout).
#
#   tools/gpu_check.sh OUT_DIR [SECONDS [PRECISION]]   # defaults: 600 s, the rows in bf16
#   ELLA_CHECK_DATA=DATA tools/gpu_check.sh ...        # MNIST elsewhere
#
# OUT_DIR gets six files (a device tool may return no more than eight): check.log (the card,
# each step's summary and log), cuda_tests.log, speed_gpu.json and .md, and the rows'
# learned_metrics.jsonl and map_metrics.jsonl.
set -u
out=${1:?usage: tools/gpu_check.sh OUT_DIR [SECONDS [PRECISION]]}
seconds=${2:-600}
precision=${3:-bf16}
py=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
data=${ELLA_CHECK_DATA:-$root/../shared/data}
device=${ELLA_CHECK_DEVICE:-cuda}  # cpu: try this script on a machine without a GPU
mkdir -p "$out"
cd "$root" || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
[ -d "$data/MNIST" ] || { echo "no MNIST at $data: set ELLA_CHECK_DATA" >&2; exit 2; }
tests_s=$((seconds * 15 / 100))
speed_s=$((seconds * 55 / 100))
start=$(date +%s)

{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"
  echo "cpus $(nproc)"; } 2>&1 | tee "$out/check.log"
log() { tee -a "$out/check.log"; }

timeout "$tests_s" "$py" -m pytest -q -p no:cacheprovider -m "slow or not slow" -k cuda \
    tests/data/test_variants.py tests/engine/test_host_reads.py tests/train/test_loop.py \
    >"$out/cuda_tests.log" 2>&1
echo "cuda tests: $(tail -1 "$out/cuda_tests.log")" | log

# the variants' budget leaves the matmul peaks and the profile a sixth of the step's time
timeout "$speed_s" "$py" -m benchmarks.speed --profile gpu --device "$device" --data-dir "$data" \
    --seconds $((speed_s * 5 / 6)) --epochs-timed 1 2>&1 | log
echo "speed: exit status ${PIPESTATUS[0]}" | log
cp benchmarks/results/speed_gpu.json benchmarks/results/speed_gpu.md "$out/" 2>/dev/null

left=$((seconds - ($(date +%s) - start) - 10))
if [ "$left" -gt 30 ]; then
  logs=()
  for model in learned map; do
    run="$(mktemp -d)/$model"
    ( timeout "$left" "$py" - "$model" "$run" "$data" "$device" "$precision" \
        >"$run.log" 2>&1 <<'EOF'
import argparse, dataclasses, sys
from benchmarks.table3 import PROFILES, row_config
from ella.train import train
model, run, data, device, precision = sys.argv[1:]
args = argparse.Namespace(data_dir=data, seed=0, device=device)
cfg = row_config("rotated_mnist", model == "learned", PROFILES["paper"], "full", args)
train(dataclasses.replace(cfg, precision=precision), run)
EOF
      echo "exit status $? (124: stopped at ${left} s)" >>"$run.log"
      cp "$run/metrics.jsonl" "$out/${model}_metrics.jsonl" 2>/dev/null ) &
    logs+=("$run.log")
  done
  wait
  for model in learned map; do
    epochs=0
    [ -f "$out/${model}_metrics.jsonl" ] && epochs=$(wc -l <"$out/${model}_metrics.jsonl")
    echo "$model row: epochs finished: $epochs" | log
  done
  cat "${logs[@]}" | log
fi
