"""Hypothesis strategies shared by the tests of generated inputs."""

from __future__ import annotations

from hypothesis import strategies as st

#: a value of every kind a Python caller may pass
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 3) | st.text(max_size=4), max_size=3),
    st.tuples(st.text(max_size=4)),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
