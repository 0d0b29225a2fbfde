"""Generated values for every option of the commands that build a configuration, and for
every field of the configurations the Python API takes (hypothesis, seeded): each is taken
or refused with ella's own error (a usage error of the parser, or an
:class:`~ella.errors.EllaError` naming the option), never a raw exception. Nothing is
trained: the property is about the door, where every value is checked before work starts.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ella.cli import build_parser
from ella.cli.common import config_from_args
from ella.ensembles.config import EnsembleConfig
from ella.errors import EllaError
from ella.train import TrainConfig
from ella.train.fit import FitConfig
from tests.strategies import ANY_VALUE

COMMANDS = {"train": TrainConfig, "ensemble": EnsembleConfig}

#: text a user may type for a value: numbers of every size and sign, words, empty
TYPED = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "-", "nan", "inf", "-inf", "1e400", "0", "-0", "none", "True"]),
    st.text(min_size=1, max_size=12),
)

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None)


def _options(command: str) -> list[argparse.Action]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return [
        a
        for a in sub.choices[command]._actions
        if a.option_strings and a.dest not in ("help", "out", "resume", "overwrite")
    ]


@st.composite
def command_lines(draw, command: str) -> list[str]:
    """``[command, --option value ...]`` with one to three generated options."""
    argv = [command]
    for action in draw(st.lists(st.sampled_from(_options(command)), min_size=1, max_size=3)):
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
            continue
        choices = [str(c) for c in action.choices] if action.choices else []
        values = st.sampled_from(choices) | TYPED if choices else TYPED
        count = draw(st.integers(1, 3)) if action.nargs in ("+", "*") else 1
        argv += [flag, *(draw(values) for _ in range(count))]
    return argv


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_takes_or_refuses_a_typed_value(command):
    config_cls = COMMANDS[command]

    @SETTINGS
    @given(command_lines(command))
    def check(argv):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                args = build_parser().parse_args(argv)
        except SystemExit as exit_:
            assert exit_.code == 2, argv  # argparse's usage error
            return
        try:
            config_from_args(args, config_cls)
        except EllaError as err:
            assert str(err), argv
        # any other exception fails the test with the command line that raised it

    check()


@pytest.mark.slow
@pytest.mark.parametrize("config_cls", [TrainConfig, EnsembleConfig, FitConfig])
def test_every_configuration_field_takes_or_refuses_any_value(config_cls):
    fields = [f.name for f in dataclasses.fields(config_cls)]

    @SETTINGS
    @given(st.dictionaries(st.sampled_from(fields), ANY_VALUE, min_size=1, max_size=3))
    def check(values):
        try:
            config = config_cls(**values)
        except EllaError as err:
            assert str(err), values
            return
        for name, value in values.items():  # taken: as given, or as its typed form
            kept = getattr(config, name)
            assert kept == value or str(kept) == str(value) or _same_number(kept, value), name

    check()


def _same_number(kept, value) -> bool:
    try:
        return math.isclose(float(kept), float(value)) or (
            math.isnan(float(kept)) and math.isnan(float(value))
        )
    except (TypeError, ValueError):
        return isinstance(kept, tuple) and list(kept) == list(value)
