"""ella.rundir: a checkpoint resumes only under the configuration it was saved with, options
added since reading as what they meant then."""

import pytest


def test_an_option_added_after_the_checkpoint_counts_as_its_default(tmp_path):
    from ella.errors import CheckpointError
    from ella.io import save_torch
    from ella.rundir import load_checkpoint
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
    from ella.io import save_torch
    from ella.rundir import load_checkpoint
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
