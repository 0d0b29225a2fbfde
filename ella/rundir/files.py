"""The files of a run directory, by name, and which of them are ella's outputs."""

from __future__ import annotations

CONFIG = "config.json"
CHECKPOINT = "checkpoint.pt"
METRICS = "metrics.jsonl"
RESULTS = "results.json"
#: what to do about a results.json that cannot be read: the checkpoint writes it again
RESULTS_FIX = "move it away and run ella train --out RUN --resume to write it again"
#: the lock file of a run directory (:func:`run_lock`); present only while a process holds it
LOCK = ".ella.lock"
#: what ``ella report RUN --path-outputs`` writes into the run directory
PATH_OUTPUTS = "path_outputs.json"
#: what ``ella select RUN --drop-only`` writes into the run directory
PATH_DROPS = "path_drops.json"
#: what ``ella select RUN`` writes: its rounds, and the selected network's
#: weights and log prior precisions (the winner of its last finished round)
PATH_SELECTION = "path_selection.json"
PATH_SELECTION_STATE = "path_selection.pt"
#: the best candidate so far of a selection round in progress (removed when it finishes)
PATH_SELECTION_CANDIDATE = "path_selection_candidate.pt"
#: what ``ella select RUN --per-layer`` writes: its rounds, the selected network, and the
#: best candidate of a round in progress (as the three files above)
PATH_SELECTION_PER_LAYER = "path_selection_per_layer.json"
PATH_SELECTION_PER_LAYER_STATE = "path_selection_per_layer.pt"
PATH_SELECTION_PER_LAYER_CANDIDATE = "path_selection_per_layer_candidate.pt"
#: the figure of a finished per-layer selection (``ella select --per-layer``, ``ella report``)
PATH_SELECTION_PER_LAYER_FIGURE = "path_selection_per_layer.png"
#: ``ella select``: epochs of training on per candidate network
SELECT_EPOCHS = 20
#: ``ella export``'s file: the network without the paths its priors switched off
EXPORTED = "exported.pt"
#: ``ella export``: a path is off below this fraction of its layer's largest prior variance
EXPORT_THRESHOLD = 0.01
#: outputs a run, ``ella report``, ``ella select`` and ``ella export`` write besides
#: config.json (removed by --overwrite); globs. A file not matched here counts as the
#: user's, and --overwrite refuses the folder.
RUN_OUTPUTS = (
    CHECKPOINT,
    METRICS,
    RESULTS,
    PATH_OUTPUTS,
    PATH_DROPS,
    PATH_SELECTION,
    PATH_SELECTION_STATE,
    PATH_SELECTION_CANDIDATE,
    PATH_SELECTION_PER_LAYER,
    PATH_SELECTION_PER_LAYER_STATE,
    PATH_SELECTION_PER_LAYER_CANDIDATE,
    EXPORTED,
    "*.png",
    "symmetry_*.json",
    "path_*_replicates.json",  # a selection's replicates at other seeds (ella select --seeds)
)
