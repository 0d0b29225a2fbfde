#!/usr/bin/env bash
# Build the documentation site (site/) with the locked docs toolchain (constraints.txt).
#
#   bash tools/docs.sh            set up .venv if needed, build strictly
#   bash tools/docs.sh serve      the same, then serve it on http://127.0.0.1:8000
#
# The environment is ELLA_VENV where set (as tools/setup_env.sh builds it), else .venv.
#
# Strict: any warning (a broken link, a missing page, a docstring the API reference cannot
# read) fails the build. Warnings are printed, never silenced: `--quiet` would drop them
# before strict mode counts them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
venv=${ELLA_VENV:-.venv}
export NO_MKDOCS_2_WARNING=1
if [ "${1:-build}" = serve ]; then
  exec "$venv/bin/mkdocs" serve
fi
exec "$venv/bin/mkdocs" build --strict
