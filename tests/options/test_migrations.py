"""ella.options.migrations: a configuration written by an earlier version reads as the run it was.

Each file in tests/old_configs/ is a configuration class's ``to_dict()`` as ella wrote it
into run directories the commit before an option was added (made from the history with
``git worktree``), so it lacks that option and every later one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ella.ensembles.config import EnsembleConfig
from ella.errors import ConfigError
from ella.options.migrations import (
    ABSENT_MEANS,
    ALWAYS_WRITTEN,
    absent_means,
    missing_keys,
    upgrade,
)
from ella.rundir import config_differences
from ella.train.config import TrainConfig
from ella.train.fit import FitConfig

OLD = Path(__file__).parents[1] / "old_configs"

#: per file: the class that wrote it and what its missing options meant then
CASES = {
    "train_first.json": (
        TrainConfig,
        {"augment": "none", "norm": "none", "head_init": "default", "downsample": "polyphase"},
    ),
    "train_before_augment.json": (TrainConfig, {"augment": "none"}),
    "train_before_subset.json": (TrainConfig, {"marglik_subset_size": None}),
    "train_before_norm.json": (TrainConfig, {"norm": "none"}),
    "train_before_prior_update.json": (TrainConfig, {"prior_update": "adam"}),
    "train_before_head_init.json": (TrainConfig, {"head_init": "default"}),
    "train_before_prior_step.json": (TrainConfig, {"prior_step": 1.0}),
    "train_before_downsample.json": (
        TrainConfig,
        {"downsample": "polyphase", "augment_shift": 4, "lr_scaling": "none"},
    ),
    "train_before_report_state.json": (TrainConfig, {"report_state": "best_evidence"}),
    "train_before_zero_init.json": (TrainConfig, {"zero_init": []}),
    "train_before_gconv_lr.json": (TrainConfig, {"gconv_lr": "same"}),
    "train_before_subset_control.json": (TrainConfig, {"subset_control": "none"}),
    "ensemble_before_model.json": (EnsembleConfig, {"model": "mixer"}),
    "fit_first.json": (
        FitConfig,
        {"prior_update": "adam", "marglik_subset_size": None, "subset_control": "none"},
    ),
    "fit_before_subset.json": (FitConfig, {"marglik_subset_size": None, "subset_control": "none"}),
}


def test_every_old_configuration_has_a_case():
    assert sorted(p.name for p in OLD.glob("*.json")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_old_configuration_reads_as_the_run_it_was(name):
    cls, meant = CASES[name]
    saved = json.loads((OLD / name).read_text())
    assert set(meant).isdisjoint(saved), "the case names options the file has"
    config = cls.from_dict(saved)
    read = config.to_dict()
    for option, value in meant.items():
        assert read[option] == value, f"{option} read as {read[option]!r}, meant {value!r}"
    assert all(read[k] == v for k, v in saved.items())  # what it has is kept
    # a checkpoint holding the same old configuration resumes with it
    assert config_differences(saved, config) == []
    # and against today's defaults it differs where they differ from what it meant
    today = cls().to_dict()
    differs = {k for k, v in meant.items() if today[k] != v and k in cls.run_fields()}
    assert differs <= set(config_differences(saved, cls()))


def test_a_derived_class_takes_its_bases_meanings_and_overrides_them():
    """ella train's table adds to the evidence rounds' (it replaced them once, so a run from
    before --marglik-subset-size read as a subset of 500 images)."""
    assert absent_means(TrainConfig)["marglik_subset_size"] is None
    assert absent_means(FitConfig) == ABSENT_MEANS["ScheduleConfig"]
    assert absent_means(EnsembleConfig) == {"model": "mixer"}
    assert upgrade({"norm": "instance"}, TrainConfig)["norm"] == "instance"  # saved wins


def test_every_meaning_is_an_option_of_its_class_and_differs_from_its_default():
    classes = {"ScheduleConfig": FitConfig, "TrainConfig": TrainConfig}
    classes["EnsembleConfig"] = EnsembleConfig
    assert set(ABSENT_MEANS) == set(classes)
    for name, table in ABSENT_MEANS.items():
        defaults = classes[name]().to_dict()
        for option, value in table.items():
            assert option in defaults, f"{name}: {option} is not an option"
            assert defaults[option] != value, f"{name}: {option} means its default; drop it"


#: per class, the file of its first version's configuration
FIRST = {
    TrainConfig: "train_first.json",
    FitConfig: "fit_first.json",
    EnsembleConfig: "ensemble_before_model.json",  # ella ensemble's options from its first commit
}


@pytest.mark.parametrize("cls", list(FIRST), ids=lambda c: c.__name__)
def test_a_configuration_without_a_key_every_version_wrote_is_refused(cls):
    first = json.loads((OLD / FIRST[cls]).read_text())
    assert ALWAYS_WRITTEN[cls.__name__] == set(first)
    assert missing_keys(first, cls) == []
    today = cls().to_dict()
    for key in sorted(first)[:: max(1, len(first) // 6)]:  # a spread of them, each alone
        cut = {k: v for k, v in today.items() if k != key}
        assert missing_keys(cut, cls) == [key]
        with pytest.raises(ConfigError, match=rf"lacks \['{key}'\], which every version"):
            cls.from_dict(cut)
