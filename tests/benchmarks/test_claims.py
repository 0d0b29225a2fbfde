"""The claims tables of README.md and docs/reproducing.md are what ``python -m
benchmarks.claims`` writes from the committed results, and its rules hold: a gap within
twice its standard error (or its seeds' spread) is "within noise", and figures are means ±
half ranges of the unrounded per-seed values."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from benchmarks import claims
from benchmarks.claims import NO, NOISE, NOT_REPRODUCED, UNMEASURED, YES, verdict
from studies.results import splice_between
from studies.rules import follows_position, follows_rotation, over_seeds

ROOT = claims.ROOT


def test_the_tables_are_what_the_script_writes():
    for name, (text, new) in claims.render().items():
        assert text == new, f"{name}'s claims table is stale: run python -m benchmarks.claims"


def test_every_row_names_one_profile_and_table3_reads_the_current_rounds():
    rows = claims.all_claims()
    assert all(c.profile and "`" not in c.profile for c in rows)
    table3 = [c for c in rows if c.readme.startswith("Table 3: ")]
    assert len(table3) == 4 and {c.profile for c in table3} == {"cpu_stratified"}
    for c in rows:
        assert f"| `{c.profile}` |" in claims.readme_table([c])


def test_a_gap_within_twice_its_standard_error_is_within_noise():
    assert verdict([1.9, 1.9], [1.0, 1.0]) == NOISE
    assert verdict([2.1, 2.1], [1.0, 1.0]) == YES
    assert verdict([-2.1, -2.1], [1.0, 1.0]) == NO
    # a gap against the claim within noise is named as not reproduced
    assert verdict([-1.9, -1.9], [1.0, 1.0]) == f"{NOT_REPRODUCED}, {NOISE}"
    # one seed measures no seed-to-seed noise: within the test images' noise, or not called
    assert verdict([1.9], [1.0]) == NOISE and verdict([-1.9], [1.0]) == f"{NOT_REPRODUCED}, {NOISE}"
    assert verdict([2.1], [1.0]) == UNMEASURED
    assert verdict([-2.1], [1.0]) == f"{NOT_REPRODUCED}, {UNMEASURED}"
    assert verdict([50.0]) == UNMEASURED and verdict([50.0], []) == UNMEASURED
    # seeds: the gaps' half range is noise too, and the larger of the two counts
    assert verdict([-0.5, 2.5]) == NOISE  # mean 1.0, half range 1.5
    assert verdict([2.0, 2.6]) == YES and verdict([-2.0, -2.6]) == NO
    assert verdict([2.0, 2.6], [1.2, 1.2]) == NOISE  # 2 SE 2.4 > 2.3
    # the seeds share their test images: the mean's standard error does not shrink
    assert claims.pooled_se([1.0, 1.0]) == 1.0


def test_the_binomial_standard_error_of_a_difference_of_accuracies():
    assert claims.accuracy_se(0.5, 100) == pytest.approx(0.05)
    assert claims.difference_se(0.9, 0.8, 1000) == pytest.approx(
        math.sqrt(0.9 * 0.1 / 1000 + 0.8 * 0.2 / 1000)
    )
    assert claims.difference_se(0.9, 0.8, 1000, 500) == pytest.approx(
        math.sqrt(0.9 * 0.1 / 1000 + 0.8 * 0.2 / 500)
    )


@pytest.mark.parametrize(
    ("a", "b", "n", "expected"),
    [
        (0.452, 0.442, 761, NOISE),  # FoRDE-PCA against a deep ensemble, corrupted, 1 seed
        (0.7175, 0.7145, 2000, NOISE),  # learned invariance against Augerino, rotated MNIST
        (0.917, 0.878, 2000, UNMEASURED),  # learned invariance against Augerino, MNIST
        (0.60, 0.70, 2000, f"{NOT_REPRODUCED}, {UNMEASURED}"),
    ],
)
def test_one_seeds_accuracies_called_by_their_binomial_standard_error(a, b, n, expected):
    rows = [{"test_accuracy": a, "test_size": n}], [{"test_accuracy": b, "test_size": n}]
    assert verdict(*claims.accuracy_gaps(*rows)) == expected


def test_the_known_close_cases_read_within_noise():
    rows = {c.readme: c for c in claims.all_claims()}
    forde = rows["FoRDE-PCA more robust to corruptions than a deep ensemble"].verdict
    assert "within noise on CIFAR-10 subset" in forde
    invariance = rows["Learned invariance: more accurate than none / Augerino"].verdict
    # one seed: a gap of 3.9 points beyond 2 SE is shown, not called
    assert "within noise on rotated" in invariance and "noise not measured on MNIST" in invariance
    # Table 3: three of five gaps against the paper's, all within noise
    table3 = rows["Table 3: learned priors beat MAP in accuracy"].verdict
    assert table3.startswith(f"{NOT_REPRODUCED}, {NOISE} on MNIST, rotated, CIFAR-10")


def test_the_within_a_point_tolerance_is_tested_on_the_gap():
    rows = {(c.readme, c.profile): c for c in claims.all_claims()}
    name = "Table 1: learned within a point of CONV on digit"
    assert rows[name, "cpu"].verdict == NO  # -1.55 points: not within a point
    assert rows[name, "cpu_80"].verdict == YES  # -0.83 points


def test_mean_and_half_range_come_from_the_unrounded_values():
    # GCONV's share of rotated MNIST by the paper's measure, seeds 0 and 1
    rotated, mnist = [74.65657500244234, 73.58133], [76.05, 75.39]
    assert claims.pm(rotated) == "74.1 ± 0.5" and claims.pm(mnist) == "75.7 ± 0.3"
    assert claims.pm([round(v) for v in rotated]) == "74.5 ± 0.5"  # rounded first: wrong
    assert claims.mean_half_range([1.0, 2.0, 4.0]) == (7 / 3, 1.5)
    assert claims.pm([88.45, 88.95]) == "88.7 ± 0.3"
    assert claims.pm([3.5]) == "3.5"


def test_the_table3_figures_are_read_from_the_json_files():
    values = {
        dataset: [
            claims.row(
                claims.load("table3", "cpu_stratified", seed), dataset=dataset, model="learned"
            )["relative_shares"]["gconv"]
            for seed in (0, 1)
        ]
        for dataset in ("rotated_mnist", "mnist")
    }
    figure = claims.pm(values["rotated_mnist"]) + " vs " + claims.pm(values["mnist"])
    assert figure == "74.1 ± 0.5 vs 75.7 ± 0.3"
    higher = [c for c in claims.all_claims() if "higher on rotated MNIST" in c.readme]
    assert len(higher) == 1 and higher[0].figure.startswith(figure)


def test_rounding_is_half_up_and_drops_the_sign_of_zero():
    assert claims.fmt(23.15) == "23.2" and claims.fmt(0.25) == "0.3"
    assert claims.fmt(-0.825, 2, sign=True) == "-0.83"
    assert claims.fmt(2.3, sign=True) == "+2.3" and claims.fmt(-0.04, sign=True) == "0.0"


def test_a_missing_results_file_names_the_command_that_writes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="python -m benchmarks.table1 --profile cpu`"):
        claims.load("table1", "cpu", 0, tmp_path)
    seed0 = claims.SOURCES["table3", "cpu_stratified", 0].path
    (tmp_path / seed0).parent.mkdir(parents=True)
    shutil.copy(ROOT / seed0, tmp_path / seed0)
    with pytest.raises(FileNotFoundError, match="--profile cpu_stratified --seed 1 --results"):
        claims.table3_claims(tmp_path)


def test_a_file_of_another_profile_or_seed_is_refused(tmp_path):
    path = tmp_path / claims.SOURCES["osp", "cpu", 0].path
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"profile": "smoke", "seed": 0, "rows": []}))
    with pytest.raises(ValueError, match="profile 'smoke'"):
        claims.load("osp", "cpu", 0, tmp_path)


def test_only_the_text_between_the_markers_is_replaced():
    b, e = claims.BEGIN, claims.END
    text = f"# title\nbefore\n{b}\nold table\n{e}\nafter\n"
    assert (
        splice_between(text, b, e, "new table")
        == f"# title\nbefore\n{b}\n\nnew table\n\n{e}\nafter\n"
    )
    for broken in (f"{b}\nno end\n", f"{e}\n{b}\n", f"{b}\n{b}\n{e}\n", "no markers\n"):
        with pytest.raises(ValueError, match="README.md"):
            splice_between(broken, b, e, "x", "README.md")


def test_check_prints_a_diff_and_writing_touches_nothing_outside_the_markers(tmp_path, capsys):
    for folder in ("benchmarks", "experiments"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    for name in (claims.README, claims.REPRODUCING, claims.GUIDE):
        shutil.copy(ROOT / name, tmp_path / name)
    readme = tmp_path / claims.README
    good = readme.read_text()
    stale = good.replace("| Table 1: CONV collapses", "| Table 1: CONV fails", 1)
    stale = stale.replace("## What reproduces", "## What reproduces, edited by hand", 1)
    readme.write_text(stale)

    assert claims.main(["--check"], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "-| Table 1: CONV fails" in out and "+| Table 1: CONV collapses" in out
    assert "-## What reproduces" not in out and "+## What reproduces" not in out
    assert readme.read_text() == stale  # --check writes nothing

    assert claims.main([], root=tmp_path) == 0
    assert readme.read_text() == good.replace(
        "## What reproduces", "## What reproduces, edited by hand", 1
    )
    assert claims.main(["--check"], root=tmp_path) == 0


def test_the_reliability_rule_is_written_once_and_read_from_the_selections():
    assert follows_rotation(["fc", "conv", "gconv"], ["gconv"])
    assert not follows_rotation(["fc", "gconv"], ["gconv"])  # CONV dropped upright too
    assert not follows_rotation(["conv"], ["conv", "gconv"])  # CONV kept on rotated
    assert follows_position(["conv"], ["fc", "conv"])
    assert not follows_position(["fc", "conv"], ["fc", "conv"])
    assert over_seeds([True, True]) == "yes, both seeds"
    assert over_seeds([False, False]) == "no, at either seed"
    assert over_seeds([True, False]) == "mixed: at 1 seed of 2"
    rows = {(r.question, r.size): r.answer for r in claims.reliability_rows()}
    greedy = rows["greedy selection (`ella select`)", "1,000, Table 3's mixer"]
    assert greedy.startswith("mixed: at 1 seed of 2") and "below that of no network" in greedy
    assert rows["the same, Table 1's two tasks", "4,000, FC+CONV"].startswith("yes, both seeds")


def test_the_criteria_table_reads_each_criterions_t_from_record_0044s_results(tmp_path):
    def found(t, mean, seeds, share=None, both=None):
        return {"t": t, "mean": mean, "se": mean / t, "seeds": list(range(seeds)),
                "share_of_validation_t": share, "both_ways": both}  # fmt: skip

    payload = {
        "analysis": {"1000": {"a_evidence": found(1.5, 900.0, 5, 0.125, 3),
                              "g_validation": found(12.0, 150.0, 5, 1.0, 5),
                              "h_training_speed": found(24.0, 13000.0, 5, 2.0, 5)}},
        "drop_analysis": {"a_evidence": found(0.5, 400.0, 3, both=1),
                          "g_validation": found(2.0, 4.0, 3, both=2)},
        "drop_rows": [],
        "noise": {"1000": {"seed_sd": {"total": 800.0}, "refit_sd": {"log_evidence": 95.0}}},
    }  # fmt: skip
    (tmp_path / "experiments" / "results").mkdir(parents=True)
    (tmp_path / claims.EXPERIMENT_RESULTS["criteria"].path).write_text(json.dumps(payload))
    rows = claims.criteria_table(tmp_path).splitlines()
    assert rows[2] == (
        "| the KFAC evidence (`evidence`) | training images | 1.5 (+900 ± 600, 5 seeds) | 12% | "
        "3 of 5 seeds | 0.5 (+400 ± 800, 3 seeds); right on both at 1 of 3 |"
    )
    assert rows[4].endswith("| 200% | 5 of 5 seeds | not computed |")  # h not in (ii)'s file
    assert "moved by 800 nats between seeds, 95 when refitted" in " ".join(rows)
    sentence = " ".join(claims.answers_sentence(tmp_path).split())
    assert (
        "the evidence's answer is 1.5 standard errors from none (right on both data sets at 3 "
        "of 5 seeds), a held-out likelihood's 12.0 (5 of 5), training speed's 24.0 (5 of 5)"
    ) in sentence


@pytest.fixture
def results_root(tmp_path):
    """A copy of the committed results files and of the pages the script writes into."""
    for folder in ("benchmarks/results", "experiments/results"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    for name in (claims.README, claims.REPRODUCING, claims.GUIDE):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _refused_by_name(root, name: str, *needles: str) -> None:
    """Writing the tables from ``root`` stops with one message naming ``name`` and every
    needle, and no page is rewritten."""
    pages = {p: (root / p).read_text() for p in (claims.README, claims.REPRODUCING, claims.GUIDE)}
    for argv in (["--check"], []):
        with pytest.raises(SystemExit) as refusal:
            claims.main(argv, root=root)
        message = str(refusal.value.code)
        for needle in (name, f"git checkout -- {name}", *needles):
            assert needle in message, message
    assert {p: (root / p).read_text() for p in pages} == pages


def _edit(root, name: str, change) -> None:
    path = root / name
    payload = json.loads(path.read_text())
    change(payload)
    path.write_text(json.dumps(payload))


def test_a_cut_results_file_is_refused_naming_it_and_its_command(results_root):
    name = claims.SOURCES["table1", "cpu", 0].path
    text = (results_root / name).read_text()
    (results_root / name).write_text(text[: len(text) // 2])
    _refused_by_name(
        results_root, name, "cannot be read as JSON", "python -m benchmarks.table1 --profile cpu"
    )


def test_a_number_written_as_a_string_is_refused_naming_the_field(results_root):
    name = claims.SOURCES["osp", "cpu", 0].path
    _edit(results_root, name, lambda p: p["rows"][0].update(osp="NaN"))
    _refused_by_name(
        results_root, name, "rows[0].osp should be a finite number, found the string 'NaN'",
        "python -m benchmarks.osp --profile cpu",
    )  # fmt: skip


def test_a_non_finite_accuracy_is_refused(results_root):
    name = claims.SOURCES["table3", "cpu_stratified", 1].path
    _edit(results_root, name, lambda p: p["rows"][2].update(test_accuracy=math.nan))
    _refused_by_name(
        results_root, name, "rows[2].test_accuracy should be a finite number from 0 to 1, found "
        "the number nan", "python -m benchmarks.table3 --profile cpu_stratified --seed 1",
    )  # fmt: skip


def test_the_main_jobs_kept_paths_are_path_names(results_root):
    fix = "python -m benchmarks.main_job"
    _edit(results_root, claims.MAIN_JOB, lambda p: p["selection"].update(kept="abc"))
    _refused_by_name(
        results_root, claims.MAIN_JOB,
        "selection.kept should be a list of strings, found the string 'abc'", fix,
    )  # fmt: skip
    _edit(results_root, claims.MAIN_JOB, lambda p: p["selection"].update(kept=["a", "b"]))
    _refused_by_name(results_root, claims.MAIN_JOB, "selection.kept[0] should be a path name", fix)
    shutil.copy(ROOT / claims.MAIN_JOB, results_root / claims.MAIN_JOB)
    _edit(results_root, claims.MAIN_JOB, lambda p: p["selection"]["rounds"][-1].update(winner="x"))
    _refused_by_name(results_root, claims.MAIN_JOB, "winner is 'x', none of its rows'", fix)


def test_an_experiments_file_is_refused_naming_the_command_that_writes_it(results_root):
    reliability = claims.EXPERIMENT_RESULTS["reliability"].path
    _edit(results_root, reliability, lambda p: p["rows"][0].update(winner="nonsense"))
    _refused_by_name(
        results_root, reliability, "rows[0].winner should be a path name",
        "python -m experiments.reliability",
    )  # fmt: skip
    shutil.copy(ROOT / reliability, results_root / reliability)
    miniature = claims.EXPERIMENT_RESULTS["miniature"].path
    path = results_root / miniature
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:3], lines[3][:40], *lines[4:]]) + "\n")
    _refused_by_name(results_root, miniature, "cannot be read as JSON (line 4, column")
