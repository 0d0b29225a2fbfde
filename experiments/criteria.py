"""How sure is each answer? The selection criterion's noise against a held-out likelihood.

Every answer of ``ella select`` is one training per candidate scored by its KFAC Laplace
evidence. This script measures, on the same trainings, how well each of eight criteria
separates a data set with rotation symmetry from one without, and where the evidence's
noise comes from. Fixed before the runs (issue "How sure is each answer"):

Trainings. ``ella train``'s defaults but these: the default mixer with one path (CONV
only or GCONV only), MNIST and rotated MNIST, ``N`` training images and a validation split
of ``V = N / 5`` images held out after them (``--train-size N+V --validation-size V``), so
every criterion sees the same weights; 1,000 images at seeds 0-4 (decision i; 5,000 at
seeds 0-2 with ``--sizes 5000``). For criterion f each candidate is trained once more on
the first 80% of its ``N`` images (``--train-size N --validation-size N/5``).

Criteria (higher is better; each a log probability in nats):

- ``a_evidence``: today's, the final round's KFAC evidence at the learned precisions
  (the recipe's estimator: stratified GGN on a 500-image subset);
- ``b_evidence_optimum``: the exact-GGN KFAC evidence of all ``N`` images at the
  precisions that maximise it at the final weights (the closed-form optimum,
  :meth:`ella.marglik.LaplaceEvidence.optimal_log_prior`);
- ``c_evidence_last3``: the mean of the last ``K_LAST = 3`` rounds' evidence;
- ``d_mode_corrected``: not computed in the mixer (why: the record);
- ``e_laplace_predictive``: the linearised (GLM) Laplace predictive log likelihood of the
  ``V`` validation images, the exact-GGN KFAC posterior of all ``N`` images at the
  learned precisions, ``S = 64`` posterior draws pushed through the network's Jacobian
  (forward-mode products);
- ``f_conditional``: the conditional marginal likelihood (Lotfi et al., ICML 2022) from
  the training images alone: ``e`` of the second training (first 80%) on the other 20%;
- ``g_validation``: the plain validation log likelihood of the ``V`` images;
- ``h_training_speed``: minus the sum over epochs of the training NLL, times ``N``
  (training speed as an estimate of the marginal likelihood: Lyle et al., 2020).

Where the noise is (measure 1): at each network's final weights the evidence is refitted
with the exact GGN on all ``N`` images, and ``R = 5`` times with the recipe's estimator
(stratified GGN on fresh class-balanced 500-image subsets), each at the learned
precisions; its three terms (``log_likelihood``, ``log_det``, ``scatter``) are kept, as
each training logs them at every round (``metrics.jsonl``: ``evidence_terms``).

Measures, per criterion ``s``. Per seed and data set the gap ``s(GCONV) - s(CONV)``; the
contrast rotated-minus-upright of the gaps, its mean over seeds in standard errors
(``t``); the share of seeds at which the gap points the data's way on both data sets
(CONV ahead on upright digits, GCONV on rotated ones); the seed-to-seed standard
deviation of one architecture's score (mean over the four architectures); the cost of
computing it in training epochs.

Decision (ii), ``--part drop``: the default mixer (FC+CONV+GCONV) at 3,000 training images
and 200 held out, seeds 0-2, then ``ella select RUN --drop-only`` (the control and each
path dropped from every layer, 20 epochs each from the run) with a criterion registered
by this script (:data:`DROP_CRITERION`) that scores every candidate by ``a`` (the
candidate's exact-GGN evidence of the tensors it keeps, at its optimal precisions: what
``ella select`` decides by, so here ``a`` and ``b`` are one), ``g`` and ``h`` (the sum of
its training NLL over its 20 epochs of training on, times ``N``); with ``--predictive``
also ``e`` (its GLM predictive of the 200 images by 32 draws, dropped tensors conditioned
on zero) and ``f`` (the same on a second run of the first 80% of the 3,000). ``c`` does
not exist for candidates trained on under fixed precisions. The gap of a seed and data set
is ``gain(drop CONV) - gain(drop GCONV)`` (each against the control), which follows the
data where it is negative on upright and positive on rotated digits.

Pass rule: a criterion that uses only the training images (a, b, c, f, h) passes where
its ``t`` reaches at least 70% of ``g_validation``'s in decision (i) and in decision
(ii). Decisions are made on validation splits; test figures are reported.

    python -m experiments.criteria --work-dir runs/criteria --data-dir ../shared/data
    python -m experiments.criteria ... --sizes 5000
    python -m experiments.criteria ... --part drop       # about 15 min per data set and seed
    python -m experiments.criteria --render-only

Each training and each scoring resumes from ``--work-dir``; the results file is written
after every network, so a stopped call loses at most the network in training. Results:
``experiments/results/criteria.{json,md}``; the record: docs/research/0044.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from ella.io import load_torch, save_json
from ella.marglik import LaplaceEvidence, glm_log_likelihood
from ella.rundir import CHECKPOINT, CONFIG, RESULTS, read_json
from ella.train import TrainConfig, train
from ella.train.loop import Trainer
from studies.results import EXPERIMENT_RESULTS, environment, write_results
from studies.runner import default_data_dir

__all__ = ["CRITERIA", "contrast", "drop_contrast", "main", "scores"]

NAME = "criteria"
RECORD = "docs/research/0044-how-sure-each-answer-is.md"
DATASETS = ("mnist", "rotated_mnist")
PATHS = ("conv", "gconv")
#: training images -> seeds
SEEDS = {1000: (0, 1, 2, 3, 4), 5000: (0, 1, 2)}
#: training images -> test images
TEST_SIZES = {1000: 1000, 5000: 2000}
K_LAST = 3  # rounds averaged by criterion c
N_REFITS = 5  # refits of the recipe's estimator at the final weights
N_DRAWS = 64  # posterior draws of the GLM predictive
#: the criteria, in the order of the tables; the ones from the training images alone
CRITERIA = (
    "a_evidence", "b_evidence_optimum", "c_evidence_last3", "e_laplace_predictive",
    "f_conditional", "g_validation", "h_training_speed",
)  # fmt: skip
TRAINING_ONLY = ("a_evidence", "b_evidence_optimum", "c_evidence_last3", "f_conditional",
                 "h_training_speed")  # fmt: skip
SCORES = "scores.json"


def run_dir(work: Path, dataset: str, size: int, seed: int, path: str, conditional: bool):
    part = "cml" if conditional else "main"
    return work / f"{dataset}_{size}_{path}_seed{seed}_{part}"


def trained(work: Path, dataset: str, size: int, seed: int, path: str, conditional: bool,
            data_dir) -> Path:  # fmt: skip
    """The run directory, trained unless finished: ``size`` training images and ``size/5``
    held out after them, or (``conditional``) the first 80% of those ``size`` and the
    other 20% held out."""
    out = run_dir(work, dataset, size, seed, path, conditional)
    held = size // 5
    if not (out / RESULTS).is_file():
        config = TrainConfig(
            dataset=dataset, data_dir=data_dir,
            train_size=size if conditional else size + held, validation_size=held,
            test_size=TEST_SIZES[size], paths=(path,), seed=seed, progress=False,
        )  # fmt: skip
        train(config, out, resume=(out / CHECKPOINT).is_file() or (out / CONFIG).is_file())
    return out


def restored(out: Path, data_dir) -> Trainer:
    """The run's trainer with its final weights, precisions and traces."""
    config = TrainConfig.from_dict(read_json(out / CONFIG, "run's configuration"))
    config = dataclasses.replace(config, data_dir=str(data_dir), progress=False)
    ckpt = load_torch(out / CHECKPOINT)
    trainer = Trainer(config, out)
    trainer.model.load_state_dict(ckpt["model"])
    with torch.no_grad():
        trainer.log_prior.copy_(ckpt["log_prior"])
    if ckpt.get("output_trace") is not None:
        trainer.output_trace = ckpt["output_trace"].to(trainer.output_trace)
    trainer.model.eval()
    return trainer


def _terms(evidence: LaplaceEvidence, log_prior: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        return {k: float(v) for k, v in evidence.terms(log_prior).items()}


def exact_evidence(trainer: Trainer) -> LaplaceEvidence:
    """The exact-GGN Kronecker evidence of all the run's training images."""
    evidence = LaplaceEvidence(trainer.net, trainer.priors.prior, ggn="exact")
    evidence.fit(torch.utils.data.DataLoader(trainer.data.train, batch_size=250))
    return evidence


def scores(out: Path, data_dir, conditional: bool = False) -> dict:
    """Every criterion of one run that needs its weights, kept in ``out/scores.json``."""
    done = out / SCORES
    if done.is_file():
        return read_json(done, "criteria's scores")
    results = read_json(out / RESULTS, "run's results")
    trainer = restored(out, data_dir)
    n, log_prior = trainer.n_train, trainer.log_prior.detach()
    epoch_s = results["train_time_s"] / results["epochs"]
    x_val, y_val = trainer.validation.tensors
    row: dict = {"seconds": {}}
    began = time.perf_counter()
    exact = exact_evidence(trainer)
    row["seconds"]["exact_fit"] = time.perf_counter() - began
    row["exact_terms"] = _terms(exact, log_prior)
    with torch.no_grad():
        row["exact_evidence"] = float(exact.log_marginal_likelihood(log_prior))
        optimum = exact.optimal_log_prior()
        row["b_evidence_optimum"] = float(exact.log_marginal_likelihood(optimum))
    row["optimum_log_prior"] = optimum.tolist()
    row["learned_log_prior"] = log_prior.tolist()
    began = time.perf_counter()
    row["glm"] = glm_log_likelihood(exact, log_prior, x_val, y_val, draws=N_DRAWS)
    row["seconds"]["glm"] = time.perf_counter() - began
    if not conditional:
        refits = []
        began = time.perf_counter()
        for r in range(N_REFITS):
            torch.manual_seed(10_000 + r)  # the stratified GGN's draws
            evidence = trainer.priors.fit_round(
                trainer.data.train, 10_000 + r, labels=trainer.labels,
                traces=trainer.output_trace,
            )  # fmt: skip
            terms = _terms(evidence, log_prior)
            refits.append({**terms, "log_evidence": sum(terms.values())})
        row["refits"] = refits
        row["seconds"]["refit"] = (time.perf_counter() - began) / N_REFITS
    row["seconds"] = {k: v / epoch_s for k, v in row["seconds"].items()}  # in epochs
    row["epoch_seconds"] = epoch_s
    row["n_train"], row["n_validation"] = n, len(y_val)
    save_json(row, done)
    return row


def network_row(work: Path, dataset: str, size: int, seed: int, path: str, data_dir) -> dict:
    """Both trainings of one candidate, trained and scored: every criterion's value."""
    main_dir = trained(work, dataset, size, seed, path, False, data_dir)
    main = scores(main_dir, data_dir)
    results = read_json(main_dir / RESULTS, "run's results")
    metrics = [r for r in (read_json_lines(main_dir / "metrics.jsonl")) if "train_nll" in r]
    cml_dir = trained(work, dataset, size, seed, path, True, data_dir)
    cml = scores(cml_dir, data_dir, conditional=True)
    cml_results = read_json(cml_dir / RESULTS, "run's results")
    n, v = main["n_train"], main["n_validation"]
    rounds = results["log_marglik"]
    return {
        "a_evidence": rounds[-1],
        "b_evidence_optimum": main["b_evidence_optimum"],
        "c_evidence_last3": statistics.fmean(rounds[-K_LAST:]),
        "e_laplace_predictive": main["glm"],
        "f_conditional": cml["glm"],
        "g_validation": -results["validation_nll"] * v,
        "h_training_speed": -n * sum(r["train_nll"] for r in metrics),
        "exact_evidence": main["exact_evidence"],
        "exact_terms": main["exact_terms"],
        "refits": main["refits"],
        "round_terms": [r["evidence_terms"] for r in metrics if "evidence_terms" in r],
        "test_accuracy": results["test_accuracy"],
        "test_nll": results["test_nll"],
        "validation_accuracy": results["validation_accuracy"],
        "cost_epochs": {
            "a_evidence": 0.0,
            "c_evidence_last3": 0.0,
            "g_validation": 0.0,
            "h_training_speed": 0.0,
            "b_evidence_optimum": main["seconds"]["exact_fit"],
            "e_laplace_predictive": main["seconds"]["exact_fit"] + main["seconds"]["glm"],
            "f_conditional": results["epochs"]
            + cml["seconds"]["exact_fit"]
            + cml["seconds"]["glm"],
        },  # fmt: skip
        "refit_epochs": main["seconds"]["refit"],
        "train_seconds": results["train_time_s"] + cml_results["train_time_s"],
        # what holding out a fifth of the training images costs the network
        "cml_test_accuracy": cml_results["test_accuracy"],
    }


def read_json_lines(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else math.nan
    return mean, se


def contrast(rows: list[dict], size: int, criterion: str) -> dict | None:
    """The rotated-minus-upright contrast of ``s(GCONV) - s(CONV)`` over the seeds with all
    four networks measured: mean, standard error, ``t``, the seeds pointing the data's way
    on both data sets, and the seed-to-seed spread of one architecture's score."""
    mine = {(r["dataset"], r["seed"], r["path"]): r for r in rows if r["train_size"] == size}
    seeds = sorted({s for d, s, p in mine if all((d2, s, p2) in mine for d2 in DATASETS
                                                  for p2 in PATHS)})  # fmt: skip
    if len(seeds) < 2:
        return None

    def gap(dataset: str, seed: int) -> float:
        return mine[dataset, seed, "gconv"][criterion] - mine[dataset, seed, "conv"][criterion]

    contrasts = [gap("rotated_mnist", s) - gap("mnist", s) for s in seeds]
    both = sum(gap("mnist", s) < 0 < gap("rotated_mnist", s) for s in seeds)
    mean, se = _mean_se(contrasts)
    spread = statistics.fmean(
        statistics.stdev([mine[d, s, p][criterion] for s in seeds]) for d in DATASETS for p in PATHS
    )
    cost = statistics.fmean(mine[k]["cost_epochs"][criterion] for k in mine)
    return {
        "seeds": seeds, "contrasts": contrasts, "mean": mean, "se": se, "t": mean / se,
        "both_ways": both, "spread": spread, "cost_epochs": cost,
    }  # fmt: skip


def agreement(rows: list[dict], size: int, criterion: str) -> list[int]:
    """``[agreeing, pairs]``: of the (data set, seed) pairs with both networks measured, how
    many ``criterion`` picks the same one of CONV-only and GCONV-only as the validation
    likelihood."""
    mine = {(r["dataset"], r["seed"], r["path"]): r for r in rows if r["train_size"] == size}
    pairs = sorted({(d, s) for d, s, _ in mine if all((d, s, p) in mine for p in PATHS)})

    def gconv_ahead(d: str, s: int, c: str) -> bool:
        return mine[d, s, "gconv"][c] > mine[d, s, "conv"][c]

    same = sum(gconv_ahead(d, s, criterion) == gconv_ahead(d, s, "g_validation") for d, s in pairs)
    return [same, len(pairs)]


def analysis(rows: list[dict]) -> dict:
    found: dict = {}
    for size in SEEDS:
        table = {c: contrast(rows, size, c) for c in CRITERIA}
        table = {c: v for c, v in table.items() if v is not None}
        if not table:
            continue
        g = table["g_validation"]["t"]
        for c, v in table.items():
            v["share_of_validation_t"] = v["t"] / g
            v["passes_i"] = c in TRAINING_ONLY and v["t"] >= 0.7 * g
            v["agrees_with_validation"] = agreement(rows, size, c)
        found[str(size)] = table
    return found


def noise(rows: list[dict]) -> dict:
    """Where the evidence's noise is: per size, the seed-to-seed spread of each term of the
    exact evidence against the refits' spread at fixed weights (means over the networks)."""
    found = {}
    for size in SEEDS:
        mine = [r for r in rows if r["train_size"] == size]
        groups: dict = {}
        for r in mine:
            groups.setdefault((r["dataset"], r["path"]), []).append(r)
        groups = {k: v for k, v in groups.items() if len(v) > 1}
        if not groups:
            continue
        terms = ("log_likelihood", "log_det", "scatter")
        over_seeds = {
            t: statistics.fmean(statistics.stdev(r["exact_terms"][t] for r in v)
                                for v in groups.values()) for t in terms
        }  # fmt: skip
        over_seeds["total"] = statistics.fmean(
            statistics.stdev(r["exact_evidence"] for r in v) for v in groups.values()
        )
        over_seeds["a_evidence"] = statistics.fmean(
            statistics.stdev(r["a_evidence"] for r in v) for v in groups.values()
        )
        refit = {
            t: statistics.fmean(statistics.stdev(f[t] for f in r["refits"]) for r in mine)
            for t in (*terms, "log_evidence")
        }
        bias = statistics.fmean(
            statistics.fmean(f["log_evidence"] for f in r["refits"]) - r["exact_evidence"]
            for r in mine
        )
        found[str(size)] = {"seed_sd": over_seeds, "refit_sd": refit, "refit_minus_exact": bias}
    return found


#: decision (ii): training images, held-out images, seeds
DROP_SIZE, DROP_HELD, DROP_SEEDS = 3000, 200, (0, 1, 2)
#: posterior draws of decision (ii)'s predictive (a forward-mode pass of the mixer each)
DROP_DRAWS = 32
DROP_CRITERIA = ("a_evidence", "g_validation", "h_training_speed")
#: with ``--predictive``
DROP_PREDICTIVE = ("e_laplace_predictive", "f_conditional")
DROP_TRAINING_ONLY = ("a_evidence", "f_conditional", "h_training_speed")


def _score_candidate(candidate, predictive: bool = False) -> dict[str, float]:
    """Every criterion of decision (ii) for one candidate of ``ella select --drop-only``."""
    x, y = candidate.validation.tensors
    with torch.no_grad():
        fit = -float(F.cross_entropy(candidate.net.eval()(x), y, reduction="sum"))
    found = {
        "log_evidence": candidate.log_evidence,
        "validation_log_likelihood": fit,
        "training_speed": -len(candidate.train_data) * sum(candidate.train_nll),
    }
    if predictive:
        found["glm_validation"] = glm_log_likelihood(
            candidate.evidence, candidate.optimum, x, y, draws=DROP_DRAWS,
            dropped=candidate.dropped,
        )  # fmt: skip
    return found


#: the criteria decision (ii)'s candidates are scored by (both decide as the evidence does)
DROP_CRITERION, DROP_CRITERION_PREDICTIVE = "criteria_0044", "criteria_0044_predictive"


def _register() -> None:
    from ella.selection import CRITERIA, Criterion, register_criterion

    if DROP_CRITERION not in CRITERIA:
        register_criterion(
            Criterion(DROP_CRITERION, "log_evidence", "log evidence", _score_candidate, True)
        )
        register_criterion(
            Criterion(DROP_CRITERION_PREDICTIVE, "log_evidence", "log evidence",
                      lambda c: _score_candidate(c, predictive=True), True)
        )  # fmt: skip


def dropped_runs(work: Path, dataset: str, seed: int, conditional: bool, predictive: bool,
                 data_dir) -> dict:  # fmt: skip
    """One run of the default mixer and its drop-only selection under the experiment's
    criterion: ``{dropped: row}``."""
    from ella.selection import run_search

    _register()
    out = work / f"drop_{dataset}_{DROP_SIZE}_seed{seed}_{'cml' if conditional else 'main'}"
    if not (out / RESULTS).is_file():
        size = DROP_SIZE if conditional else DROP_SIZE + DROP_HELD
        config = TrainConfig(
            dataset=dataset, data_dir=data_dir, train_size=size, validation_size=DROP_HELD,
            test_size=1000, seed=seed, progress=False,
        )  # fmt: skip
        train(config, out, resume=(out / CHECKPOINT).is_file() or (out / CONFIG).is_file())
    criterion = DROP_CRITERION_PREDICTIVE if predictive else DROP_CRITERION
    record = run_search(out, "drop", criterion=criterion, data_dir=data_dir, progress=False)
    return {row["dropped"]: row for row in record["rows"]}


def drop_row(work: Path, dataset: str, seed: int, data_dir, predictive: bool = False) -> dict:
    """Decision (ii) for one data set and seed: each candidate's criteria."""
    main_rows = dropped_runs(work, dataset, seed, False, predictive, data_dir)
    cml_rows = dropped_runs(work, dataset, seed, True, True, data_dir) if predictive else {}
    candidates = {}
    for dropped, row in main_rows.items():
        candidates[dropped] = {
            "a_evidence": row["log_evidence"],
            "g_validation": row["validation_log_likelihood"],
            "h_training_speed": row["training_speed"],
            "test_accuracy": row["test_accuracy"],
            "seconds": row["seconds"],
        }
        if predictive:
            candidates[dropped]["e_laplace_predictive"] = row["glm_validation"]
            candidates[dropped]["f_conditional"] = cml_rows[dropped]["glm_validation"]
    return {"dataset": dataset, "seed": seed, "train_size": DROP_SIZE, "candidates": candidates}


def drop_contrast(rows: list[dict], criterion: str) -> dict | None:
    """Decision (ii)'s contrast over the seeds with both data sets measured: per seed the
    rotated-minus-upright difference of ``gain(drop CONV) - gain(drop GCONV)``."""
    mine = {(r["dataset"], r["seed"]): r["candidates"] for r in rows}
    seeds = sorted({s for _, s in mine if all((d, s) in mine for d in DATASETS)})
    if len(seeds) < 2:
        return None

    def gap(dataset: str, seed: int) -> float:
        c = mine[dataset, seed]
        return c["conv"][criterion] - c["gconv"][criterion]  # the control cancels

    contrasts = [gap("rotated_mnist", s) - gap("mnist", s) for s in seeds]
    mean, se = _mean_se(contrasts)
    both = sum(gap("mnist", s) < 0 < gap("rotated_mnist", s) for s in seeds)
    return {"seeds": seeds, "contrasts": contrasts, "mean": mean, "se": se, "t": mean / se,
            "both_ways": both}  # fmt: skip


def drop_analysis(rows: list[dict]) -> dict:
    measured = [c for c in (*DROP_CRITERIA, *DROP_PREDICTIVE)
                if rows and all(c in r["candidates"]["none"] for r in rows)]  # fmt: skip
    table = {c: drop_contrast(rows, c) for c in measured}
    table = {c: v for c, v in table.items() if v is not None}
    if table:
        g = table["g_validation"]["t"]
        for c, v in table.items():
            v["share_of_validation_t"] = v["t"] / g
            v["passes_ii"] = c in DROP_TRAINING_ONLY and v["t"] >= 0.7 * g
    return table


def markdown(payload: dict) -> str:
    lines = [
        "# How sure is each answer? Criteria against a held-out likelihood",
        "",
        f"`{payload['command']}`; {payload['environment']['device']}; "
        f"this call {payload['seconds_this_call'] / 60:.1f} min. "
        "Higher is better for every criterion (log probabilities in nats).",
        "",
    ]
    for size, table in payload["analysis"].items():
        lines += [
            f"## Decision (i): GCONV-only against CONV-only, {size} images",
            "",
            "| criterion | contrast (nats) | SE | t | share of g's t | seeds both ways "
            "| agrees with g | spread of one network | cost (epochs) |",
            "|---|---:|---:|---:|---:|---|---|---:|---:|",
        ]
        for c, v in table.items():
            lines.append(
                f"| {c} | {v['mean']:+.1f} | {v['se']:.1f} | {v['t']:.1f} "
                f"| {100 * v['share_of_validation_t']:.0f}% | {v['both_ways']} of "
                f"{len(v['seeds'])} | {v['agrees_with_validation'][0]} of "
                f"{v['agrees_with_validation'][1]} | {v['spread']:.1f} | {v['cost_epochs']:.1f} |"
            )
        lines.append("")
    for size, n in payload["noise"].items():
        seed, refit = n["seed_sd"], n["refit_sd"]
        lines += [
            f"## Where the evidence's noise is, {size} images (standard deviations, nats)",
            "",
            "| term | over seeds (exact GGN, all images) | refits at fixed weights "
            "(recipe's estimator) |",
            "|---|---:|---:|",
        ]
        for t in ("log_likelihood", "log_det", "scatter"):
            lines.append(f"| {t} | {seed[t]:.1f} | {refit[t]:.1f} |")
        lines += [
            f"| total | {seed['total']:.1f} | {refit['log_evidence']:.1f} |",
            "",
            f"Today's criterion (a) varies by {seed['a_evidence']:.1f} over seeds; the recipe's "
            f"estimator sits {n['refit_minus_exact']:+.1f} nats from the exact evidence on "
            "average.",
            "",
        ]
    drop_rows = payload.get("drop_rows", [])
    if drop_rows:
        lines += [
            f"## Decision (ii): dropping each path from FC+CONV+GCONV, {DROP_SIZE} images",
            "",
            "Gain of each candidate over its control (nats); test accuracy of the candidate.",
            "",
            "| data set | seed | criterion | drop FC | drop CONV | drop GCONV |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for r in drop_rows:
            c = r["candidates"]
            for crit in (k for k in (*DROP_CRITERIA, *DROP_PREDICTIVE) if k in c["none"]):
                gains = " | ".join(f"{c[p][crit] - c['none'][crit]:+.0f}" for p in
                                   ("fc", "conv", "gconv") if p in c)  # fmt: skip
                lines.append(f"| {r['dataset']} | {r['seed']} | {crit} | {gains} |")
        table = payload.get("drop_analysis", {})
        if table:
            lines += ["", "| criterion | contrast | SE | t | share of g's t | seeds both ways |",
                      "|---|---:|---:|---:|---:|---|"]  # fmt: skip
            for crit, v in table.items():
                lines.append(
                    f"| {crit} | {v['mean']:+.1f} | {v['se']:.1f} | {v['t']:.1f} "
                    f"| {100 * v['share_of_validation_t']:.0f}% | {v['both_ways']} of "
                    f"{len(v['seeds'])} |"
                )
        lines.append("")
    if not payload["rows"]:
        return "\n".join([*lines, f"Analysis: {RECORD}", ""])
    lines += [
        "## Networks",
        "",
        "| images | data set | seed | path | test acc | val acc | "
        + " | ".join(c.split("_")[0] for c in CRITERIA)
        + " |",
        "|---:|---|---:|---|---:|---:|" + "---:|" * len(CRITERIA),
    ]
    for r in payload["rows"]:
        lines.append(
            f"| {r['train_size']} | {r['dataset']} | {r['seed']} | {r['path']} "
            f"| {100 * r['test_accuracy']:.1f} | {100 * r['validation_accuracy']:.1f} | "
            + " | ".join(f"{r[c]:.0f}" for c in CRITERIA)
            + " |"
        )
    lines += ["", f"Analysis: {RECORD}", ""]
    return "\n".join(lines)


def build_payload(rows: list[dict], drop_rows: list[dict], seconds: float) -> dict:
    """The results file: both decisions' rows, their analyses and the claims."""
    found, dropped = analysis(rows), drop_analysis(drop_rows)
    claims = {
        f"{c} passes decision (i) at {size} images": v["passes_i"]
        for size, table in found.items()
        for c, v in table.items()
        if c in TRAINING_ONLY
    }
    claims.update({f"{c} passes decision (ii)": v["passes_ii"] for c, v in dropped.items()
                   if c in DROP_TRAINING_ONLY})  # fmt: skip
    if "1000" in found:
        same, pairs = found["1000"]["a_evidence"]["agrees_with_validation"]
        claims["evidence_agreement_single_path"] = (
            f"in record 0044 the evidence picked the held-out likelihood's choice between a "
            f"CONV-only and a GCONV-only network in {same} of {pairs} trainings (1,000 images)"
        )
    if "a_evidence" in dropped and "g_validation" in dropped:
        a, g = dropped["a_evidence"], dropped["g_validation"]
        # said beside every answer of the evidence (ella.selection.EVIDENCE_AGREEMENT)
        claims["evidence_agreement"] = (
            "in record 0044 the evidence dropped the path the data's symmetry predicts on "
            f"both data sets at {a['both_ways']} of {len(a['seeds'])} seeds, a held-out "
            f"likelihood at {g['both_ways']} of {len(g['seeds'])}: train with "
            "--validation-size V and ella select scores by the held-out images"
        )
        # the pass rule's branch: the default criterion of a run with held-out images
        claims["a training-only criterion passes both decisions"] = any(
            dropped[c]["passes_ii"] and found.get("1000", {}).get(c, {}).get("passes_i", False)
            for c in dropped
            if c in DROP_TRAINING_ONLY
        )
    return {
        "command": "python -m experiments.criteria",
        "environment": environment("cpu"),
        "seconds_this_call": seconds,
        "rows": rows,
        "analysis": found,
        "noise": noise(rows),
        "drop_rows": drop_rows,
        "drop_analysis": dropped,
        "claims": claims,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", default="runs/criteria", help="the runs (resumed)")
    parser.add_argument("--data-dir", default=default_data_dir())
    parser.add_argument("--part", choices=("corners", "drop"), default="corners",
                        help="decision (i), single-path networks, or (ii), drops")  # fmt: skip
    parser.add_argument("--sizes", nargs="+", type=int, choices=sorted(SEEDS), default=[1000])
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=None, help="of --part drop (default 0 1 2)"
    )
    parser.add_argument("--predictive", action="store_true",
                        help="--part drop: also e and f (GLM draws, a second run)")  # fmt: skip
    parser.add_argument("--results-dir", default=str(EXPERIMENT_RESULTS))
    parser.add_argument("--render-only", action="store_true")
    parser.add_argument("--redo", action="store_true",
                        help="--part drop: measure the rows held again")  # fmt: skip
    args = parser.parse_args(argv)
    root = Path(args.results_dir)
    earlier = root / f"{NAME}.json"
    payload = read_json(earlier, "results file") if earlier.is_file() else {"rows": []}
    rows, drop_rows = payload["rows"], payload.get("drop_rows", [])
    if args.render_only:
        payload = build_payload(rows, drop_rows, payload.get("seconds_this_call", 0.0))
        write_results(NAME, payload, markdown(payload), root)
        return payload
    if args.data_dir is None:
        parser.error("--data-dir: where MNIST is (../shared/data in a checkout)")
    began, work = time.perf_counter(), Path(args.work_dir)
    if args.part == "drop":
        for seed in args.seeds or DROP_SEEDS:
            for dataset in DATASETS:
                if not args.redo and any((r["dataset"], r["seed"]) == (dataset, seed)
                                         for r in drop_rows):  # fmt: skip
                    continue  # measured in an earlier call: its row is kept
                row = drop_row(work, dataset, seed, args.data_dir, args.predictive)
                drop_rows = [r for r in drop_rows if (r["dataset"], r["seed"]) != (dataset, seed)]
                drop_rows.append(row)
                drop_rows.sort(key=lambda r: (r["seed"], DATASETS.index(r["dataset"])))
                payload = build_payload(rows, drop_rows, time.perf_counter() - began)
                write_results(NAME, payload, markdown(payload), root)
        return payload
    for size in args.sizes:
        for seed in SEEDS[size]:
            for dataset in DATASETS:
                for path in PATHS:
                    key = (dataset, size, seed, path)
                    row = {"dataset": dataset, "train_size": size, "seed": seed, "path": path}
                    row.update(network_row(work, *key, args.data_dir))
                    rows = [r for r in rows if (r["dataset"], r["train_size"], r["seed"],
                                                r["path"]) != key]  # fmt: skip
                    rows.append(row)
                    rows.sort(key=lambda r: (r["train_size"], r["seed"],
                                             DATASETS.index(r["dataset"]), r["path"]))  # fmt: skip
                    payload = build_payload(rows, drop_rows, time.perf_counter() - began)
                    write_results(NAME, payload, markdown(payload), root)
    return payload


if __name__ == "__main__":
    main()
