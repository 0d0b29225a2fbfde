#!/usr/bin/env bash
# One entry point that does all set-up on a fresh machine, then runs a job.
#
#   ./run.sh train [ARGS]   the main job (ella train on the embedded MNIST subset)
#   ./run.sh demo           a tour of the layers (parameter counts, speed, invariance)
#   ./run.sh test [ARGS]    the whole test suite (fast and slow tests), one worker per core
#   ./run.sh setup          only create/update the virtual environment .venv
#
# Set-up is idempotent: .venv is (re)built only when pyproject.toml or
# tools/setup_env.sh change. On a machine without a GPU it keeps a CPU build
# of torch and never installs torchvision or CUDA packages.
set -euo pipefail
cd "$(dirname "$0")"
bash tools/setup_env.sh
py=.venv/bin/python
job=${1:-train}
shift || true
case "$job" in
  setup) ;;
  train) exec .venv/bin/ella train "$@" ;;
  demo) exec .venv/bin/ella demo "$@" ;;
  # one pytest worker per core this process may use (ELLA_TEST_WORKERS=N chooses; 0: none)
  test)
    workers=${ELLA_TEST_WORKERS:-$("$py" -c "from ella.runtime.system import available_cpus as n; print(n())")}
    exec "$py" -m pytest -m "slow or not slow" -n "$workers" --dist worksteal "$@" ;;
  *) echo "usage: ./run.sh {train|demo|test|setup} [ARGS]" >&2; exit 2 ;;
esac
