"""Smoke runs of the ensemble benchmark scripts on a tiny budget (results in a temporary folder)."""

import json

import pytest

from benchmarks import fordes, osp
from tests.data.shared import SHARED

needs_data = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data not present")


@pytest.mark.slow
@needs_data
def test_osp_smoke(tmp_path):
    osp.main(["--profile", "smoke", "--results-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "osp.json").read_text())
    assert saved["profile"] == "smoke"
    keys = {(r["model"], r["group"]) for r in saved["rows"]}
    assert keys == {(m, g) for m in ("ensemble_da", "single_da", "gconv") for g in osp.GROUPS}
    for r in saved["rows"]:
        order = int(r["group"][1:])
        assert 1 <= r["osp"] <= order and r["osp_std"] >= 0 and r["members"] >= 1
    assert [r["members"] for r in saved["members_sweep"]] == [1, 2]
    gconv_c4 = next(r for r in saved["rows"] if (r["model"], r["group"]) == ("gconv", "C4"))
    assert gconv_c4["osp"] == 4  # exactly invariant, trained or not
    assert (tmp_path / "osp.md").read_text().startswith("# Emergent equivariance")


@pytest.mark.slow
@needs_data
def test_fordes_smoke(tmp_path):
    argv = ["--profile", "smoke", "--results-dir", str(tmp_path)]
    fordes.main([*argv, "--datasets", "fashion_mnist", "--methods", "de", "forde_pca"])
    saved = json.loads((tmp_path / "fordes.json").read_text())
    assert [(r["dataset"], r["method"]) for r in saved["rows"]] == [
        ("fashion_mnist", "de"),
        ("fashion_mnist", "forde_pca"),
    ]
    for r in saved["rows"]:
        assert 0 <= r["accuracy"] <= 1 and 0 <= r["corrupted_accuracy"] <= 1
        assert r["nll"] > 0 and 0 <= r["ece"] <= 1
    assert "FoRDE-PCA" in (tmp_path / "fordes.md").read_text()
