#!/usr/bin/env bash
# Create .venv with ella and the locked versions of everything it runs, tests and documents
# with (constraints.txt): the same environment on every machine, whatever was released today.
#
# torch: kept if the venv already has one; otherwise ELLA_TORCH_SPEC if set, the locked
# version from PyPI on a machine with an NVIDIA GPU, and its CPU build elsewhere (a local
# wheel, else the PyTorch CPU index), never a CUDA build.
# The rest: constraints.txt installed with --no-deps. The lock is the whole environment, so
# pip resolves nothing: laplace-torch, curvlinops and backpack declare torchvision but never
# import it, and the lock leaves it out.
#
# ELLA_UNLOCKED=1 installs the newest releases within pyproject.toml's ranges instead
# (tools/lock.sh uses it to move the lock).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ELLA_VENV:-.venv}
python=${PYTHON:-python3}
unlocked=${ELLA_UNLOCKED:-0}
stamp="$venv/.ella-setup"
want=$( (cat pyproject.toml tools/setup_env.sh constraints.txt; echo "unlocked=$unlocked") \
  | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/ella" ]; then
  exit 0
fi
# the lock must be one name==version per line (comments and blank lines aside) before
# anything is installed: a cut, edited or garbled line is named with its number
bad=$(LC_ALL=C grep -a -n -v -E \
  '^(#.*|[[:space:]]*|[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9]([A-Za-z0-9.+!_-]*[A-Za-z0-9])?)$' \
  constraints.txt | head -n 1 | cut -c1-80 | LC_ALL=C tr -c '[:print:]\n' '?' || true)
if [ -n "$bad" ]; then
  echo "[setup] constraints.txt line ${bad%%:*} is not name==version: '${bad#*:}'; restore the" \
    "lock (git checkout constraints.txt) or move it with tools/lock.sh" >&2
  exit 1
fi
# ...and whole: its pins are the ones its trailer counts and checksums (tools/lock.sh
# writes it), so a lock cut after a line that still looks whole, emptied or edited by hand
# is refused too; ELLA_UNLOCKED=1 (tools/lock.sh) installs none of its pins
if [ "$unlocked" != 1 ]; then
  "$python" tools/check_lock.py constraints.txt || exit 1
fi
rm -f "$stamp"  # written again only after a whole install
echo "[setup] creating $venv (takes a minute or two the first time)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
py="$venv/bin/python"
pip=("$py" -m pip install --quiet --disable-pip-version-check)
# pip warns about every missing folder of a local index it is configured with: not ours to fix
quiet_pip() { "${pip[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

torch_version=$(sed -n 's/^torch==//p' constraints.txt)
if ! "$py" -c "import torch" 2>/dev/null; then
  if [ -n "${ELLA_TORCH_SPEC:-}" ]; then
    quiet_pip "$ELLA_TORCH_SPEC"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    quiet_pip "torch==$torch_version"
  else
    # "+cpu" matches only a CPU build: a local wheel (pip's find-links) if there is one,
    # else the PyTorch CPU index; never PyPI's CUDA build.
    quiet_pip "torch==$torch_version+cpu" 2>/dev/null \
      || quiet_pip --retries 1 --timeout 30 "torch==$torch_version" \
        --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
      || { echo "[setup] could not find a CPU build of torch; set ELLA_TORCH_SPEC" >&2; exit 1; }
  fi
fi

if [ "$unlocked" = 1 ]; then
  # pyproject's ranges: the packages that declare torchvision without --no-deps, their own
  # requirements (less torch and torchvision) read from their metadata, then the rest.
  mapfile -t reqs < <("$py" - <<'PY'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
for r in [*project["dependencies"], *extras["dev"], *extras["docs"], *extras["ray"]]:
    print(r)
PY
)
  nodeps=(); rest=()
  for r in "${reqs[@]}"; do
    case "$r" in
      torch|torch[\<\>=]*) ;;
      laplace-torch*|curvlinops-for-pytorch*|backpack-for-pytorch*) nodeps+=("$r") ;;
      *) rest+=("$r") ;;
    esac
  done
  quiet_pip --upgrade --no-deps "${nodeps[@]}"
  mapfile -t theirs < <("$py" - "${nodeps[@]}" <<'PY'
import importlib.metadata as md
import re
import sys
skip = {"torch", "torchvision"}
for spec in sys.argv[1:]:
    name = re.split(r"[<>=!~ \[;]", spec, maxsplit=1)[0]
    for r in md.requires(name) or []:
        if ";" in r or re.split(r"[<>=!~ \[(]", r, maxsplit=1)[0].lower() in skip:
            continue  # optional extras and torch's own packages
        print(r)
PY
)
  quiet_pip --upgrade "${theirs[@]}" "${rest[@]}"
else
  quiet_pip --no-deps -r <(grep -v -E '^(#|$|torch==)' constraints.txt) \
    || { echo "[setup] pip could not install the lock, constraints.txt (its message above;" \
           "/dev/fd's line numbers skip constraints.txt's comments and torch)" >&2; exit 1; }
fi
quiet_pip --no-deps -e .
"$py" - <<'PY'
import importlib.metadata as md
bad = [d.metadata["Name"] for d in md.distributions()
       if d.metadata["Name"].lower().startswith(("nvidia-", "torchvision"))]
import torch
if bad and not torch.cuda.is_available():
    raise SystemExit(f"[setup] CUDA packages were pulled on a CPU machine: {bad}")
print(f"[setup] torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
PY
echo "$want" > "$stamp"
