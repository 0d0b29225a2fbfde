"""A selection's record in a run directory: its files, how it is read back, how it resumes.

Each search (:mod:`ella.selection.searches`) keeps a JSON record (the rounds and their
rows) and, where it carries weights from round to round, the winner's and the round's
best candidate's states, under the file names it declares (:class:`SearchFiles`). The
record is written after every candidate, so an interrupted selection resumes where it
stopped; everything read back is checked against its schema (:mod:`ella.schemas`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ella.errors import CheckpointError, RunDirectoryError
from ella.io import load_torch
from ella.rundir import read_json
from ella.schemas import (
    FINITE,
    PATH_DROPS_FILE,
    SELECTION_FILE,
    SELECTION_STATE_FILE,
    check,
    is_unit,
    mismatch,
)
from ella.selection.candidates import CONTROL
from ella.selection.criteria import CRITERIA, DEFAULT_CRITERION

__all__ = [
    "SearchFiles",
    "SelectionFiles",
    "new_record",
    "read_drops",
    "read_selection",
    "read_selection_state",
]


@dataclasses.dataclass(frozen=True)
class SearchFiles:
    """The file names a search keeps in a run directory.

    Attributes:
        record: its JSON record.
        winner: the selected network so far (``{"model", "log_prior", "kept"}``), or None
            for a search of one round.
        candidate: the running round's best candidate so far, or None.
        figure: a figure of the finished record, or None.
    """

    record: str
    winner: str | None = None
    candidate: str | None = None
    figure: str | None = None


def read_selection(path: Path, what: str = "path selection", fix: str = "") -> dict:
    """The record of :func:`select_paths` in ``path``, checked: its shape
    (:data:`ella.schemas.SELECTION_FILE`), and that each round's rows begin with the
    control, its winner is one of them, a record with rounds holds the null model, every
    name it keeps or drops is one of its own paths (:func:`_names_problem`), and every row
    holds its criterion's score as a finite number.

    Raises:
        CheckpointError: naming the file, what is wrong and ``fix`` (by default: restore
            it, or start the selection again with ``--overwrite``).
    """
    fix = fix or (
        "restore it from a copy, or add --overwrite to ella select to start the selection "
        "again without it"
    )
    record = read_json(path, what, SELECTION_FILE, fix)
    problem = _round_problem(record["rounds"])
    if problem is None and record["rounds"] and "null" not in record:
        problem = "it has rounds but no null model ('null')"
    if problem is None and record["finished"] and not record["rounds"]:
        problem = "it is finished but has no round"
    criterion = record.get("criterion", DEFAULT_CRITERION)
    if problem is None and record["finished"] and record["rounds"][-1]["winner"] is None:
        problem = f"it is finished but its last round (round {len(record['rounds'])}) has no winner"
    problem = problem or _criterion_problem(
        criterion, [(f"rounds[{i}]", this["rows"]) for i, this in enumerate(record["rounds"])]
    )
    problem = problem or _names_problem(record)
    if problem is not None:
        raise CheckpointError(f"{path} is not as ella writes it: {problem}; {fix}")
    return record


def _round_problem(rounds: list[dict]) -> str | None:
    """What is inconsistent in a selection's rounds (None where nothing is)."""
    for number, this in enumerate(rounds):
        rows = this["rows"]
        if rows and rows[0]["dropped"] != CONTROL:
            return f"round {number + 1} does not begin with the control ('{CONTROL}')"
        if this["winner"] is not None and this["winner"] not in {r["dropped"] for r in rows}:
            return f"round {number + 1}'s winner {this['winner']!r} is none of its rows"
        if this["winner"] is None and number < len(rounds) - 1:
            return f"round {number + 1} has no winner but is followed by another"
    return None


def _criterion_problem(criterion: str, tables: list[tuple[str, list[dict]]]) -> str | None:
    """Where ``criterion`` is not registered, or a row of ``tables`` (``(where, rows)``)
    or one of its replicates lacks its score as a finite number (None where nothing is)."""
    if criterion not in CRITERIA:
        return (
            f"its criterion {criterion!r} is none of the registered ones "
            f"({', '.join(sorted(CRITERIA))}; register it before reading the record)"
        )
    key = CRITERIA[criterion].key
    for where, rows in tables:
        for j, row in enumerate(rows):
            here = f"{where}.rows[{j}]" if where else f"rows[{j}]"
            replicates = enumerate(row.get("replicates", []))
            for at, scored in [
                (here, row),
                *((f"{here}.replicates[{k}]", r) for k, r in replicates),
            ]:
                if key not in scored:
                    return f"{at}.{key} is missing (the score of its criterion, {criterion!r})"
                found = mismatch(scored[key], FINITE, f"{at}.{key}")
                if found:
                    return found
    return None


def _listed(names: list[str]) -> str:
    return ", ".join(names) or "none"


def _outside(names: list[str], among: list[str], at: str, whose: str) -> str | None:
    """Where ``names`` (at ``at``) holds a name not in ``among`` (``whose`` they are), or
    one twice; None where neither."""
    for i, name in enumerate(names):
        if name not in among:
            return f"{at}[{i}] is {name!r}, none of {whose} ({_listed(among)})"
        if name in names[:i]:
            return f"{at} names {name!r} twice"
    return None


def _names_problem(record: dict) -> str | None:
    """What a selection record names that is not its own: a path of the wrong kind for its
    search (a layer's path in a whole-path selection, or the reverse), a kept path or a
    dropped one outside the record's ``paths`` or the round's kept ones, a candidate whose
    kept paths are not its round's without what it drops, or kept paths that are not what
    the rounds decided (None where nothing is)."""
    paths, per_layer = record["paths"], bool(record.get("per_layer"))
    for i, name in enumerate(paths):
        if not is_unit(name, per_layer):
            words = "a layer's path (layer3.conv)" if per_layer else "a path name"
            search = "per-layer" if per_layer else "whole-path"
            return f"paths[{i}] is {name!r}, not {words} as a {search} selection names them"
    problem = _outside(paths, paths, "paths", "its paths")
    if problem is not None:
        return problem
    kept = paths  # what the rounds decided so far
    for i, this in enumerate(record["rounds"]):
        at = f"rounds[{i}]"
        problem = _outside(this["kept"], paths, f"{at}.kept", "the record's paths")
        if problem is not None:
            return problem
        if set(this["kept"]) != set(kept):
            return (
                f"{at}.kept is [{_listed(this['kept'])}], not what the rounds before it kept "
                f"([{_listed(kept)}])"
            )
        for j, row in enumerate(this["rows"]):
            dropped = row["dropped"]
            if dropped != CONTROL and dropped not in this["kept"]:
                return (
                    f"{at}.rows[{j}].dropped is {dropped!r}, neither {CONTROL!r} nor one of "
                    f"the round's kept paths ({_listed(this['kept'])})"
                )
            where = f"{at}.rows[{j}].kept"
            problem = _outside(row["kept"], this["kept"], where, "the round's kept paths")
            if problem is not None:
                return problem
            if set(row["kept"]) != set(this["kept"]) - {dropped}:
                return (
                    f"{where} is [{_listed(row['kept'])}], not the round's kept paths "
                    f"without {dropped!r}"
                )
        won = [r for r in this["rows"] if r["dropped"] == this["winner"]]
        kept = won[0]["kept"] if won else this["kept"]
    problem = _outside(record["kept"], paths, "kept", "the record's paths")
    if problem is None and set(record["kept"]) != set(kept):
        problem = (
            f"kept is [{_listed(record['kept'])}], not what its rounds kept ([{_listed(kept)}])"
        )
    return problem


def read_drops(path: Path) -> dict:
    """``path_drops.json`` (:func:`drop_each_path`), checked against
    :data:`ella.schemas.PATH_DROPS_FILE`, beginning with the control where it has rows,
    each other row dropping one of the control's paths once and keeping the rest, and
    every row holding its criterion's score as a finite number."""
    fix = (
        "restore it from a copy, or add --overwrite to ella select --drop-only to train them again"
    )
    record = read_json(path, "earlier path drops", PATH_DROPS_FILE, fix)
    rows = record["rows"]
    problem = None
    if rows and rows[0]["dropped"] != CONTROL:
        problem = "it does not begin with the control"
    problem = problem or _criterion_problem(
        record.get("criterion", DEFAULT_CRITERION), [("", rows)]
    )
    if problem is None and rows:
        problem = _drops_problem(rows)
    if problem is not None:
        raise CheckpointError(f"{path} is not as ella writes it: {problem}; {fix}")
    return record


def _drops_problem(rows: list[dict]) -> str | None:
    """Where a row of drops (``rows[0]`` the control) drops what the control does not keep,
    a path twice, or keeps other paths than the control's without it."""
    paths = rows[0].get("kept")
    dropped = [r["dropped"] for r in rows[1:]]
    for j, (row, name) in enumerate(zip(rows[1:], dropped, strict=True), start=1):
        if name == CONTROL or not is_unit(name, per_layer=False):
            return f"rows[{j}].dropped is {name!r}, not a path name"
        if name in dropped[: j - 1]:
            return f"rows[{j}].dropped is {name!r}, which rows[{dropped.index(name) + 1}] drops"
        if paths is None or "kept" not in row:
            continue  # an older record, without the kept paths
        if name not in paths:
            return (
                f"rows[{j}].dropped is {name!r}, none of the control's kept paths "
                f"({_listed(paths)})"
            )
        if set(row["kept"]) != set(paths) - {name}:
            return f"rows[{j}].kept is [{_listed(row['kept'])}], not the control's without {name!r}"
    return None


def read_selection_state(path: Path) -> dict:
    """A selection's saved network (the winner so far, or a round's best candidate),
    checked against :data:`ella.schemas.SELECTION_STATE_FILE`."""
    fix = "restore it from a copy, or add --overwrite to ella select to start again"
    return check(load_torch(path, fix=fix), SELECTION_STATE_FILE, path, fix)


def new_record(
    epochs: int,
    paths: list[str],
    per_layer: bool = False,
    criterion: str = DEFAULT_CRITERION,
    seeds: int = 1,
) -> dict:
    """The record of a selection that has not started (``paths``: the prior groups of a
    per-layer one), naming its criterion and its seeds where they are not the default."""
    record = {"epochs": epochs, "paths": paths, "rounds": [], "kept": paths, "finished": False}
    if per_layer:
        record["per_layer"] = True
    if criterion != DEFAULT_CRITERION:
        record["criterion"] = criterion
    if seeds > 1:
        record["seeds"] = seeds
    return record


@dataclasses.dataclass
@dataclasses.dataclass
class SelectionFiles:
    """Where a greedy search keeps its record and weights in a run directory, so that an
    interrupted selection resumes.

    Attributes:
        run_dir: the run directory.
        names: the search's file names.
        flag: the search's words on the command line (``" --per-layer"``), for the fixes.
    """

    run_dir: Path
    names: SearchFiles
    flag: str = ""

    @property
    def record(self) -> Path:
        """The JSON record."""
        return self.run_dir / self.names.record

    @property
    def winner(self) -> Path:
        """The selected network so far."""
        return self.run_dir / self.names.winner

    @property
    def candidate(self) -> Path:
        """The running round's best candidate so far."""
        return self.run_dir / self.names.candidate

    def earlier_record(
        self, epochs: int, paths: list[str], overwrite: bool = False, per_layer: bool = False,
        criterion: str = DEFAULT_CRITERION, seeds: int = 1,
    ) -> dict:  # fmt: skip
        """The record of an earlier selection with these ``epochs``, ``paths``,
        ``criterion`` and ``seeds``, else a new one; an earlier selection of other settings
        is refused (it is not replaced unasked) unless ``overwrite``, which removes its
        files."""
        flag = self.flag
        if self.record.is_file():
            fix = (
                f"restore it from a copy, or ella select {self.run_dir}{flag} --overwrite "
                "starts the selection again without it"
            )
            try:
                earlier = read_selection(self.record, "earlier path selection", fix)
            except CheckpointError:
                if not overwrite:
                    raise
                earlier = {}  # unreadable, and to be replaced
            same = earlier.get("criterion", DEFAULT_CRITERION) == criterion
            same = same and earlier.get("seeds", 1) == seeds
            if same and earlier.get("epochs") == epochs and earlier.get("paths") == paths:
                return earlier
            if earlier.get("rounds") and not overwrite:
                rounds = earlier["rounds"]
                state = "finished" if earlier.get("finished") else f"stopped in round {len(rounds)}"
                settings = f"--epochs {earlier.get('epochs')}"
                if not same:
                    settings += f" --criterion {earlier.get('criterion', DEFAULT_CRITERION)}"
                    settings += f" --seeds {earlier.get('seeds', 1)}"
                raise RunDirectoryError(
                    f"{self.record} holds a selection of {earlier.get('epochs')} epochs per "
                    f"network ({state}): ella select {self.run_dir}{flag} {settings} shows or "
                    f"resumes it; add --overwrite to replace it by one of {epochs}"
                )
            for path in (self.winner, self.candidate):
                path.unlink(missing_ok=True)
        return new_record(epochs, paths, per_layer, criterion, seeds)
