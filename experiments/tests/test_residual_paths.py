"""The decisive experiment's decision rule, on hand-made rows."""

from experiments.residual_paths import claims, decisions


def rows(shares: dict[tuple[str, int], float], variant: str = "zero") -> list[dict]:
    return [
        {"variant": variant, "dataset": d, "seed": s, "summary": {"residual_share": v}}
        for (d, s), v in shares.items()
    ]


def test_the_rule_needs_both_seeds_gaps_above_the_seed_spread():
    clear = rows({("mnist", 0): 30.0, ("mnist", 1): 28.0,
                  ("rotated_mnist", 0): 20.0, ("rotated_mnist", 1): 19.0})  # fmt: skip
    assert decisions(clear)["zero"] == {"gaps": [10.0, 9.0], "spread": 2.0, "holds": True}
    noisy = rows({("mnist", 0): 30.0, ("mnist", 1): 18.0,
                  ("rotated_mnist", 0): 20.0, ("rotated_mnist", 1): 17.0})  # fmt: skip
    assert decisions(noisy)["zero"]["holds"] is False  # gap 1 at seed 1 < spread 12
    (text,) = claims(clear)
    assert "rotation-breaking residual" in text and "(zero)" in text
    assert decisions(clear[:3]) == {}  # a design without all its runs decides nothing
