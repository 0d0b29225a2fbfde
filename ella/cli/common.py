"""Pieces shared by the commands: options generated from a config, run directories, errors.

``ella train`` and ``ella ensemble`` both build their options from a
configuration dataclass (:class:`ella.options.Config`) and both run in a run
directory. This module holds what they share, so that neither command module
imports the other:

* :func:`add_config_options`: one ``--option`` per field, with ``choices=``
  for enum fields and the default in the help text. Options are parsed with
  ``argparse.SUPPRESS`` defaults, so the namespace holds exactly the options
  the user typed (:func:`given_options`);
* :func:`claim_run`: everything that can be checked before data is read: the
  configuration, ``--out``/``--resume``/``--overwrite``, the device; and the run
  directory's lock (:func:`~ella.rundir.run_lock`), held for the whole command;
* :func:`reports_errors`: a command prints any :class:`~ella.errors.EllaError`
  as one line and exits with status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

from ella.distributed import ONE_PROCESS, World
from ella.errors import CheckpointError, ConfigError, EllaError, Interrupted
from ella.options import Config, choice_type
from ella.rundir import (
    CONFIG,
    check_run_directory,
    invalid_config,
    new_run_directory,
    read_json,
    refuse_unusable_name,
    remove_if_unused,
    resume_note,
    run_lock,
)
from ella.runtime.system import resolve_device

__all__ = [
    "DefaultsHelpFormatter",
    "add_config_options",
    "add_run_options",
    "claim_run",
    "config_from_args",
    "given_options",
    "reports_errors",
    "run_claimed",
]


def _argument_type(hint: typing.Any) -> tuple[typing.Any, str | None]:
    """(element type, nargs) of a field's type hint (``X | None`` -> X, tuples -> nargs)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if typing.get_origin(hint) is tuple:
        return typing.get_args(hint)[0], "+"
    return hint, None


def add_config_options(
    parser: argparse.ArgumentParser, config_cls: type[Config], help_texts: dict[str, str]
) -> None:
    """One ``--option`` per field of ``config_cls``, with its help text and default;
    ``choices=`` for enum fields."""
    defaults = config_cls().to_dict()
    hints = config_cls.hints()
    for field in dataclasses.fields(config_cls):
        flag = "--" + field.name.replace("_", "-")
        default = defaults[field.name]
        shown = " ".join(map(str, default)) if isinstance(default, list) else default
        help_text = help_texts[field.name]
        if "(default" not in help_text:  # a help text may say its default in words
            help_text = f"{help_text} (default: {shown})"
        kind, nargs = _argument_type(hints[field.name])
        nargs = field.metadata.get("nargs", nargs)
        choice = choice_type(hints[field.name])
        if kind is bool:
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                help=help_text,
            )  # fmt: skip
        elif choice is not None:
            parser.add_argument(
                flag, choices=choice.values(), nargs=nargs, default=argparse.SUPPRESS,
                help=help_text, metavar=None,
            )  # fmt: skip
        else:
            parser.add_argument(
                flag, type=kind, nargs=nargs, default=argparse.SUPPRESS, help=help_text
            )


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's formatter that adds each option's default to its help, except where the
    help already says it (``--out``'s "default: a new runs/..."), so that every default
    shows once."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.help and "(default" in action.help:
            return action.help
        return super()._get_help_string(action)


THREADS_NOTE = (
    "Threads: torch uses as many threads as CPUs are available to this process (its "
    "affinity mask and cgroup CPU quota); set ELLA_THREADS (or OMP_NUM_THREADS) to choose."
)


def add_run_command(
    sub: argparse._SubParsersAction,
    name: str,
    config_cls: type[Config],
    help_texts: dict[str, str],
    func: Callable[[argparse.Namespace], int],
    prefix: str,
    **parser_kwargs,
) -> argparse.ArgumentParser:
    """A command that runs in a run directory (``ella train``, ``ella ensemble``): its
    parser (``parser_kwargs``: ``help``, ``description``), :func:`add_run_options` with
    ``prefix`` for a new directory's name, :func:`add_config_options` of ``config_cls`` and
    ``func`` to run."""
    parser = sub.add_parser(name, formatter_class=DefaultsHelpFormatter, **parser_kwargs)
    add_run_options(parser, prefix)
    add_config_options(parser, config_cls, help_texts)
    parser.set_defaults(func=func)
    return parser


def add_run_options(parser: argparse.ArgumentParser, prefix: str) -> None:
    """``--out``, ``--resume`` and ``--overwrite``; the threads note under the help."""
    parser.epilog = THREADS_NOTE
    parser.add_argument(
        "--out", default=None, help=f"run directory (default: a new runs/{prefix}-YYYYmmdd-HHMMSS)"
    )
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start again in --out although it holds a run (its old outputs are removed first)",
    )


def given_options(args: argparse.Namespace, config_cls: type[Config]) -> dict:
    """The configuration options the user typed, as config values (lists become tuples)."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in vars(args).items() if k in names}


def config_from_args(args: argparse.Namespace, config_cls: type[Config]) -> Config:
    """The configuration the options describe (defaults for options not given); an option
    given that it would ignore is refused (:meth:`~ella.options.Config.check_given`)."""
    given = given_options(args, config_cls)
    config = config_cls(**given)
    config.check_given(given)
    return config


def _refuse_another_commands_run(out: Path, saved: dict, config_cls: type[Config]) -> None:
    """Refuse to resume a run that another command made (its ``config.json`` holds options
    this one does not know), naming that command."""
    maker = config_cls.maker_of(saved) if isinstance(saved, dict) else None
    if maker is None or maker is config_cls or config_cls.COMMAND is None:
        return
    command = maker.COMMAND or maker.__name__
    how = (
        f"{command} --out {out} --resume"
        if command.startswith("ella ")
        else f"{command}(..., out={str(out)!r}, resume=True)"
    )
    raise CheckpointError(
        f"--resume: {out} holds a run of {command}, not of {config_cls.COMMAND}; resume it "
        f"with `{how}`"
    )


def _resumed_config(out: Path, args: argparse.Namespace, config_cls: type[Config]) -> Config:
    """The saved configuration of the run in ``out``, with the options given now.

    Options that define the run must not change: one given with another value than the
    saved one is refused by name. The others (data directory, device, progress bars)
    take the new value.
    """
    path = out / CONFIG
    saved_dict = read_json(path, "run's configuration")
    _refuse_another_commands_run(out, saved_dict, config_cls)
    try:
        saved = config_cls.from_dict(saved_dict)
    except ConfigError as err:
        raise invalid_config(path, err) from None
    given = given_options(args, config_cls)
    new = dataclasses.replace(saved, **given)  # validates the new values
    changed = [
        f"--{k.replace('_', '-')} (the run has {saved.to_dict()[k]!r}, given {new.to_dict()[k]!r})"
        for k in given
        if k in config_cls.run_fields() and new.to_dict()[k] != saved.to_dict()[k]
    ]
    if changed:
        raise ConfigError(
            f"--resume: these options define the run and cannot change: {'; '.join(changed)}. "
            "Resume without them, or start a new run directory"
        )
    return new


@contextlib.contextmanager
def claim_run(
    args: argparse.Namespace, config_cls: type[Config], prefix: str, world: World = ONE_PROCESS
) -> Iterator[tuple[Path, Config]]:
    """Check the options and the run directory before any work, build the configuration,
    and hold the run directory for the block: ``with claim_run(...) as (out, config):``.

    Process 0 takes the run directory's lock (:func:`~ella.rundir.run_lock`) before it
    checks the directory, and holds it until the block ends, so that a second command
    into the same directory is refused at once (naming this process) instead of mixing
    two runs. A default run directory (no ``--out``) that the command leaves empty, for
    a run refused after it was created, is removed. An interrupt (Ctrl-C) inside the
    block says whether there is a checkpoint to resume from.

    In a data-parallel job (``world``) process 0 checks (and creates) the run directory
    and tells the others its name; they build the same configuration (only process 0
    shows progress bars: :attr:`ella.engine.epochs.EpochRun.progress`).

    Raises:
        EllaError: naming what is wrong (bad option, unusable or busy run directory,
            resume with a changed option, a device this machine lacks).
    """
    with contextlib.ExitStack() as stack:
        prepared = world.main_first(lambda: _prepare_run(args, config_cls, prefix, stack))
        if world.is_main:
            out, config = prepared
            world.broadcast_text(str(out))
        else:
            out = Path(world.broadcast_text(None))
            config = (
                _resumed_config(out, args, config_cls)
                if args.resume
                else config_from_args(args, config_cls)
            )
        try:
            yield out, config
        except KeyboardInterrupt as err:
            raise Interrupted(f"interrupted; {resume_note(out)}") from err


def _prepare_run(
    args: argparse.Namespace, config_cls: type[Config], prefix: str, stack: contextlib.ExitStack
) -> tuple[Path, Config]:
    """Check the options, build the configuration, take the run directory's lock (kept
    by ``stack``) and check the directory under it."""
    if args.out is None and args.resume:
        raise ConfigError("--resume needs --out RUN_DIR")
    if args.resume and args.overwrite:
        raise ConfigError("use --resume or --overwrite, not both")
    if args.out is None:
        config = config_from_args(args, config_cls)
        resolve_device(config.device)
        out = new_run_directory(prefix)
        stack.callback(remove_if_unused, out)  # after the lock is released (last in, first out)
        stack.enter_context(run_lock(out))
        return out, config
    out = Path(args.out)
    refuse_unusable_name(out)
    if not args.resume:  # refused options leave no directory behind
        config = config_from_args(args, config_cls)
        resolve_device(config.device)
    if not out.exists():
        stack.callback(remove_if_unused, out)
    stack.enter_context(run_lock(out))
    if args.resume:
        check_run_directory(out, resume=True, overwrite=False)
        config = _resumed_config(out, args, config_cls)
        resolve_device(config.device)
    else:
        check_run_directory(out, resume=False, overwrite=args.overwrite)
    return out, config


@contextlib.contextmanager
def run_claimed(
    args: argparse.Namespace,
    config_cls: type[Config],
    prefix: str,
    world: World,
    runner: Callable[[Config, Path], typing.Any],
) -> Iterator[tuple[Path, Config, dict]]:
    """Run a command's training in its claimed run directory (:func:`claim_run`):
    ``runner(config, out).run(resume=..., overwrite=...)``, then the ``with`` block (its
    printing and further work) while the directory is still held.

    Yields ``(out, config, results)``. Where ``--resume`` found a finished run (its
    results carry ``"finished"``), process 0 says so on stderr: nothing was written.
    """
    with claim_run(args, config_cls, prefix, world) as (out, config):
        results = runner(config, out).run(resume=args.resume, overwrite=args.overwrite)
        if world.is_main and results.get("finished"):
            print(
                f"nothing to resume: {out} holds a finished run, left as it is (--overwrite "
                "starts it again); its results:",
                file=sys.stderr,
            )
        yield out, config, results


def reports_errors(command: Callable[[argparse.Namespace], int]) -> Callable:
    """Run a command; print an :class:`~ella.errors.EllaError` (or a ``ValueError``/
    ``FileNotFoundError`` from a check) as one ``error:`` line and return 1. A
    ``SystemExit`` from inside the command (a dependency calling ``exit()``) also
    returns 1: a command never ends with status 0 without its results."""

    @functools.wraps(command)
    def wrapper(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except (EllaError, ValueError, FileNotFoundError) as err:
            said = err.on_command_line() if isinstance(err, EllaError) else err
            print(f"error: {said}", file=sys.stderr)
            return 1
        except SystemExit as err:  # a dependency's exit(): never a silent end
            print(
                f"error: a dependency tried to end the process (exit code {err.code!r}); "
                "this is a bug of ella's error handling, please report it",
                file=sys.stderr,
            )
            return 1
        except KeyboardInterrupt as err:  # Interrupted says what was kept
            print(f"\n{err if isinstance(err, Interrupted) else 'interrupted'}", file=sys.stderr)
            return 130

    return wrapper
