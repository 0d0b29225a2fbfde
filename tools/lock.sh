#!/usr/bin/env bash
# Move the lock (constraints.txt) to the newest releases within pyproject.toml's ranges.
#
# Builds a separate environment (.venv-lock) from the ranges, runs the whole suite and the
# strict docs build in it, and only if both pass rewrites constraints.txt from it. Review
# the diff, then commit it with the CHANGELOG line of any changed output.
set -euo pipefail
cd "$(dirname "$0")/.."
export ELLA_VENV=.venv-lock ELLA_UNLOCKED=1 NO_MKDOCS_2_WARNING=1
rm -rf .venv-lock
bash tools/setup_env.sh
.venv-lock/bin/python -m pytest -q -m "slow or not slow"
.venv-lock/bin/mkdocs build --strict --site-dir .venv-lock/site
{
  sed -n '/^#/p;/^$/q' constraints.txt
  .venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^#' \
    | grep -v -i -E '^(nvidia-|torchvision)' | sed 's/+cpu$//' | sort -f
} > constraints.txt.new
mv constraints.txt.new constraints.txt
echo "[lock] constraints.txt rewritten; review: git diff constraints.txt"
