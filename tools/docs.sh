#!/usr/bin/env bash
# Build the documentation site (site/) with the docs extra of pyproject.toml.
#
#   bash tools/docs.sh            install the docs extra into .venv if needed, build strictly
#   bash tools/docs.sh serve      the same, then serve it on http://127.0.0.1:8000
#
# Strict: a broken link, a missing page or a docstring the API reference cannot read
# fails the build. The docs extra is installed by name (read from pyproject.toml), not
# through `pip install .[docs]`, so that pip does not resolve ella's pinned runtime
# dependencies again (tools/setup_env.sh installs those its own way).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
py=.venv/bin/python
if ! "$py" -c "import mkdocs, material, mkdocstrings, mkdocs_jupyter" 2>/dev/null; then
  mapfile -t extra < <("$py" -c "import tomllib; [print(r) for r in tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']]")
  "$py" -m pip install --quiet --disable-pip-version-check "${extra[@]}"
fi
export NO_MKDOCS_2_WARNING=1
if [ "${1:-build}" = serve ]; then
  exec .venv/bin/mkdocs serve
fi
exec .venv/bin/mkdocs build --strict --quiet
