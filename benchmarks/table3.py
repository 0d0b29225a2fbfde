"""ELLA paper, Table 3: MAP vs learned FC+CONV+GCONV priors on five data sets.

The same C4 mixer (FC, CONV and GCONV paths in every layer) is trained with a
fixed prior (``map``) and with per-layer, per-path priors learned by the
Laplace marginal likelihood (``learned``), on MNIST, translated MNIST, rotated
MNIST, CIFAR-10 and rotated CIFAR-10. CIFAR-10 is the full set when
``cifar-10-python.tar.gz`` (or its batches) is in the data directory, else the
offline subset (3805 training images), as each row's ``source`` says.

    python -m benchmarks.table3 --profile cpu     # about 7 minutes on 2 CPU cores
    python -m benchmarks.table3 --profile cpu_80 --results-dir benchmarks/results/table3_cpu_80
    python -m benchmarks.table3 --profile cpu_80_sgd \
        --results-dir benchmarks/results/table3_cpu_80_sgd
    python -m benchmarks.table3 --profile cpu_stratified \
        --results-dir benchmarks/results/table3_cpu_stratified
    python -m benchmarks.table3 --profile paper --device cuda   # full data, long schedule

What each profile's results show: the decision record its Markdown file names (RECORDS).
"""

from __future__ import annotations

import argparse

from benchmarks.runner import comparison_notes, run_or_load, schedule_note
from ella.learner.report import shares_history_line
from studies.runner import (
    analysis_lines,
    claims_markdown,
    common_arguments,
    header_line,
    write,
)
from studies.table3 import PAPER, PROFILES, cifar_source, row_config, share_claims

#: the decision record that reads each profile's results (the reference's own scripts for
#: this table, which train its MAP column only as released: docs/research/0031-table3-cpu.md)
RECORDS = {
    "cpu": "docs/research/0031-table3-cpu.md",
    "cpu_80": "docs/research/0032-table3-80-epochs.md",
    "cpu_80_sgd": "docs/research/0036-table3-80-epochs-sgd.md",
    "cpu_stratified": "docs/research/0026-table3-with-current-rounds.md",
    "paper": "docs/research/0034-table3-gpu.md",
}


#: suffix of the claims read from the paper's own measure of the shares
PAPER_MEASURE = " (the paper's measure: relative effective parameters)"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_arguments(parser, PROFILES)
    parser.add_argument("--datasets", nargs="+", default=list(PAPER), choices=list(PAPER))
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    source = cifar_source(args.data_dir)
    runs = []
    for row in args.datasets:
        for model in ("map", "learned"):
            labels = {"dataset": row, "model": model}
            if "cifar" in row:
                labels["source"] = source
            runs.append((labels, row_config(row, model == "learned", profile, source, args)))
    payload = run_or_load(args, "table3", runs, {"settings": profile, "cifar10_source": source})
    rows, source = payload["rows"], payload["cifar10_source"]
    args.datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    for r in rows:
        map_acc, learned_acc, shares = PAPER[r["dataset"]]
        r["paper_test_accuracy"] = (learned_acc if r["model"] == "learned" else map_acc) / 100
        if r["model"] == "learned":
            r["paper_shares"] = dict(zip(("fc", "conv", "gconv"), shares, strict=True))
    get = {(r["dataset"], r["model"]): r for r in rows}
    claims = {}
    for d in args.datasets:
        # the claims: learned at least as good as MAP (a tie counts)
        claims[f"learned >= MAP in test accuracy on {d}"] = (
            get[(d, "learned")]["test_accuracy"] >= get[(d, "map")]["test_accuracy"]
        )
        claims[f"learned <= MAP in test NLL on {d}"] = (
            get[(d, "learned")]["test_nll"] <= get[(d, "map")]["test_nll"]
        )
    claims.update(share_claims(get, args.datasets, "shares", ""))
    claims.update(share_claims(get, args.datasets, "relative_shares", PAPER_MEASURE))
    payload["claims"] = claims
    payload["notes"] = [
        schedule_note({**PROFILES[args.profile], **payload["settings"]}),
        *comparison_notes(rows, "dataset", "map", "learned"),
        *(
            f"{r['dataset']}, learned: {shares_history_line(r['shares_history'])}"
            for r in rows
            if len(r.get("shares_history", [])) >= 2  # recorded since 2026-11-25
        ),
    ]
    lines = [
        "# ELLA Table 3: MAP vs learned FC+CONV+GCONV priors",
        "",
        header_line(payload, f"CIFAR-10 {source}"),
        "",
        "| data set | MAP acc (ours / paper) | learned acc (ours / paper) | MAP NLL | learned NLL "
        "| log marglik MAP / learned | learned shares FC/CONV/GCONV (ours) [min-max] "
        "| relative, the paper's measure: MAP; learned [min-max] (ours) | paper |",
        "|---|---:|---:|---:|---:|---:|---|---|---|",
    ]

    def triple(shares: dict | None, ranges: bool = False) -> str:
        if not shares:  # rows run before the measure existed
            return "-"
        text = "/".join(f"{shares[p]:.0f}" for p in ("fc", "conv", "gconv"))
        if ranges:
            text += " " + " ".join(
                f"[{shares[p + '_min']:.0f}-{shares[p + '_max']:.0f}]"
                for p in ("fc", "conv", "gconv")
            )
        return text

    for d in args.datasets:
        m, lrn = get[(d, "map")], get[(d, "learned")]
        relative = f"{triple(m.get('relative_shares'))}; " + triple(
            lrn.get("relative_shares"), ranges=True
        )
        paper = "/".join(str(v) for v in PAPER[d][2])
        lines.append(
            f"| {d} | {100 * m['test_accuracy']:.2f} / {PAPER[d][0]:.2f} "
            f"| {100 * lrn['test_accuracy']:.2f} / {PAPER[d][1]:.2f} "
            f"| {m['test_nll']:.3f} | {lrn['test_nll']:.3f} "
            f"| {m['log_marglik']:.0f} / {lrn['log_marglik']:.0f} "
            f"| {triple(lrn['shares'], ranges=True)} | {relative} | {paper} |"
        )
    lines += claims_markdown(claims, payload["notes"])
    lines += analysis_lines(RECORDS.get(payload["profile"]))
    write(args, "table3", payload, "\n".join(lines))
    return payload


if __name__ == "__main__":
    main()
