"""The third-party imports that break for reasons outside ella, each turned into one line.

ella never imports torchvision, but torchmetrics (which laplace-torch imports) imports it
whenever it is installed. A torchvision built for another torch (pip took torch from the
PyTorch CPU index and torchvision from PyPI, or the reverse) then fails that import with
``RuntimeError: operator torchvision::nms does not exist`` (or an undefined symbol),
raised from inside torchmetrics with no word of ella. :func:`import_laplace`, which
``ella.marglik`` calls before anything imports laplace-torch, raises a
:class:`~ella.errors.DependencyError` instead, which names both versions and the fix.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os

from ella.errors import DependencyError, error_summary

__all__ = ["broken_torchvision", "import_laplace"]

#: the fix for a torchvision that does not match torch (ella needs no torchvision)
TORCHVISION_FIX = (
    "ella does not use torchvision: `pip uninstall torchvision`, or install the torchvision "
    "release made for this torch from the index torch came from (CPU: "
    "`pip install torchvision --index-url https://download.pytorch.org/whl/cpu`)"
)


def import_laplace() -> None:
    """Import laplace-torch (and with it torchmetrics and whatever torchmetrics imports).

    Raises:
        DependencyError: where the import fails inside torchvision, naming its version,
            torch's and the fix; any other failure is raised as it is.
    """
    try:
        import laplace  # noqa: F401
    except Exception as err:
        message = broken_torchvision(err)
        if message is None:
            raise
        raise DependencyError(message) from None


def broken_torchvision(err: BaseException) -> str | None:
    """The one-line message for ``err`` if it was raised by importing torchvision (a
    frame of its traceback in torchvision's files, or its message names torchvision),
    else ``None`` (also for a torchvision that is not installed: that says so itself)."""
    if isinstance(err, ModuleNotFoundError) and err.name == "torchvision":
        return None
    if not (_raised_in_torchvision(err) or "torchvision" in str(err)):
        return None
    import torch

    try:
        vision = f"torchvision {md.version('torchvision')}"
    except md.PackageNotFoundError:
        vision = "torchvision"
    spec = _spec("torchvision")
    where = f" ({os.path.dirname(spec.origin)})" if spec is not None and spec.origin else ""
    return (
        f"{vision}{where} cannot be imported with torch {torch.__version__} "
        f"({error_summary(err, 120)}), and laplace-torch's torchmetrics imports it whenever "
        f"it is installed; {TORCHVISION_FIX}"
    )


def _raised_in_torchvision(err: BaseException) -> bool:
    tb = err.__traceback__
    while tb is not None:
        parts = os.path.normpath(tb.tb_frame.f_code.co_filename).split(os.sep)
        if "torchvision" in parts[:-1]:
            return True
        tb = tb.tb_next
    return False


def _spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
