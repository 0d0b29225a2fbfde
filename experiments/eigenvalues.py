"""Eigenvalues of symmetric Kronecker factors: torch's LAPACK against scipy's, by size.

Every evidence round decomposes each Kronecker factor (``log det`` of the posterior
precision needs their eigenvalues); on the default mixer the 784 x 784 factors of
the 28 x 28 FC paths take most of that time. torch's CPU wheels call MKL, scipy's
call OpenBLAS; this benchmark times both on the same Gram matrices (``X^T X`` with
``2 n`` Gaussian rows, float32, upper triangle, eigenvalues only), in one process,
and :data:`ella.marglik.linalg.SCIPY_EIGVALSH_MIN_SIZE` is set from it.

    python -m experiments.eigenvalues       # about a minute on 2 cores
"""

from __future__ import annotations

import argparse

import scipy.linalg
import torch

from ella.marglik.linalg import SCIPY_EIGVALSH_MIN_SIZE
from studies.results import EXPERIMENT_RESULTS, environment, write_results
from studies.runner import median_seconds

SIZES = (64, 128, 196, 256, 384, 576, 784, 1024)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results-dir", default=str(EXPERIMENT_RESULTS), help="where to write results"
    )
    args = parser.parse_args(argv)
    rows = []
    for n in SIZES:
        x = torch.randn(2 * n, n, generator=torch.Generator().manual_seed(n))
        a = x.T @ x
        repeats = max(1, 2000 // n)  # calls per timing, so small sizes are measurable

        def with_torch(a=a, repeats=repeats):
            for _ in range(repeats):
                torch.linalg.eigvalsh(a, UPLO="U")

        def with_scipy(a=a, repeats=repeats):
            for _ in range(repeats):
                scipy.linalg.eigvalsh(a.numpy(), lower=False, driver="ev", check_finite=False)

        ms_torch = 1e3 * median_seconds(with_torch) / repeats
        ms_scipy = 1e3 * median_seconds(with_scipy) / repeats
        rows.append({"n": n, "torch_ms": ms_torch, "scipy_ms": ms_scipy})
        print(f"n={n}: torch {ms_torch:.2f} ms, scipy {ms_scipy:.2f} ms", flush=True)
    env = environment("cpu")
    payload = {
        "command": "python -m experiments.eigenvalues",
        "environment": env,
        "scipy": scipy.__version__,
        "rows": rows,
        "scipy_from_size": SCIPY_EIGVALSH_MIN_SIZE,
    }
    md = "\n".join(
        [
            "# Eigenvalues of a symmetric factor: torch (MKL) against scipy (OpenBLAS)",
            "",
            f"`{payload['command']}` on {env['cpu']}, {env['threads']} threads, {env['date']}; "
            f"torch {env['torch']}, scipy {scipy.__version__}. Median of 5 timings, float32 "
            "`X^T X` with 2n Gaussian rows, eigenvalues only. ella routes factors of "
            f"n >= {SCIPY_EIGVALSH_MIN_SIZE} on the CPU to scipy (`ella.marglik.linalg`).",
            "",
            "| n | torch [ms] | scipy [ms] | scipy / torch |",
            "|---:|---:|---:|---:|",
            *[
                f"| {r['n']} | {r['torch_ms']:.2f} | {r['scipy_ms']:.2f} | "
                f"{r['scipy_ms'] / r['torch_ms']:.2f} |"
                for r in rows
            ],
            "",
        ]
    )
    write_results("eigenvalues_cpu", payload, md, args.results_dir)


if __name__ == "__main__":
    main()
