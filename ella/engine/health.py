"""What a run's epoch rows say about its training: a collapse of the training accuracy.

A run can end far below the accuracy it once had without any error: with the learned
priors a long run can collapse when the precisions of instance-normalised paths run
away (and its best evidence can come after the collapse, so ``--report-state
best_evidence`` does not avoid it), and a MAP run at too large a learning rate can do
the same. The
final report then states it, so that the test accuracy it prints is not read as the
model's capacity.
"""

from __future__ import annotations

__all__ = ["COLLAPSE_FALL", "collapse_line", "new_collapse", "training_collapse"]

#: the fall of the training accuracy below its best so far that counts as a collapse
COLLAPSE_FALL = 0.2


def training_collapse(metrics: list[dict], fall: float = COLLAPSE_FALL) -> dict | None:
    """The largest fall of the training accuracy below its best so far, when it is at
    least ``fall``.

    Args:
        metrics: the run's epoch rows, in order, each with ``"epoch"`` and
            ``"train_accuracy"`` (a fraction); rows without it are skipped.
        fall: the smallest drop (a fraction, 0.2 = 20 points) that counts.

    Returns:
        None if the accuracy never fell by ``fall`` below an earlier epoch's, else
        ``{"best", "best_epoch", "lowest", "lowest_epoch", "final", "final_epoch"}``:
        the best accuracy before the largest drop, the lowest after it, and the last
        epoch's (a run may have recovered since).
    """
    if not 0 < fall <= 1:
        raise ValueError(f"fall must be in (0, 1], got {fall}")
    rows = [(row["epoch"], row["train_accuracy"]) for row in metrics if "train_accuracy" in row]
    worst, peak = None, None
    for epoch, accuracy in rows:
        if peak is None or accuracy > peak[1]:
            peak = (epoch, accuracy)
        drop = peak[1] - accuracy
        if drop >= fall and (worst is None or drop > worst[0]):
            worst = (drop, peak, (epoch, accuracy))
    if worst is None:
        return None
    _, (best_epoch, best), (lowest_epoch, lowest) = worst
    final_epoch, final = rows[-1]
    return {
        "best": best,
        "best_epoch": best_epoch,
        "lowest": lowest,
        "lowest_epoch": lowest_epoch,
        "final": final,
        "final_epoch": final_epoch,
    }


def collapse_line(collapse: dict) -> str:
    """One line of the report for a :func:`training_collapse`."""
    return (
        f"training collapsed: train accuracy {100 * collapse['best']:.1f}% at epoch "
        f"{collapse['best_epoch']}, {100 * collapse['lowest']:.1f}% at epoch "
        f"{collapse['lowest_epoch']}, {100 * collapse['final']:.1f}% at the end (epoch "
        f"{collapse['final_epoch']}). With learned priors, look for precisions that rise "
        "round after round (prior_precision in metrics.jsonl): they pull the weights away "
        "from a fit. With the zero-mean prior and instance normalisation a path's scale is "
        "free, so its precision and its shrinking weights feed each other: train fewer "
        "--epochs or with --norm none. In a MAP run, try a smaller --lr"
    )


def new_collapse(metrics: list[dict], fall: float = COLLAPSE_FALL) -> str | None:
    """The line to show as training goes on when the last epoch row is the first at which
    the training accuracy has fallen by ``fall`` (:func:`training_collapse`), else None:
    said once per run, and not again after a resume."""
    if not metrics or training_collapse(metrics[:-1], fall) is not None:
        return None
    collapse = training_collapse(metrics, fall)
    if collapse is None:
        return None
    return (
        f"epoch {metrics[-1]['epoch']}: the training accuracy fell from "
        f"{100 * collapse['best']:.1f}% (epoch {collapse['best_epoch']}) to "
        f"{100 * collapse['lowest']:.1f}%; the run goes on, and its report will say how it "
        "ended (ella.engine.health)"
    )
