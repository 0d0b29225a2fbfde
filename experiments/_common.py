"""What the experiment scripts share: their results folder, and benchmarks/'s guarded
writers (a Markdown file a script writes ends with the generated-file mark, and no script
replaces a file without it)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import common as benchmark_common
from benchmarks.common import (
    GENERATED,
    check_generated,
    environment,
    write_generated,
    write_markdown,
)

#: where every experiment script writes by default (``--results-dir`` changes it)
EXPERIMENT_RESULTS = Path(__file__).resolve().parent / "results"
#: where the benchmark scripts write (an experiment may read their results)
BENCHMARK_RESULTS = benchmark_common.RESULTS


def write_results(
    name: str, payload: dict, markdown: str, results_dir: Path = EXPERIMENT_RESULTS
) -> None:
    """Write ``NAME.json`` and ``NAME.md`` under ``results_dir``
    (:func:`benchmarks.common.write_generated`)."""
    results_dir = Path(results_dir)
    write_generated(results_dir / f"{name}.json", payload, results_dir / f"{name}.md", markdown)


def as_experiment(payload: dict) -> dict:
    """``payload`` with its ``command`` naming the script's module under ``experiments``
    (:func:`benchmarks.runner.stamp` writes ``python -m benchmarks.NAME``)."""
    command = payload.get("command")
    if isinstance(command, str) and command.startswith("python -m benchmarks."):
        payload["command"] = "python -m experiments." + command.removeprefix(
            "python -m benchmarks."
        )
    return payload


__all__ = [
    "BENCHMARK_RESULTS",
    "EXPERIMENT_RESULTS",
    "GENERATED",
    "as_experiment",
    "check_generated",
    "environment",
    "write_generated",
    "write_markdown",
    "write_results",
]
