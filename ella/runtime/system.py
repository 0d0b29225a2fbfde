"""What this process may use of the machine: CPUs (affinity and cgroup quota) and memory."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

from ella.errors import ConfigError

#: environment variables with which a user chooses the thread count themselves
THREAD_VARIABLES = ("ELLA_THREADS", "OMP_NUM_THREADS")


def _cgroup_cpu_limit() -> float | None:
    """CPUs allowed by a cgroup quota (v2 ``cpu.max`` or v1 ``cfs_quota_us``), or None."""
    v2 = Path("/sys/fs/cgroup/cpu.max")
    try:
        if v2.is_file():
            quota, period = v2.read_text().split()[:2]
            return None if quota == "max" else int(quota) / int(period)
        v1 = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
        if v1.is_file():
            quota = int(v1.read_text())
            period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
            return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None
    return None


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = _cgroup_cpu_limit()
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)


def configure_threads() -> int:
    """Set torch's intra-op threads to :func:`available_cpus` unless the user chose a number.

    ``ELLA_THREADS`` (or ``OMP_NUM_THREADS``) set in the environment wins. Without
    this, torch may start one thread per core of the host even when the process
    is limited to fewer, and the threads then oversubscribe the cores it has.

    Returns:
        The thread count in use.
    """
    threads = chosen_threads() or available_cpus()
    torch.set_num_threads(threads)
    return threads


def chosen_threads() -> int | None:
    """The thread count the user chose in :data:`THREAD_VARIABLES` (the first that is an
    int of 1 or more), or None."""
    for name in THREAD_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                threads = int(value)
            except ValueError:
                continue
            if threads >= 1:
                return threads
    return None


def available_memory() -> int | None:
    """Bytes of memory available to new allocations (``MemAvailable``), or None if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(n: float) -> str:
    """``n`` bytes in decimal units, three significant digits (``1.5 GB``)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def check_device_name(name: str) -> torch.device:
    """The torch device ``name`` names; a ConfigError for a name torch does not know."""
    try:
        return torch.device(name)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(
            f"unknown device {name!r}; use cpu, cuda or cuda:N (a GPU index)"
        ) from None


def resolve_device(name: str) -> torch.device:
    """The device ``name`` names, refused with a clear error if this machine lacks it."""
    device = check_device_name(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(
                f"--device {name}: torch sees no CUDA GPU on this machine; use --device cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"--device {name}: this machine has {torch.cuda.device_count()} CUDA GPU(s)"
            )
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {name}: MPS is not available here; use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"--device {name}: ella runs on cpu, cuda or mps")
    return device


__all__ = [
    "available_cpus",
    "available_memory",
    "check_device_name",
    "chosen_threads",
    "configure_threads",
    "format_bytes",
    "resolve_device",
]
