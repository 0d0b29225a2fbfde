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


def test_an_option_added_after_the_checkpoint_counts_as_its_default(tmp_path):
    from ella.errors import CheckpointError
    from ella.io import load_checkpoint, save_torch
    from ella.train import TrainConfig

    saved = TrainConfig().to_dict()
    del saved["validation_size"]  # a checkpoint written before the option existed
    save_torch({"config": saved}, tmp_path / "checkpoint.pt")
    assert load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig())["config"] == saved
    with pytest.raises(CheckpointError, match=r"\['validation_size'\]"):
        load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig(validation_size=10))


def test_an_option_whose_default_changed_counts_as_what_ella_did_before_it(tmp_path):
    # norm did not exist before instance normalisation; those runs had none, which is no
    # longer the default: such a checkpoint resumes only with --norm none
    from ella.errors import CheckpointError
    from ella.io import load_checkpoint, save_torch
    from ella.train import TrainConfig

    saved = TrainConfig().to_dict()
    del saved["norm"]
    save_torch({"config": saved}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"\['norm'\]"):
        load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig())
    assert load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig(norm="none"))["config"] == saved
    # every path started at its random weights before zero_init (a tuple option) existed
    saved = TrainConfig().to_dict()
    del saved["zero_init"]
    save_torch({"config": saved}, tmp_path / "checkpoint.pt")
    with pytest.raises(CheckpointError, match=r"\['zero_init'\]"):
        load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig())
    assert load_checkpoint(tmp_path / "checkpoint.pt", TrainConfig(zero_init=()))["config"] == saved
