"""Fakes of ``ella select``'s work: a run directory with only its configuration, and a
:func:`ella.selection.train_on` that trains nothing and records what it was asked."""

from __future__ import annotations

import json

import torch

from ella import selection
from ella.train import TrainConfig
from tests.cases import PAPER_PATHS


def write_config(directory, finished=True, **values):
    """A run directory with a config.json of ``values`` over a learned mixer of the paper's
    paths (FC+CONV+GCONV) and, where ``finished``, a results.json: enough for the checks
    (candidates are fakes)."""
    directory.mkdir()
    config = TrainConfig(paths=PAPER_PATHS).to_dict()
    (directory / "config.json").write_text(json.dumps({**config, **values}))
    if finished:
        (directory / "results.json").write_text("{}")
    return directory


#: the class-frequency model of the fake runs (they have no data)
NULL = {"log_likelihood": -1000.0, "log_evidence": -1010.0}

#: the log evidence a fake candidate gets, by the paths it has at zero
SELECTION_EVIDENCE = {
    (): -100.0,
    ("fc",): -90.0,
    ("conv",): -95.0,
    ("gconv",): -120.0,
    ("conv", "fc"): -80.0,
    ("fc", "gconv"): -110.0,
}


def fake_train_on(calls, interrupt_at=None, evidence=SELECTION_EVIDENCE, likelihood=None):
    """A :func:`ella.selection.train_on` that records ``(dropped, start weight)`` per call and
    returns the weight it ends with, a number unique to the call; the training log
    likelihood is ``likelihood[dropped]``, else -10; a ``criterion``'s field is the
    evidence."""

    def train_on(
        run_dir, dropped, epochs, data_dir=None, progress=False, start=None, units=None,
        criterion=None, seed=None,
    ):  # fmt: skip
        if interrupt_at is not None and len(calls) == interrupt_at:
            raise KeyboardInterrupt
        weight = None if start is None else float(start["model"]["w"])
        calls.append((tuple(sorted(dropped)), weight))
        kept = [p for p in units or selection.relaxed_paths(run_dir) if p not in dropped]
        row = {
            "kept": kept,
            "test_accuracy": 0.5,
            "test_nll": 1.0,
            "log_evidence": evidence[tuple(sorted(dropped))],
            "log_likelihood": (likelihood or {}).get(tuple(sorted(dropped)), -10.0),
            "shares": {p: 100.0 / len(kept) for p in kept},
        }
        if criterion is not None:  # the field it decides by, ordered as the evidence
            row.setdefault(selection.CRITERIA[criterion].key, row["log_evidence"])
        end = {"model": {"w": torch.tensor(float(len(calls)))}, "log_prior": torch.zeros(3)}
        return row, end

    return train_on
