"""Every registered search under every registered criterion (the case matrix's selection
axes, :data:`tests.cases.SEARCHES` x :data:`tests.cases.SELECTION_CRITERIA`) runs through
``ella select`` on a fake trainer: it writes its record under its own file name, names the
criterion there, and shown again trains nothing."""

import itertools
import json

import pytest

from ella import selection
from ella.cli import main
from tests.cases import SEARCHES, SELECTION_CRITERIA
from tests.selection.fakes import NULL, fake_train_on, write_config

#: the prior groups of the fake run's two relaxed layers (a per-layer search's units)
GROUPS = ["layer1.conv", "layer1.gconv", "layer2.conv", "layer2.gconv"]


def evidence_of_every_drop(units: list[str]) -> dict[tuple[str, ...], float]:
    """A fake log evidence for every set of ``units`` at zero: each unit dropped gains
    its own amount, the last unit loses."""
    gains = {u: 5.0 * (i + 1) if i < len(units) - 1 else -50.0 for i, u in enumerate(units)}
    return {
        tuple(sorted(d)): -100.0 + sum(gains[u] for u in d)
        for n in range(len(units) + 1)
        for d in itertools.combinations(units, n)
    }


@pytest.mark.parametrize("criterion", SELECTION_CRITERIA)
@pytest.mark.parametrize("search", SEARCHES)
def test_every_search_runs_under_every_criterion(tmp_path, monkeypatch, capsys, search, criterion):
    held_out = 16 if selection.CRITERIA[criterion].needs_validation else 0
    run = write_config(tmp_path / "run", paths=["conv", "gconv"], validation_size=held_out)
    monkeypatch.setattr(selection, "run_groups", lambda run_dir, data_dir=None: GROUPS)
    monkeypatch.setattr(selection, "null_model", lambda run_dir, data_dir=None: NULL)
    units = GROUPS if selection.SEARCHES[search].kind.per_layer else ["conv", "gconv"]
    calls = []
    evidence = evidence_of_every_drop(units)
    monkeypatch.setattr(selection, "train_on", fake_train_on(calls, evidence=evidence))
    ask = ["select", str(run), "--search", search, "--criterion", criterion, "--epochs", "2"]
    assert main([*ask, "--no-progress"]) == 0
    out = capsys.readouterr().out
    files = selection.SEARCHES[search].files
    assert f"written: {run / files.record}" in out
    record = json.loads((run / files.record).read_text())
    rows = record["rows"] if "rows" in record else record["rounds"][0]["rows"]
    key = selection.CRITERIA[criterion].key
    assert [row["dropped"] for row in rows] == ["none", *units]
    assert all(row[key] == row["log_evidence"] for row in rows)  # the fake's field
    if criterion != selection.DEFAULT_CRITERION:
        assert record["criterion"] == criterion  # the default's records name none
    trained = len(calls)
    assert trained >= len(units) + 1
    assert main([*ask, "--no-progress"]) == 0  # shown again, from its record
    assert len(calls) == trained
    assert f"(--criterion {criterion})" in capsys.readouterr().out or search == "drop"
