#!/usr/bin/env bash
# Move the lock (constraints.txt) to the newest releases within pyproject.toml's ranges.
#
# Builds a separate environment (.venv-lock) from the ranges, runs the whole suite and the
# strict docs build in it, and only if both pass rewrites constraints.txt from it, ending
# with the trailer (the pins' count and checksum) that tools/setup_env.sh checks. Review
# the diff, then commit it with the CHANGELOG line of any changed output.
set -euo pipefail
cd "$(dirname "$0")/.."
export ELLA_VENV=.venv-lock ELLA_UNLOCKED=1 NO_MKDOCS_2_WARNING=1
rm -rf .venv-lock
bash tools/setup_env.sh
.venv-lock/bin/python -m pytest -q -m "slow or not slow"
.venv-lock/bin/mkdocs build --strict --site-dir .venv-lock/site
{
  sed -n '/^#/!q;/^# lock: /d;p' constraints.txt  # the header: the comments above the pins
  .venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^#' \
    | grep -v -i -E '^(nvidia-|torchvision)' | sed 's/+cpu$//' | sort -f
} > constraints.txt.new
.venv-lock/bin/python tools/check_lock.py --write constraints.txt.new  # the trailer
mv constraints.txt.new constraints.txt
.venv-lock/bin/python tools/check_lock.py constraints.txt
echo "[lock] constraints.txt rewritten; review: git diff constraints.txt"
