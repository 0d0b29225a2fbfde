import pytest
import torch

from ella.testing import assert_equivariant, equivariance_errors


def test_assert_equivariant_passes_for_invariant_function():
    x = torch.randn(3, 2, 5, 5)
    assert_equivariant(lambda t: t.sum(dim=(-2, -1)), "D4", x)


def test_assert_equivariant_passes_for_equivariant_function():
    x = torch.randn(3, 2, 5, 5)
    assert_equivariant(torch.relu, "D4", x, out_action="image")


def test_assert_equivariant_fails_for_broken_symmetry():
    x = torch.randn(3, 2, 5, 5)
    with pytest.raises(AssertionError, match="not equivariant under C4"):
        assert_equivariant(lambda t: t[..., 0, :].sum(-1), "C4", x)


def test_errors_are_per_element():
    x = torch.randn(2, 1, 4, 4)
    errors = equivariance_errors(lambda t: t[..., 0, 0], "C4", x)
    assert set(errors) == {0, 1, 2, 3}
    assert errors[0] == 0.0 and max(errors.values()) > 0


def test_unknown_action():
    with pytest.raises(ValueError, match="unknown action"):
        equivariance_errors(torch.relu, "C4", torch.randn(1, 1, 4, 4), out_action="rotated")


def test_nan_outputs_fail():
    x = torch.randn(2, 1, 4, 4)
    with pytest.raises(AssertionError, match="not finite"):
        assert_equivariant(lambda t: t.sum(dim=(-2, -1)) * float("nan"), "C4", x)


def test_nan_only_on_transformed_inputs_fails():
    x = torch.randn(2, 1, 4, 4)

    def nan_off_identity(t):
        out = t.sum(dim=(-2, -1))
        return out if torch.equal(t, x) else out * float("nan")

    with pytest.raises(AssertionError, match="not finite for elements \\[1, 2, 3\\]"):
        assert_equivariant(nan_off_identity, "C4", x)


def test_no_elements_is_a_clear_error():
    with pytest.raises(ValueError, match="elements is empty"):
        assert_equivariant(torch.relu, "C4", torch.randn(1, 1, 4, 4), elements=[])
