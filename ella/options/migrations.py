"""What a configuration written by an earlier version of ella means today.

A run directory keeps the configuration its run was made with (``config.json``, and a
copy in every checkpoint). An option added to ella later is absent from it. Where ella
did something other than today's default before the option existed, the absent option
means that older behaviour: a run made then must build the same network, resume with
the same recipe and compare equal to its own checkpoint. :data:`ABSENT_MEANS` holds
those meanings, one table per configuration class, and :func:`upgrade` fills them into
a saved configuration before it is read (:meth:`ella.options.Config.from_dict`,
:func:`ella.rundir.config_differences`). An absent option not listed means its default.

Options are only ever added, never renamed or removed, so an absent key is the only
difference an older configuration can have. The options of a class's first version were
written by every version (:data:`ALWAYS_WRITTEN`): a configuration without one of them was
cut or edited, and :func:`missing_keys` names them so that it is refused, not read with
defaults that would rebuild another run.
"""

from __future__ import annotations

__all__ = ["ABSENT_MEANS", "ALWAYS_WRITTEN", "absent_means", "missing_keys", "upgrade"]

#: per configuration class, by name: option -> what ella did before the option existed.
#: A class also takes the tables of the classes it derives from (:func:`absent_means`).
ABSENT_MEANS: dict[str, dict[str, object]] = {
    # the evidence rounds of ella.fit (and of ella train before they moved here)
    "ScheduleConfig": {
        "marglik_frequency": 3,
        "prior_update": "adam",
        "prior_step": 1.0,
        "ggn": "exact",
        "marglik_subset_size": None,  # the whole training set every round
        "subset_control": "none",
    },
    "TrainConfig": {
        "norm": "none",
        "head_init": "default",
        "augment": "none",
        "augment_shift": 4,
        "downsample": "polyphase",
        "report_state": "best_evidence",
        "lr_scaling": "none",
        "zero_init": [],
        "gconv_lr": "same",
    },
    "EnsembleConfig": {
        "model": "mixer",  # members were always ella's mixer before --model
    },
}

#: per configuration class, by name: the options of its first version, which every version
#: of ella wrote (the keys of tests/old_configs' first configurations)
ALWAYS_WRITTEN: dict[str, frozenset[str]] = {
    "TrainConfig": frozenset(
        [
            "backend",
            "batch_size",
            "data_dir",
            "dataset",
            "device",
            "epochs",
            "fc_mode",
            "gconv_mode",
            "ggn",
            "group",
            "hessian",
            "learn_priors",
            "lr",
            "lr_hyp",
            "lr_min",
            "marglik_batch_size",
            "marglik_frequency",
            "momentum",
            "n_epochs_burnin",
            "n_hypersteps",
            "optimizer",
            "paths",
            "prior_precision",
            "prior_structure",
            "progress",
            "seed",
            "test_size",
            "train_size",
            "width",
        ]
    ),
    "FitConfig": frozenset(
        [
            "backend",
            "epochs",
            "ggn",
            "hessian",
            "learn_priors",
            "likelihood",
            "lr",
            "lr_hyp",
            "lr_min",
            "marglik_frequency",
            "momentum",
            "n_epochs_burnin",
            "n_hypersteps",
            "optimizer",
            "prior_precision",
            "prior_structure",
            "progress",
            "seed",
            "sigma_noise",
        ]
    ),
    "EnsembleConfig": frozenset(
        [
            "alpha",
            "augment",
            "augment_group",
            "batch_size",
            "corruption_severities",
            "data_dir",
            "dataset",
            "device",
            "epochs",
            "group",
            "init_seed",
            "lengthscales",
            "lr",
            "lr_min",
            "members",
            "method",
            "momentum",
            "optimizer",
            "osp_group",
            "paths",
            "progress",
            "repulsion_scale",
            "seed",
            "test_size",
            "train_size",
            "vectorize",
            "weight_decay",
            "width",
        ]
    ),
}


def absent_means(cls: type) -> dict[str, object]:
    """The meaning of each absent option of configuration class ``cls``: the tables of
    :data:`ABSENT_MEANS` along its bases, a derived class's entries over its base's."""
    merged: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        merged.update(ABSENT_MEANS.get(klass.__name__, {}))
    return merged


def upgrade(saved: dict, cls: type) -> dict:
    """``saved`` (a configuration of ``cls`` as a dict) with every option it lacks that has
    an older meaning (:func:`absent_means`) filled in; the keys it has are kept as saved."""
    return {**absent_means(cls), **saved}


def missing_keys(saved: dict, cls: type) -> list[str]:
    """The options of ``cls``'s first version (:data:`ALWAYS_WRITTEN`) that ``saved`` lacks,
    sorted: a configuration with any is not one that ella wrote."""
    return sorted(ALWAYS_WRITTEN.get(cls.__name__, frozenset()) - set(saved))
