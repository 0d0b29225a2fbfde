import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ella.cli import main
from ella.errors import CheckpointError, FileWriteError
from ella.io import DIGEST_KEY, atomic_write, load_torch, save_json, save_torch, values_digest
from tests.damage import flip_bits_in_tensor_data


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


# ---------------------------------------------------------------- stored values
STORED = {
    "model": {"w": torch.arange(600, dtype=torch.float32).reshape(20, 30) / 7},
    "half": torch.ones(3, dtype=torch.bfloat16),
    "scalar": torch.tensor(2.5),
    "mask": torch.tensor([True, False]),
    "optimizer": {"state": {0: {"step": torch.tensor(3.0)}}, "lr": [1e-3, 0.5]},
    "epoch": 4,
    "paths": ("fc", "conv"),
    "note": None,
}


def test_a_saved_dict_loads_with_equal_values_and_without_its_digest(tmp_path):
    save_torch(STORED, tmp_path / "c.pt")
    raw = torch.load(tmp_path / "c.pt", weights_only=True)
    assert raw[DIGEST_KEY] == values_digest(STORED)
    back = load_torch(tmp_path / "c.pt")
    assert DIGEST_KEY not in back and back.keys() == STORED.keys()
    assert torch.equal(back["model"]["w"], STORED["model"]["w"]) and back["epoch"] == 4
    assert values_digest(back) == values_digest(STORED)


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["model"].__setitem__("w", d["model"]["w"].to(torch.int32)),
        lambda d: d["model"].__setitem__("w", d["model"]["w"].reshape(30, 20)),
        lambda d: d["model"]["w"].view(-1).__setitem__(17, 0.0),
        lambda d: d["optimizer"]["state"][0].__setitem__("step", torch.tensor(4.0)),
        lambda d: d.__setitem__("epoch", 5),
        lambda d: d.__setitem__("paths", ["fc", "conv"]),
        lambda d: d["optimizer"]["lr"].append(0.1),
    ],
    ids=["cast", "reshaped", "one-value", "nested-tensor", "plain-value", "tuple-as-list", "list"],
)
def test_a_value_edited_after_writing_is_refused_with_the_fix(tmp_path, change):
    path = tmp_path / "c.pt"
    save_torch(STORED, path)
    edited = torch.load(path, weights_only=True)  # as a user's script would edit it
    change(edited)
    torch.save(edited, path)
    with pytest.raises(CheckpointError, match=f"{DIGEST_KEY}, does not match.*export again"):
        load_torch(path, fix="export again")


def test_flipped_bits_in_a_tensor_are_refused(tmp_path):
    path = tmp_path / "c.pt"
    save_torch(STORED, path)
    flip_bits_in_tensor_data(path)
    torch.load(path, weights_only=True)  # torch itself reads the damaged file
    with pytest.raises(CheckpointError, match="values differ from those that were written"):
        load_torch(path)


def test_a_file_without_a_digest_loads_as_written(tmp_path):
    torch.save({"epoch": 1, "w": torch.zeros(2)}, tmp_path / "old.pt")
    assert load_torch(tmp_path / "old.pt")["epoch"] == 1


def test_damage_that_torch_words_as_a_system_error_is_called_damage(tmp_path, monkeypatch):
    """torch's zip reader can raise ``OSError(EINVAL)`` for a damaged file: where the file's
    bytes read, the message says it is corrupt and names the fix, not the file system."""
    path = tmp_path / "exported.pt"
    save_torch(STORED, path)

    def invalid(*args, **kwargs):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(torch, "load", invalid)
    with pytest.raises(CheckpointError, match="corrupt, truncated.*export it again") as err:
        load_torch(path, fix="export it again")
    assert "file system" not in str(err.value)
