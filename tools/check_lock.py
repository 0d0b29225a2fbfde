"""Check the lock (``constraints.txt``) before set-up installs from it, or write its trailer.

The lock's last line is a trailer that ``tools/lock.sh`` writes (through ``--write``)::

    # lock: 112 pins, sha256 <64 hex digits>

the number of its pin lines (``name==version``) and the SHA-256 of those lines, each with
its newline, in the file's order. A lock cut anywhere (even after a line that still looks
whole, ``numpy==2``), emptied to its comments, or with a pin removed or edited by hand no
longer matches its trailer, and a lock without a pin of each package pyproject.toml names
cannot be ella's; ``tools/setup_env.sh`` runs this check before it creates or changes the
environment, and stops with one line that says what is wrong and how to get the lock back.

    python tools/check_lock.py [LOCK]          # exit 1 with that line; 0: the lock is whole
    python tools/check_lock.py --write LOCK    # (re)write LOCK's trailer from its pins

Standard library only: it runs before the environment has any package.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAILER = re.compile(r"# lock: (\d+) pins?, sha256 ([0-9a-f]{64})")
FIX = (
    "restore the committed lock (git checkout constraints.txt) or write a new one with "
    "bash tools/lock.sh"
)


def pin_lines(lines: list[str]) -> list[str]:
    """The lines of a lock that pip reads as requirements (not comments, not blank)."""
    return [ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def trailer(pins: list[str]) -> str:
    """The trailer line for these pin lines."""
    digest = hashlib.sha256("".join(f"{p}\n" for p in pins).encode()).hexdigest()
    return f"# lock: {len(pins)} pins, sha256 {digest}"


def required_names(pyproject: Path) -> list[str]:
    """The distributions pyproject.toml requires (its dependencies and its dev, docs and
    ray extras), by their canonical names; every one must have a pin."""
    text = pyproject.read_text()
    try:
        import tomllib

        project = tomllib.loads(text)["project"]
        extras = project.get("optional-dependencies", {})
        reqs = [*project["dependencies"]]
        reqs += [r for extra in ("dev", "docs", "ray") for r in extras.get(extra, [])]
    except ImportError:  # Python 3.10: the quoted strings of those arrays
        arrays = re.findall(r"^(?:dependencies|dev|docs|ray) = \[(.*?)^\]", text, re.M | re.S)
        reqs = [r for a in arrays for r in re.findall(r'^\s*"([^"]+)"', a, re.M)]
    return sorted({canonical(re.split(r"[<>=!~ \[;(]", r, maxsplit=1)[0]) for r in reqs})


def canonical(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def problems(text: str, required: list[str]) -> list[str]:
    """What makes ``text`` not a whole lock: empty where it is one."""
    lines = text.split("\n")
    pins = pin_lines(lines)
    found = []
    if not pins:
        found.append("it pins nothing (comments only)")
    names = [canonical(p.split("==")[0].strip()) for p in pins]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        found.append(f"it pins {', '.join(twice)} twice")
    missing = [n for n in required if n not in names]
    if missing and pins:
        them = "them" if len(missing) > 1 else "it"
        found.append(f"it pins no {', '.join(missing)} (pyproject.toml requires {them})")
    marks = [(i, m) for i, ln in enumerate(lines) if (m := TRAILER.fullmatch(ln.strip()))]
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    if not marks:
        found.append(
            "its last line is not the trailer tools/lock.sh writes (# lock: N pins, sha256 "
            "...): it was cut or written by hand"
        )
    elif len(marks) > 1:
        found.append(f"it has {len(marks)} trailer lines, where tools/lock.sh writes one")
    else:
        at, mark = marks[0]
        if at != last:
            found.append(f"lines follow its trailer (line {at + 1}): it was edited by hand")
        if int(mark[1]) != len(pins):
            found.append(f"it has {len(pins)} pins where its trailer says {mark[1]}")
        elif mark[2] != trailer(pins).rsplit(" ", 1)[1]:
            found.append("its pins are not the ones its trailer's checksum was written for")
    return found


def check(lock: Path, pyproject: Path) -> str | None:
    """The one-line refusal of ``lock`` (naming the fix), or ``None`` where it is whole."""
    try:
        text = lock.read_bytes().decode("utf-8", errors="replace")
    except OSError as err:
        return f"{lock.name} cannot be read ({err.strerror or err}); {FIX}"
    found = problems(text, required_names(pyproject))
    if not found:
        return None
    return f"{lock.name} is not the whole lock: {'; '.join(found)}; {FIX}"


def write(lock: Path) -> None:
    """(Re)write ``lock``'s trailer as its last line, from its pin lines."""
    lines = [ln for ln in lock.read_text().split("\n") if not TRAILER.fullmatch(ln.strip())]
    while lines and not lines[-1].strip():
        lines.pop()
    lock.write_text("\n".join([*lines, trailer(pin_lines(lines))]) + "\n")


def main(argv: list[str]) -> int:
    """The command line: ``[--write] [LOCK]`` (``constraints.txt`` of the checkout)."""
    args = [a for a in argv if a != "--write"]
    lock = Path(args[0]) if args else ROOT / "constraints.txt"
    if "--write" in argv:
        write(lock)
        return 0
    refusal = check(lock, lock.resolve().parent / "pyproject.toml")
    if refusal:
        print(f"[setup] {refusal}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
