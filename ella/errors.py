"""One base exception for problems a user can fix, caught once per command.

Every error that ella raises because of an input, an option, a file or a run
directory derives from :class:`EllaError`; its message names the problem and
what to do. The command line prints it as one line and exits with status 1,
so a traceback always means a bug in ella (please report it).

The subclasses also derive from the built-in exception a Python caller would
expect (``ValueError`` for a bad value, ``RuntimeError`` for a failed step), so
``except ValueError`` keeps working.
"""

from __future__ import annotations


def error_summary(err: BaseException, limit: int = 200) -> str:
    """``"TypeName: first line of the message"`` (cut at ``limit`` characters), for a
    one-line notice that something fell back."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:limit] if text else ''}"


class EllaError(Exception):
    """A problem with an input, an option, a file or a run directory.

    Args:
        *args: the message (Python's names for options).
        command_line: the message as the command line prints it, where it names options
            that the command line spells as flags; ``None``: the message itself.
    """

    def __init__(self, *args: object, command_line: str | None = None):
        super().__init__(*args)
        self.command_line = command_line

    def on_command_line(self) -> str:
        """The message as the command line prints it (its flags for options)."""
        return self.command_line or str(self)


class ConfigError(EllaError, ValueError):
    """An option or argument that cannot work; the message names it and its valid values."""


class RunDirectoryError(EllaError):
    """A run directory that cannot be used as asked (it holds other files, is not writable...)."""


class CheckpointError(EllaError, RuntimeError):
    """A checkpoint or saved configuration that is missing, corrupt or from another run."""


class FileWriteError(EllaError, OSError):
    """A file that could not be written (no space, a file-size limit, a name too long, no
    permission); the message names the file and the cause, and the file is as it was."""


class InputDataError(EllaError, ValueError):
    """Training or evaluation data that cannot be used (NaN pixels, labels out of range...)."""


class TrainingDivergedError(EllaError, RuntimeError):
    """The loss, the weights or the evidence stopped being finite."""


class EvidenceError(EllaError, RuntimeError):
    """The marginal likelihood could not be computed (non-finite curvature, a failed
    decomposition)."""


class DistributedError(EllaError, RuntimeError):
    """A job of several processes (torchrun) that cannot go on: another process died, or
    the processes disagree."""


class DependencyError(EllaError, ImportError):
    """A package that ella's dependencies import and that cannot be imported in this
    environment (a torchvision built for another torch); the message names the package,
    the versions and the fix."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a command, with what it leaves behind (a checkpoint to resume from,
    or none) as its message."""


__all__ = [
    "CheckpointError",
    "ConfigError",
    "DependencyError",
    "DistributedError",
    "EllaError",
    "EvidenceError",
    "InputDataError",
    "Interrupted",
    "RunDirectoryError",
    "TrainingDivergedError",
]
