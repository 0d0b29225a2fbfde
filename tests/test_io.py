import pytest

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
