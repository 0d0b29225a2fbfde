#!/usr/bin/env bash
# Prepares, on a machine with internet, the ignored folders that a call of tools/gpu_check.sh
# on a bare GPU machine without internet carries beside the working tree:
#   .whl/       the wheels of ella's dependencies that such a machine's image lacks, at the
#               lock's versions (constraints.txt); pure Python, about 0.5 MB
#   .gpu_data/  MNIST's original files (about 12 MB), copied from DATA (default ../shared/data)
# and prints what a call would carry (a device tool's limit: 64 MiB with the working tree).
# .gpu_runs/ (the runs archive of the last call) is written by
# `python -m benchmarks.paper_gpu --collect OUT`.
#
#   tools/device_carry.sh [DATA]
#   ELLA_CARRY_PACKAGES="laplace-torch einconv" tools/device_carry.sh   # other packages
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-$root/../shared/data}
py=${PYTHON:-$root/.venv/bin/python}
[ -x "$py" ] || py=python3
packages=${ELLA_CARRY_PACKAGES:-laplace-torch asdfghjkl backpack-for-pytorch curvlinops-for-pytorch einconv unfoldNd}
cd "$root"

specs=()
for name in $packages; do
  pin=$(grep -i -E "^${name}==" constraints.txt | head -1 || true)
  [ -n "$pin" ] || { echo "$name is not in constraints.txt" >&2; exit 2; }
  specs+=("$pin")
done
mkdir -p .whl
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${specs[@]}"

[ -d "$data/MNIST/raw" ] || { echo "no MNIST/raw under $data" >&2; exit 2; }
mkdir -p .gpu_data/MNIST/raw
cp -u "$data"/MNIST/raw/*.gz .gpu_data/MNIST/raw/

for path in .whl .gpu_data .gpu_runs; do
  git check-ignore -q "$path/" || echo "warning: $path is not ignored by git" >&2
done
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1 || true)
carried=$(du -scb .whl .gpu_data .gpu_runs 2>/dev/null | tail -1 | cut -f1 || true)
echo "wheels: $(ls .whl | tr '\n' ' ')"
awk -v t="$tree" -v c="$carried" 'BEGIN {printf "working tree %.1f MiB + carried %.1f MiB = %.1f MiB (limit 64)\n",
    t / 2^20, c / 2^20, (t + c) / 2^20}'
