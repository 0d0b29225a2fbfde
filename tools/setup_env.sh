#!/usr/bin/env bash
# Create .venv with ella and its dependencies (see background: dependency facts).
#
# torch: kept if the venv already has one; otherwise ELLA_TORCH_SPEC if set,
# the normal PyPI build on a machine with an NVIDIA GPU, and a CPU build
# (torch 2.13.0+cpu from local wheels, else the PyTorch CPU index) elsewhere.
# laplace-torch, curvlinops and backpack declare torchvision but never import
# it, so they are installed with --no-deps after their real dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${ELLA_VENV:-.venv}
python=${PYTHON:-python3}
stamp="$venv/.ella-setup"
want=$(cat pyproject.toml tools/setup_env.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/ella" ]; then
  exit 0
fi
echo "[setup] creating $venv (takes a minute or two the first time)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)

if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
  if [ -n "${ELLA_TORCH_SPEC:-}" ]; then
    "${pip[@]}" "$ELLA_TORCH_SPEC"
  elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" torch
  else
    # "+cpu" matches only a CPU build: a local wheel (pip's find-links) if there is one,
    # else the PyTorch CPU index; never PyPI's CUDA build.
    "${pip[@]}" "torch==2.13.0+cpu" 2>/dev/null \
      || "${pip[@]}" --retries 1 --timeout 30 torch \
        --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
      || { echo "[setup] could not find a CPU build of torch; set ELLA_TORCH_SPEC" >&2; exit 1; }
  fi
fi
"${pip[@]}" "asdfghjkl==0.1a4" numpy tqdm "scipy>=1.12" opt-einsum torchmetrics einops \
  einconv linear_operator unfoldNd matplotlib pytest ruff nbclient nbformat ipykernel
"${pip[@]}" --no-deps laplace-torch==0.3 curvlinops-for-pytorch==3.0.1 backpack-for-pytorch==1.7.1
"${pip[@]}" --no-deps -e .
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
bad = [d.metadata["Name"] for d in md.distributions()
       if d.metadata["Name"].lower().startswith(("nvidia-", "torchvision"))]
import torch
if bad and not torch.cuda.is_available():
    raise SystemExit(f"[setup] CUDA packages were pulled on a CPU machine: {bad}")
print(f"[setup] torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")
PY
echo "$want" > "$stamp"
