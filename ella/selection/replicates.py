r"""Replicates: every candidate trained at several seeds, and a decision called only where
the seeds agree.

One training per candidate gives one score, whose seed-to-seed spread can be as large as
the differences a round decides by. With ``seeds = K`` every candidate is trained on at
the seeds :func:`replicate_seeds` (the run's own first), each replicate scored by the
criterion; the row's score is the mean over the seeds, and each replicate is kept in the
row's ``"replicates"``. A candidate's gain over its round's control is taken seed by seed
(paired: the same seed's control) and summarised by :func:`summarise`:

.. math::

    \bar d = \frac1K \sum_k d_k, \qquad
    \mathrm{SE} = \frac{s_d}{\sqrt K}, \quad
    s_d^2 = \frac{1}{K-1} \sum_k (d_k - \bar d)^2,

and is *decided* only where ``d_k`` has one sign at every seed and
:math:`|\bar d| > 2\,\mathrm{SE}` (:data:`CALL_AT`). A round drops a unit only where that
candidate's gain is decided; otherwise the control stands and the answer says "not
decided at K seeds".
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ella.errors import ConfigError
from ella.io import save_json
from ella.rundir import read_json
from ella.selection.executors import Executor, LocalExecutor

#: one candidate to train: the units it drops and the state it starts from (``None``: the run)
Job = tuple[list[str], dict | None]

__all__ = [
    "CALL_AT",
    "Job",
    "MAX_SEEDS",
    "check_seeds",
    "gain_summary",
    "one_by_one",
    "replicate_seeds",
    "replicated",
    "summarise",
    "train_each",
]

#: a decision is called where ``|mean| > CALL_AT * SE`` and every seed agrees in sign
CALL_AT = 2.0
#: the most seeds a selection accepts (a bound on its cost, not on the statistics)
MAX_SEEDS = 32
#: the seeds after the run's own are ``run seed + SEED_STRIDE * k``
SEED_STRIDE = 1000


def check_seeds(seeds, option: str = "seeds") -> int:
    """``seeds`` as an int from 1 to :data:`MAX_SEEDS`, or a :class:`ConfigError` naming
    ``option``."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise ConfigError(f"{option} must be an int from 1 to {MAX_SEEDS}; got {seeds!r}")
    return seeds


def replicate_seeds(run_seed: int, k: int) -> list[int]:
    """The ``k`` seeds a candidate is trained at: the run's own, then
    ``run_seed + 1000 j`` for ``j = 1 .. k - 1``."""
    return [run_seed + SEED_STRIDE * j for j in range(k)]


def summarise(differences: list[float]) -> dict:
    """Mean, standard error, the seeds agreeing with the mean's sign and whether the
    difference is decided (one sign at every seed, ``|mean| > 2 SE``), of per-seed
    differences; the standard error is NaN for one seed, which decides nothing."""
    n = len(differences)
    mean = statistics.fmean(differences)
    se = statistics.stdev(differences) / math.sqrt(n) if n > 1 else math.nan
    sign = 1 if mean > 0 else -1 if mean < 0 else 0
    agree = sum(1 for d in differences if (d > 0) - (d < 0) == sign) if sign else 0
    decided = n > 1 and agree == n and abs(mean) > CALL_AT * se
    return {"mean": mean, "se": se, "agree": agree, "seeds": n, "decided": decided}


def gain_summary(row: dict, control: dict, key: str) -> dict | None:
    """:func:`summarise` of a replicated candidate's gain in ``key`` over its control, seed
    by seed; None where either row has no replicates."""
    mine, theirs = row.get("replicates"), control.get("replicates")
    if not mine or not theirs:
        return None
    by_seed = {r["seed"]: r[key] for r in theirs}
    return summarise([r[key] - by_seed[r["seed"]] for r in mine if r["seed"] in by_seed])


def train_each(
    work: Callable[[tuple[list[str], dict | None, int | None]], tuple[dict, dict]],
    executor: Executor,
    seeds: list[int] | None = None,
    key: str = "log_evidence",
    cache: Path | None = None,
    progress: bool = False,
) -> Callable[[list[Job]], Iterator[tuple[int, tuple[dict, dict]]]]:
    """A round's candidates ``[(dropped, start), ...]`` trained by ``executor``, each at
    every one of ``seeds`` (``None``: once, at the run's own seed), yielded as
    ``(index, (row, end))`` as each candidate's last seed finishes.

    ``work((dropped, start, seed))`` trains one candidate at one seed (``None``: the
    run's). With several seeds, a candidate's row is the first seed's with ``key`` and
    ``log_evidence`` averaged over the seeds and each seed's row in ``"replicates"``, its
    end state the first seed's. With ``cache`` (a JSON file, written by this process
    alone), each replicate after the first is kept there as it finishes, so a candidate
    interrupted between its seeds trains only those it lacks when asked again (the first
    seed, whose weights the next round starts from, is trained again)."""
    wanted = seeds or [None]

    def each(candidates: list[Job]):
        done = read_json(cache, "replicates") if cache is not None and cache.is_file() else {}
        jobs, slots = [], []  # slots[n]: (candidate, seed's place, replicate's key)
        results: list[dict[int, Any]] = [{} for _ in candidates]
        for i, (dropped, start) in enumerate(candidates):
            for j, seed in enumerate(wanted):
                tag = _name(dropped, start, seed) if j else None
                if tag is not None and tag in done:
                    results[i][j] = done[tag]
                    continue
                jobs.append((dropped, start, seed))
                slots.append((i, j, tag))
        for n, (row, end) in executor.map(work, jobs, progress):
            i, j, tag = slots[n]
            if j == 0:
                results[i][0] = (row, end)
            else:
                results[i][j] = done[tag] = _replicate(row, seeds[j], key)
                if cache is not None:
                    save_json(done, cache)
            if len(results[i]) == len(wanted):
                yield i, _combined(results[i], seeds, key)

    return each


def replicated(
    train: Callable[[list[str], dict | None, int], tuple[dict, dict]],
    seeds: list[int],
    key: str,
    cache: Path | None = None,
) -> Callable[[list[str], dict | None], tuple[dict, dict]]:
    """``train(dropped, start, seed)`` made a candidate trained at every one of ``seeds``
    in this process, one after another (:func:`train_each`'s row and end state)."""
    return one_by_one(train_each(lambda job: train(*job), LocalExecutor(), seeds, key, cache))


def one_by_one(
    each: Callable[[list[Job]], Iterator[tuple[int, tuple[dict, dict]]]],
) -> Callable[[list[str], dict | None], tuple[dict, dict]]:
    """``train(dropped, start)``: one candidate of :func:`train_each`'s ``each``."""

    def train(dropped: list[str], start: dict | None) -> tuple[dict, dict]:
        return dict(each([(dropped, start)]))[0]

    return train


def _name(dropped: list[str], start: dict | None, seed: int) -> str:
    """A replicate's key: what it drops, the weights it starts from, its seed."""
    began = "run" if start is None else _digest(start["model"])
    return f"{'+'.join(sorted(dropped)) or 'none'}|{began}|{seed}"


def _combined(results: dict[int, Any], seeds: list[int] | None, key: str) -> tuple[dict, dict]:
    """One candidate's ``(row, end)`` from its first seed's and its replicates."""
    row, end = results[0]
    if not seeds:
        return row, end
    replicates = [_replicate(row, seeds[0], key)] + [results[j] for j in range(1, len(seeds))]
    mean = {k: statistics.fmean(r[k] for r in replicates) for k in {key, "log_evidence"}}
    return {**row, **mean, "replicates": replicates}, end


def _digest(state: dict) -> str:
    """A short SHA-256 of a state dict's tensors, in order."""
    digest = hashlib.sha256()
    for name, value in state.items():
        digest.update(name.encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def _replicate(row: dict, seed: int, key: str) -> dict:
    """What a replicate keeps of its row."""
    kept = {"seed": seed, "log_evidence": row["log_evidence"], key: row[key]}
    for extra in ("log_likelihood", "test_accuracy"):
        if extra in row:
            kept[extra] = row[extra]
    return kept
