"""The marked sections: timed only while collected, nested sections each counted."""

import time

from ella.runtime.timing import SECTIONS, section, sections


@section("test: outer")
def outer():
    inner()
    time.sleep(0.01)


@section("test: inner")
def inner():
    time.sleep(0.01)


def test_sections_collect_wall_seconds_only_inside_the_block():
    outer()  # outside: nothing collected, nothing kept
    with sections() as seconds:
        outer()
        outer()
    assert {"test: outer", "test: inner"} <= set(SECTIONS)
    assert seconds["test: inner"] >= 0.02
    assert seconds["test: outer"] >= seconds["test: inner"] + 0.02
    with sections() as again:
        pass
    assert dict(again) == {}


def test_the_evidence_rounds_parts_are_marked():
    import ella.learner.prior_learner  # noqa: F401  (marks its sections on import)
    import ella.marglik.native  # noqa: F401

    for label in ("round", "evidence fit", "native factors", "eigenvalues", "closed-form optimum"):
        assert label in SECTIONS
