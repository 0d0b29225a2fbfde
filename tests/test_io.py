import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ella.cli import main
from ella.errors import FileWriteError
from ella.io import atomic_write, save_json


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    save_json({"a": 1}, path)

    def crash(f):
        f.write(b'{"a": ')
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(path, crash)
    assert path.read_text() == '{\n  "a": 1\n}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


# ---------------------------------------------------------------- failed writes
#: KINDS of file, each written by one child process to the path after its kind in
#: ``sys.argv`` under a file-size limit of 4 KiB; it prints the error each met, a line each
KINDS = ("checkpoint", "json", "figure")
_LIMITED_WRITE = """
import resource, sys, torch
from pathlib import Path
from ella.io import save_json, save_torch, atomic_write
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
for kind, path in zip(sys.argv[1::2], map(Path, sys.argv[2::2])):
    try:
        if kind == "checkpoint":
            save_torch({"w": torch.zeros(10_000)}, path)
        elif kind == "json":
            save_json({"rows": list(range(10_000))}, path)
        else:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            fig = plt.figure(figsize=(20, 20))
            fig.gca().imshow(torch.rand(400, 400).numpy())
            atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
        print(kind, "written")
    except Exception as err:
        print(kind, type(err).__name__, err)
"""


@pytest.fixture(scope="module")
def limited_writes(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Per kind: its folder (holding ``out.bin``, an earlier file) and what the child
    printed of its write past the file-size limit (one child for every kind)."""
    folders = {kind: tmp_path_factory.mktemp(kind) for kind in KINDS}
    argv = []
    for kind, folder in folders.items():
        (folder / "out.bin").write_bytes(b"earlier")
        argv += [kind, str(folder / "out.bin")]
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED_WRITE, *argv], capture_output=True, text=True, check=True
    )
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    return {kind: (folder, lines.get(kind, done.stderr)) for kind, folder in folders.items()}


@pytest.mark.parametrize("kind", KINDS)
def test_a_write_past_the_file_size_limit_names_the_file_and_the_limit(limited_writes, kind):
    """torch's serialiser, JSON and matplotlib alike: one error naming the file and the
    cause, the earlier file as it was, no temporary left."""
    folder, printed = limited_writes[kind]
    path = folder / "out.bin"
    assert printed.startswith(f"FileWriteError could not write {path}: "), printed
    assert "file-size limit" in printed and "Nothing was replaced" in printed
    assert path.read_bytes() == b"earlier"
    assert [p.name for p in folder.iterdir()] == ["out.bin"]


def test_each_cause_is_named_with_what_to_do(tmp_path):
    def fails(code: int):
        def write(f):
            raise OSError(code, os.strerror(code))

        return write

    for code, words in [
        (errno.ENOSPC, "the disk is full"),
        (errno.ENAMETOOLONG, "too long for the file system"),
        (errno.EACCES, "permission denied"),
        (errno.EROFS, "read-only"),
        (errno.EIO, "check the file system"),
    ]:
        with pytest.raises(FileWriteError, match=words) as caught:
            atomic_write(tmp_path / "f", fails(code))
        assert caught.value.errno == code and isinstance(caught.value, OSError)
        assert str(tmp_path / "f") in str(caught.value)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs (needs root and mount rights; skipped with the reason otherwise)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()[:120]}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.slow
def test_a_full_disk_ends_a_run_with_one_line_and_a_rerun_with_space_ends_it_alike(
    small_disk, tmp_path, finished_run
):
    """ella train on a disk that fills: exit 1, one line naming the file and a full disk,
    no results.json; resumed where there is space, the run ends as the uninterrupted one."""
    from tests.cli_runs import TINY

    (small_disk / "ballast").write_bytes(b"\0" * (256 * 1024 - 8192))  # a few KiB are left
    out = small_disk / "run"
    done = subprocess.run(
        [sys.executable, "-m", "ella", "train", "--out", str(out), *TINY],
        capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "could not write" in done.stderr and "the disk is full" in done.stderr
    assert not (out / "results.json").exists()
    moved = shutil.copytree(out, tmp_path / "moved")
    assert main(["train", "--out", str(moved), "--resume", "--no-progress"]) == 0
    ours, theirs = (json.loads((d / "results.json").read_text()) for d in (moved, finished_run))
    for key in ("test_accuracy", "test_nll", "log_marglik"):
        assert ours[key] == theirs[key]
