"""What a selection's rounds train: the searches, registered by name.

A *search* decides which candidates a round trains and what follows from their scores:

- ``"greedy"`` (``ella select RUN``): backward elimination by the criterion, a path of every
  layer at a time (:data:`~ella.selection.units.WHOLE_PATHS`): each round trains on the
  network as the round before left it (the control) and, for each unit it still has, the
  same network without it; the best candidate that kept its fit
  (:func:`~ella.selection.candidates.collapsed`) is dropped and starts the next round,
  until the control wins or one path is left;
- ``"per_layer"`` (``--per-layer``): the same, a path of one layer at a time
  (:data:`~ella.selection.units.LAYER_PATHS`);
- ``"drop"`` (``--drop-only``): the first round alone, recorded as rows.

A search of one's own subclasses :class:`Search` (its :meth:`Search.run` and
:meth:`Search.format`; its files and words as attributes) and is registered by
:func:`register_search`: ``ella select RUN --search NAME`` then runs it, resumes it from its
record and ``ella report`` prints it. The candidates come from :class:`SearchContext`, the
same for a run directory and for a model of :func:`ella.fit`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ella.errors import CheckpointError, ConfigError, RunDirectoryError
from ella.io import save_json, save_torch
from ella.rundir import (
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_PER_LAYER,
    PATH_SELECTION_PER_LAYER_CANDIDATE,
    PATH_SELECTION_PER_LAYER_FIGURE,
    PATH_SELECTION_PER_LAYER_STATE,
    PATH_SELECTION_STATE,
)
from ella.selection.candidates import CONTROL, collapsed
from ella.selection.criteria import DEFAULT_CRITERION, Criterion, criterion_of
from ella.selection.record import (
    SearchFiles,
    SelectionFiles,
    new_record,
    read_drops,
    read_selection,
    read_selection_state,
)
from ella.selection.replicates import Job, gain_summary
from ella.selection.units import LAYER_PATHS, WHOLE_PATHS, UnitKind

__all__ = [
    "DEFAULT_SEARCH",
    "SEARCHES",
    "DropSearch",
    "GreedySearch",
    "Search",
    "SearchContext",
    "control_first",
    "greedy_selection",
    "register_search",
    "search_of",
]


@dataclass
class SearchContext:
    """What a search trains and scores its candidates with.

    Attributes:
        epochs: epochs of training per candidate.
        units: every unit of the network (paths, or prior groups), in order.
        train: ``train(dropped, start) -> (row, end)``: one candidate with the units
            ``dropped`` held at zero, trained from ``start`` (``None``: the network
            selected from), its row (``"kept"``, the test metrics, ``"log_evidence"``,
            ``"log_likelihood"``, ``"shares"`` and the criterion's fields) and its end state
            ``{"model", "log_prior"}``.
        null: ``null()``, the class-frequency model (``"log_likelihood"``,
            ``"log_evidence"``) every candidate is compared with.
        criterion: what scores a candidate.
        run_dir: where the record is kept; ``None``: nothing is written (a model of
            :func:`ella.fit`).
        overwrite: replace a record of other settings, which is refused otherwise.
        seeds: the seeds every candidate is trained at (:mod:`ella.selection.replicates`;
            ``train`` trains them all); 1: one training each.
        selected: set by the search, the selected network's ``{"model", "log_prior"}``.
        each: ``each(candidates)``, what :meth:`train_all` does where it is set
            (:func:`~ella.selection.replicates.train_each`); ``None``: :attr:`train` in turn.
    """

    epochs: int
    units: list[str]
    train: Callable[[list[str], dict | None], tuple[dict, dict]]
    null: Callable[[], dict]
    criterion: Criterion = field(default_factory=lambda: criterion_of(None))
    run_dir: Path | None = None
    overwrite: bool = False
    seeds: int = 1
    selected: dict | None = None
    each: Callable[[list[Job]], Iterator[tuple[int, tuple[dict, dict]]]] | None = None

    def train_all(self, candidates: list[Job]) -> Iterator[tuple[int, tuple[dict, dict]]]:
        """``(index, train(*candidates[index]))`` for every candidate ``(dropped, start)``,
        as each finishes: through :attr:`each` where it is set (an executor may train them
        at once and in any order, :mod:`ella.selection.executors`), else one after
        another."""
        if self.each is not None:
            yield from self.each(candidates)
            return
        for index, (dropped, start) in enumerate(candidates):
            yield index, self.train(dropped, start)


class Search:
    """A way of choosing candidates (subclass it and :func:`register_search` it).

    Attributes:
        name: the registry key (``ella select --search NAME``).
        kind: what a candidate drops (:mod:`ella.selection.units`).
        files: the file names of its record in a run directory.
        flag: its words on the command line after ``ella select RUN`` (``" --per-layer"``).
        reported: whether ``ella report`` prints its finished record.
    """

    name: str = ""
    kind: UnitKind = WHOLE_PATHS
    files: SearchFiles = SearchFiles("")
    flag: str = ""
    reported: bool = True

    def run(self, context: SearchContext) -> dict:
        """Train and score the candidates; return the record (written under
        :attr:`files` after every candidate where ``context.run_dir`` is set)."""
        raise NotImplementedError

    def read(self, path: Path) -> dict:
        """The record in ``path``, checked (refused naming the file and the fix)."""
        return read_selection(path)

    def finished(self, record: dict) -> bool:
        """Whether ``record`` holds the search's answer."""
        return bool(record.get("finished"))

    def format(self, record: dict) -> str:
        """The record as text (tables and the answer)."""
        raise NotImplementedError


class GreedySearch(Search):
    """Backward elimination by the criterion (:func:`greedy_selection`), over the units of
    :attr:`kind`, with the winner's weights starting each next round."""

    def __init__(self, name: str, kind: UnitKind, files: SearchFiles, flag: str = ""):
        self.name, self.kind, self.files, self.flag = name, kind, files, flag

    def run(self, context: SearchContext) -> dict:
        """:func:`greedy_selection` from the record found in the run directory (resumed),
        or a new one."""
        files = None
        criterion = context.criterion.name
        if context.run_dir is not None:
            files = SelectionFiles(context.run_dir, self.files, self.flag)
            record = files.earlier_record(
                context.epochs, context.units, context.overwrite, self.kind.per_layer, criterion,
                context.seeds,
            )  # fmt: skip
        else:
            record = new_record(
                context.epochs, context.units, self.kind.per_layer, criterion, context.seeds
            )
        if "null" not in record:
            record["null"] = context.null()
        record, context.selected = greedy_selection(
            record, context.units, context.train_all, files, self.kind, context.criterion
        )
        return record

    def format(self, record: dict) -> str:
        """:func:`~ella.selection.answer.format_path_selection`."""
        from ella.selection.answer import format_path_selection

        return format_path_selection(record)


class DropSearch(Search):
    """One round: the control and the network without each unit, trained alike; the
    record ``{"epochs", "rows"}``, the control first. It reuses the first round of a greedy
    selection of the same settings (the same candidates, from the run itself)."""

    def __init__(self, name: str, files: SearchFiles, reuses: SearchFiles | None = None):
        self.name, self.files, self.reuses = name, files, reuses
        self.kind, self.flag, self.reported = WHOLE_PATHS, " --drop-only", False

    def read(self, path: Path) -> dict:
        """:func:`~ella.selection.record.read_drops`."""
        return read_drops(path)

    def finished(self, record: dict) -> bool:
        """Whether any row is recorded (the rows are written as they are trained)."""
        return bool(record.get("rows"))

    def run(self, context: SearchContext) -> dict:
        """The control and each unit dropped, reusing the rows found in the run directory."""
        epochs, done = context.epochs, {}
        run_dir = context.run_dir
        head = {"epochs": epochs, **({"seeds": context.seeds} if context.seeds > 1 else {})}
        if context.criterion.name != DEFAULT_CRITERION:
            head["criterion"] = context.criterion.name
        if run_dir is not None:
            done = self._earlier(run_dir, head, context.overwrite)
        order = [CONTROL, *context.units]
        rows = [done[key] for key in order if key in done]
        todo = [key for key in order if key not in done]
        jobs = [([] if key == CONTROL else [key], None) for key in todo]
        finished = context.train_all(jobs)
        for key, row, _ in control_first(finished, todo, CONTROL in done):
            rows = sorted([*rows, {"dropped": key, **row}], key=lambda r: order.index(r["dropped"]))
            if run_dir is not None:  # as each row is trained
                save_json({**head, "rows": rows}, run_dir / self.files.record)
        record = {**head, "rows": rows}
        path = run_dir / self.files.record if run_dir is not None else None
        if path is not None and not _holds(path, record):
            save_json(record, path)  # rows taken from elsewhere; a record shown again is not
        return record

    def _earlier(self, run_dir: Path, head: dict, overwrite: bool) -> dict[str, dict]:
        """The rows of an earlier call with these settings (``head``: epochs, seeds,
        criterion) and of the first round of a greedy selection of the same settings; drops
        of other settings are refused unless ``overwrite``."""
        epochs = head["epochs"]

        def settings(record: dict) -> tuple:
            return tuple(record.get(k) for k in ("epochs", "seeds", "criterion"))

        done: dict[str, dict] = {}
        selection = run_dir / self.reuses.record if self.reuses else None
        earlier = None
        if selection is not None and selection.is_file():
            try:
                earlier = read_selection(selection, "earlier path selection")
            except CheckpointError as err:
                if not overwrite:  # only reused: --overwrite trains the drops without it
                    raise CheckpointError(
                        f"{err}; or add --overwrite to ella select --drop-only to train the "
                        "drops without reusing its first round"
                    ) from None
        if earlier is not None and settings(earlier) == settings(head) and earlier.get("rounds"):
            done = {row["dropped"]: row for row in earlier["rounds"][0]["rows"]}
        path = run_dir / self.files.record
        if path.is_file():
            earlier = read_drops(path)
            if settings(earlier) == settings(head):
                done.update({row["dropped"]: row for row in earlier.get("rows", [])})
            elif earlier.get("rows") and not overwrite:
                raise RunDirectoryError(
                    f"{path} holds the drops of {earlier.get('epochs')} epochs per network: "
                    f"ella select {run_dir} --drop-only --epochs {earlier.get('epochs')} shows "
                    f"or resumes them; add --overwrite to replace them by drops of {epochs}"
                )
        return done

    def format(self, record: dict) -> str:
        """:func:`~ella.selection.answer.format_path_drops`."""
        from ella.selection.answer import format_path_drops

        return format_path_drops(record)


GREEDY_FILES = SearchFiles(PATH_SELECTION, PATH_SELECTION_STATE, PATH_SELECTION_CANDIDATE)
PER_LAYER_FILES = SearchFiles(
    PATH_SELECTION_PER_LAYER,
    PATH_SELECTION_PER_LAYER_STATE,
    PATH_SELECTION_PER_LAYER_CANDIDATE,
    PATH_SELECTION_PER_LAYER_FIGURE,
)
#: the search of every selection that names none
DEFAULT_SEARCH = "greedy"
#: the searches by name, in the order ``ella report`` prints them
SEARCHES: dict[str, Search] = {
    "greedy": GreedySearch("greedy", WHOLE_PATHS, GREEDY_FILES),
    "per_layer": GreedySearch("per_layer", LAYER_PATHS, PER_LAYER_FILES, " --per-layer"),
    "drop": DropSearch("drop", SearchFiles(PATH_DROPS), reuses=GREEDY_FILES),
}


def register_search(search: Search) -> Search:
    """Add ``search`` to :data:`SEARCHES` (a name or a record file taken is refused)."""
    if search.name in SEARCHES:
        raise ConfigError(f"a selection search named {search.name!r} exists already")
    taken = {s.files.record for s in SEARCHES.values()}
    if not search.files.record or search.files.record in taken:
        raise ConfigError(
            f"the search {search.name!r} needs a record file of its own (files.record), not "
            f"{search.files.record!r}"
        )
    SEARCHES[search.name] = search
    return search


def search_of(
    name: str | None = None, *, drop_only: bool = False, per_layer: bool = False,
    option: str = "search",
) -> Search:  # fmt: skip
    """The registered search ``name``, or the one ``drop_only`` / ``per_layer`` name
    (``None`` and neither: the greedy selection); contradictions are refused."""
    asked = [n for n, on in (("drop", drop_only), ("per_layer", per_layer)) if on]
    if name is not None:
        asked.append(name)
    if len(set(asked)) > 1:
        if set(asked) == {"drop", "per_layer"}:
            raise ConfigError(
                "--drop-only trains one round of whole-path drops; a per-layer selection "
                "(--per-layer) has no one-round form: leave out one of the two"
            )
        raise ConfigError(f"choose one search; got {', '.join(asked)}")
    name = asked[0] if asked else DEFAULT_SEARCH
    if name not in SEARCHES:
        raise ConfigError(f"{option} must be one of {', '.join(SEARCHES)}; got {name!r}")
    return SEARCHES[name]


def _holds(path: Path, record: dict) -> bool:
    """Whether ``path`` is a readable drops record equal to ``record``."""
    try:
        return path.is_file() and read_drops(path) == record
    except CheckpointError:
        return False


def control_first(
    finished: Iterable[tuple[int, tuple[dict, dict]]], labels: list[str], has_control: bool
) -> Iterator[tuple[str, dict, dict]]:
    """``(labels[index], row, end)`` of each finished candidate, those that finish before
    the control (``has_control``: it is recorded already) held back until it has come,
    since each row is judged against it, and then given in the candidates' order."""
    held: list[tuple[str, dict, dict]] = []
    for index, (row, end) in finished:
        held.append((labels[index], row, end))
        has_control = has_control or labels[index] == CONTROL
        if has_control:
            yield from sorted(held, key=lambda h: labels.index(h[0]))
            held = []


def greedy_selection(
    record: dict,
    paths: list[str],
    train_all: Callable[[list[Job]], Iterable[tuple[int, tuple[dict, dict]]]],
    files: SelectionFiles | None = None,
    kind: UnitKind = WHOLE_PATHS,
    criterion: Criterion | None = None,
) -> tuple[dict, dict | None]:
    """The rounds of :func:`select_paths` from ``record`` (:func:`new_record`, or an earlier
    one to resume) until it is finished; ``train_all(candidates)`` trains a round's
    candidates ``[(dropped, start), ...]`` and yields ``(index, (row, end))`` as each
    finishes (:meth:`SearchContext.train_all`; :func:`train_on`'s row and end state). With
    ``files`` the record, the round's best candidate and each winner are saved as each
    candidate finishes; without, nothing is written. The ``paths`` are units of ``kind``
    (:meth:`UnitKind.droppable`), and each round is decided by ``criterion`` (its
    :attr:`~Criterion.key`; default: the evidence). A round's rows are kept in the order
    of its candidates, the control first, and a tie goes to the earlier candidate, in
    whatever order they finish.

    Returns:
        The finished record and the selected network's ``{"model", "log_prior"}`` (None
        where no round ran)."""
    score = (criterion or criterion_of(None)).key
    was_finished = record["finished"]  # shown again, it is read and never written
    start = None
    if files is not None and any(r["winner"] is not None for r in record["rounds"]):
        start = read_selection_state(files.winner)

    def eligible(row: dict, rows: list[dict]) -> bool:
        """The control, or a candidate that has not collapsed (``rows[0]`` the control) and,
        where the candidates are replicated, whose gain over the control is decided
        (:func:`~ella.selection.replicates.gain_summary`)."""
        if row["dropped"] == CONTROL:
            return True
        if collapsed(row, rows[0], record["null"]):
            return False
        gain = gain_summary(row, rows[0], score)
        return gain is None or (gain["decided"] and gain["mean"] > 0)

    while not record["finished"]:
        rounds = record["rounds"]
        if not rounds or rounds[-1]["winner"] is not None:
            if not kind.droppable(record["kept"]):
                record["finished"] = True
                break
            rounds.append({"kept": record["kept"], "rows": [], "winner": None})
        this = rounds[-1]
        before = [p for p in paths if p not in this["kept"]]
        order = [CONTROL, *kind.droppable(this["kept"])]

        def rank(row: dict, order: list[str] = order) -> tuple[float, int]:
            """Better first: the higher score, then the earlier candidate."""
            return row[score], -order.index(row["dropped"])

        candidates = [r for r in this["rows"] if eligible(r, this["rows"])]
        best = max(candidates, key=rank, default=None)
        best_state = None
        if best is not None and files is not None and files.candidate.is_file():
            best_state = read_selection_state(files.candidate)
        if best is not None and (best_state is None or best_state["dropped"] != best["dropped"]):
            # the weights of the round's best row are lost (interrupted between them and
            # its row): the round starts again
            this["rows"], best, best_state = [], None, None
        done = {r["dropped"] for r in this["rows"]}
        todo = [key for key in order if key not in done]
        jobs = [(before + ([] if key == CONTROL else [key]), start) for key in todo]
        for key, row, end in control_first(train_all(jobs), todo, CONTROL in done):
            row = {"dropped": key, **row}
            if eligible(row, this["rows"] or [row]) and (best is None or rank(row) > rank(best)):
                best, best_state = row, {**end, "dropped": key, "kept": row["kept"]}
                if files is not None:
                    save_torch(best_state, files.candidate)  # before the row that names it
            this["rows"] = sorted([*this["rows"], row], key=lambda r: order.index(r["dropped"]))
            if files is not None:
                save_json(record, files.record)
        start = {k: best_state[k] for k in ("model", "log_prior")}
        this["winner"] = best["dropped"]
        record["kept"] = best["kept"]
        record["finished"] = best["dropped"] == CONTROL
        if files is not None:
            save_torch({**start, "kept": best["kept"]}, files.winner)
            save_json(record, files.record)
            files.candidate.unlink(missing_ok=True)
    if files is not None and not was_finished:
        save_json(record, files.record)
    return record, start
