#!/usr/bin/env bash
# The checks to run on a machine with a CUDA GPU, in one call, within SECONDS in all:
#   1. tests: the CUDA tests (augmentation on the device against the CPU, an epoch's
#      synchronisations counted by torch's sync debug mode, a CUDA run resumed on the CPU, the
#      native evidence on the device, any tests/engine/test_graphs*.py);
#   2. speed: python -m benchmarks.speed --profile gpu (epoch time per --precision and
#      --compile, throughput against the card's peaks, evidence fit / epoch, ELLA / MAP, peak
#      memory, a profile of ten steps), writing benchmarks/results/speed_gpu.{json,md};
#   3. rows: Table 3's paper profile, rotated MNIST and MNIST, learned and MAP
#      (benchmarks/paper_gpu.py), side by side on the card, each training into its own run
#      directory for as long as the call allows. The first row starts alone for a while (the
#      solo phase) so that the card's share of one run and of four can be told apart. With
#      the runs archive of an earlier call (ELLA_CHECK_RUNS) each row resumes from its
#      checkpoint; at the end the four run directories go back as one archive in parts.
# Each step has its own time limit (tests 15%, speed 55%, the rows the rest, less
# ELLA_CHECK_PACK_S for the archive), so a slow step cannot take the others' time; a step
# left out of ELLA_CHECK_STEPS gives its time to the rows. `timeout` stops the rows: a
# checkpoint is written atomically after every epoch, so a stopped row loses at most the
# epoch in progress.
#
# Needs a python with a CUDA build of torch; ella's other dependencies importable, or their
# wheels in ELLA_CHECK_WHEELS (default .whl/, made by tools/device_carry.sh), which are then
# installed into a temporary folder on PYTHONPATH; MNIST/raw under DATA (ELLA_CHECK_DATA;
# default ../shared/data beside this checkout, else .gpu_data/, made by device_carry.sh).
#
#   tools/gpu_check.sh OUT_DIR [SECONDS [PRECISION]]   # defaults: 600 s, the rows in fp32
#   ELLA_CHECK_STEPS=rows tools/gpu_check.sh OUT 560   # a later call: the rows alone
#
# Environment (all optional):
#   ELLA_CHECK_DATA      MNIST's folder
#   ELLA_CHECK_STEPS     which steps, of "tests speed rows" (the default)
#   ELLA_CHECK_RUNS      the runs archive to resume: a folder with runs.tar.gz.NN parts, or
#                        one file (default .gpu_runs/, where `python -m benchmarks.paper_gpu
#                        --collect OUT` keeps it); absent or empty: the rows start afresh
#   ELLA_CHECK_ROWS      the rows (default: the four of benchmarks.paper_gpu.ROWS)
#   ELLA_CHECK_EPOCHS    a new row's epochs (default 1000, the paper's budget; a resumed row
#                        keeps its own configuration)
#   ELLA_CHECK_PROFILE   Table 3's profile of a new row (default paper; smoke for a dry run)
#   ELLA_CHECK_SOLO      seconds the first row trains alone (default: a quarter of the rows'
#                        time for new rows, 0 when resuming)
#   ELLA_CHECK_PACK      auto (default: the most exact form that fits), exact, bf16 or int8
#   ELLA_CHECK_PACK_S    seconds kept for packing at the end (default 45)
#   ELLA_CHECK_SPEED_S   seconds of the speed step (default 55% of SECONDS)
#   ELLA_CHECK_DEVICE    cpu: try this script on a machine without a GPU
#
# OUT_DIR gets at most eight files (what a device tool returns): check.log (the card, each
# step's summary, the rows' last lines, the GPU's samples' summary), cuda_tests.log,
# speed_gpu.json and .md, and runs.tar.gz.00 ... (at most four parts of 15 MiB: the run
# directories, their timings and packed checkpoints). `python -m benchmarks.paper_gpu
# --collect OUT_DIR` writes the rows' metrics and summary into benchmarks/results/ and keeps
# the archive in .gpu_runs/ for the next call.
set -u
out=${1:?usage: tools/gpu_check.sh OUT_DIR [SECONDS [PRECISION]]}
seconds=${2:-600}
precision=${3:-fp32}
py=${PYTHON:-python3}
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${ELLA_CHECK_DATA:-}" ]; then
  data=$ELLA_CHECK_DATA
elif [ -d "$root/../shared/data/MNIST" ]; then
  data=$root/../shared/data
else
  data=$root/.gpu_data
fi
device=${ELLA_CHECK_DEVICE:-cuda}
steps=" ${ELLA_CHECK_STEPS:-tests speed rows} "
rows=${ELLA_CHECK_ROWS:-rotated_mnist_learned rotated_mnist_map mnist_learned mnist_map}
epochs=${ELLA_CHECK_EPOCHS:-1000}
profile=${ELLA_CHECK_PROFILE:-paper}
pack=${ELLA_CHECK_PACK:-auto}
pack_s=${ELLA_CHECK_PACK_S:-45}
archive=${ELLA_CHECK_RUNS:-$root/.gpu_runs}
wheels=${ELLA_CHECK_WHEELS:-$root/.whl}
start=$(date +%s)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root" || exit 1
export PYTHONUNBUFFERED=1 PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
[ -d "$data/MNIST" ] || { echo "no MNIST at $data: set ELLA_CHECK_DATA" >&2; exit 2; }

{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  echo "cpus $(nproc); steps:$steps; $seconds s; data $data"; } 2>&1 | tee "$out/check.log"
log() { tee -a "$out/check.log"; }

# torch, the card, and ella's dependencies that the machine's image lacks, from the wheels
probe() {
  "$py" -c "import torch, laplace, curvlinops, backpack, asdl
print('card', torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu')
print('torch', torch.__version__, 'cuda', torch.version.cuda, '; laplace, curvlinops, backpack, asdl importable')" 2>&1
}
if ! found=$(probe) && ls "$wheels"/*.whl >/dev/null 2>&1; then
  site=$(mktemp -d)
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
      "$wheels"/*.whl 2>&1 | tail -n 3 | log
  export PYTHONPATH="$PYTHONPATH:$site"
  found=$(probe)
fi
echo "$found" | tail -n 1 | log
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$card" ] || card=$(echo "$found" | sed -n 's/^card //p')

if [[ $steps == *" tests "* ]]; then
  tests=(tests/data/test_variants.py tests/engine/test_host_reads.py tests/train/test_loop.py
         tests/marglik/test_native.py)
  for f in tests/engine/test_graphs*.py; do [ -f "$f" ] && tests+=("$f"); done
  timeout -k 10 $((seconds * 15 / 100)) "$py" -m pytest -q -p no:cacheprovider \
      -m "slow or not slow" -k cuda "${tests[@]}" >"$out/cuda_tests.log" 2>&1
  echo "cuda tests (exit status $?): $(tail -n 1 "$out/cuda_tests.log")" | log
fi

if [[ $steps == *" speed "* ]]; then
  # the variants' budget leaves the matmul peaks and the profile a sixth of the step's time
  speed_s=${ELLA_CHECK_SPEED_S:-$((seconds * 55 / 100))}
  timeout -k 10 "$speed_s" "$py" -m benchmarks.speed --profile gpu --device "$device" \
      --data-dir "$data" --seconds $((speed_s * 5 / 6)) --epochs-timed 1 2>&1 | log
  echo "speed: exit status ${PIPESTATUS[0]}" | log
  cp benchmarks/results/speed_gpu.json benchmarks/results/speed_gpu.md "$out/" 2>/dev/null
fi

[[ $steps == *" rows "* ]] || exit 0
runs=$(mktemp -d)/runs
mkdir -p "$runs"
resumed=0
if [ -e "$archive" ] && { [ -f "$archive" ] || ls "$archive"/runs.tar.gz.* >/dev/null 2>&1; }; then
  "$py" -m benchmarks.paper_gpu unpack "$archive" "$runs" 2>&1 | log
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then  # never start the rows afresh over an archive
    echo "rows: the runs archive $archive could not be unpacked; it goes back as it came" | log
    if [ -f "$archive" ]; then cp "$archive" "$out/runs.tar.gz.00"; else cp "$archive"/runs.tar.gz.* "$out/"; fi
    exit 1
  fi
  resumed=1
fi
call=$(date -u +%Y%m%dT%H%M%SZ)
rows_end=$((start + seconds - pack_s))
left=$((rows_end - $(date +%s)))
if [ "$left" -le 30 ]; then
  echo "rows: skipped, ${left} s left of the budget; the runs archive goes back as it came" | log
  if [ -f "$archive" ]; then cp "$archive" "$out/runs.tar.gz.00"
  elif [ "$resumed" -eq 1 ]; then cp "$archive"/runs.tar.gz.* "$out/"; fi
  exit 0
fi
solo=${ELLA_CHECK_SOLO:-$([ "$resumed" -eq 1 ] && echo 0 || echo $((left / 4)))}
[ "$solo" -le $((left / 2)) ] || solo=$((left / 2))  # the others get at least half
n=$(wc -w <<<"$rows")
threads=$(( $(nproc) / n )); [ "$threads" -ge 1 ] || threads=1
echo "rows ($call): $rows; $left s, the first alone for $solo s; resumed: $resumed" | log

sampler=
if command -v nvidia-smi >/dev/null && [ "$device" != cpu ]; then
  while :; do
    printf '%s,%s\n' "$(date +%s.%N)" "$(nvidia-smi --query-gpu=utilization.gpu,memory.used \
        --format=csv,noheader,nounits | head -1 | tr -d ' ')"
    sleep 2
  done >"$runs/gpu_$call.csv" 2>/dev/null &
  sampler=$!
fi
rows_start=$(date +%s.%N)
pids=()
i=0
for name in $rows; do
  if [ "$i" -eq 1 ] && [ "$solo" -gt 0 ]; then sleep "$solo"; fi
  i=$((i + 1))
  OMP_NUM_THREADS=$threads timeout -k 20 $((rows_end - $(date +%s))) "$py" -m benchmarks.paper_gpu \
      run "$name" "$runs" --data-dir "$data" --device "$device" --precision "$precision" \
      --epochs "$epochs" --profile "$profile" --call "$call" --launched "$(date +%s.%N)" \
      >"$runs/$name.log" 2>&1 &
  pids+=($!)
done
i=0
for name in $rows; do
  wait "${pids[$i]}"
  echo "$name: exit status $? (124: stopped at the time limit); $(tail -n 1 "$runs/$name.log")" | log
  i=$((i + 1))
done
rows_stop=$(date +%s.%N)
if [ -n "$sampler" ]; then
  kill "$sampler" 2>/dev/null
  awk -F, '$2 != "" {u += $2; n++; if ($3 > m) m = $3}
      END {if (n) printf "GPU during the rows: %d samples, mean utilisation %.0f%%, at most %d MiB\n",
      n, u / n, m}' "$runs/gpu_$call.csv" | log
fi
call_json=$(printf '{"call": "%s", "card": "%s", "device": "%s", "seconds": %s, "steps": "%s", "rows": "%s", "rows_start": %s, "rows_end": %s, "solo_s": %s, "resumed": %s, "precision": "%s", "profile": "%s", "epochs": %s}' \
    "$call" "$card" "$device" "$seconds" "$(echo "$steps" | xargs)" "$(echo "$rows" | xargs)" \
    "$rows_start" "$rows_stop" "$solo" "$resumed" "$precision" "$profile" "$epochs")
"$py" -m benchmarks.paper_gpu pack "$runs" "$out" --mode "$pack" --call-json "$call_json" 2>&1 | log
echo "pack: exit status ${PIPESTATUS[0]}; $(($(date +%s) - start)) s in all" | log
