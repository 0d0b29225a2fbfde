"""The native Kronecker factors against the stock ASDL and Curvlinops backends and mathematics.

The stock backends unfold every convolution with zero padding, whatever its
``padding_mode``; ella's paths pad circularly. So the native factors are
compared with the stock ones (a) on the same network with zero-padded
convolutions, and (b) for circular padding, against the stock backends on an
equivalent network whose circular padding is an explicit ``F.pad`` before a
``padding=0`` convolution (the same function and weights); (c) a test shows
from the weight gradient which patches are right.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ella.groups import get_group
from ella.marglik import LaplaceEvidence, PriorStructure, UnsupportedModuleError
from ella.marglik.kfac_products import conv_patches
from ella.marglik.laplace_internals import kron_eigenvalues, kron_factors
from ella.marglik.native import NativeGGN
from ella.marglik.per_channel import PerChannelFCPath, PerChannelView
from ella.models import mixer
from ella.nn import GroupPool, Lift, RelaxedLayer
from tests.cases import NETWORKS, NONTRIVIAL_GROUPS, NoHead
from tests.marglik.problems import (
    assert_same_evidence,
    blr_log_evidence,
    blr_problem,
    fitted,
    zero_padded,
)


class CircularPad(nn.Module):
    def __init__(self, pad: tuple[int, ...]):
        super().__init__()
        self.pad = pad

    def forward(self, x):
        return F.pad(x, self.pad, mode="circular")


def explicit_padding(model: nn.Module) -> nn.Module:
    """The same function with every circular conv as ``F.pad`` + a ``padding=0`` conv
    (the weights are shared, parameter order kept)."""
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, m in list(parent.named_children()):
            if isinstance(m, nn.Conv2d) and m.padding_mode == "circular":
                conv = nn.Conv2d(
                    m.in_channels, m.out_channels, m.kernel_size, m.stride, 0, m.dilation,
                    bias=m.bias is not None,
                )  # fmt: skip
                conv.weight, conv.bias = m.weight, m.bias
                setattr(
                    parent,
                    name,
                    nn.Sequential(CircularPad(m._reversed_padding_repeated_twice), conv),
                )
    return model


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


#: the models Curvlinops checks too: one of each kind of path and layer; ASDL, which
#: agrees with Curvlinops to float precision on stock modules, checks every model
CURVLINOPS_MODELS = [
    "C4 mixed", "trivial fc only rank 3", "D4 fc+gconv+residual no head", "D4 lone gconv path",
]  # fmt: skip


@pytest.mark.parametrize(
    "backend, name",
    [("asdl", name) for name in NETWORKS]
    + [pytest.param("curvlinops", name, marks=pytest.mark.slow) for name in CURVLINOPS_MODELS],
)
def test_native_equals_stock_backends_with_zero_padding(float64, name, backend):
    model = zero_padded(NETWORKS[name]())
    assert_same_evidence(fitted(model, "native"), fitted(model, backend))


@pytest.mark.parametrize(
    "name", ["C4 mixed", "D4 mixed shared", "C4 mixed no head", "D4 fc+gconv+residual no head"]
)
def test_native_equals_asdl_on_explicit_circular_padding(float64, name):
    model = NETWORKS[name]()
    assert_same_evidence(fitted(model, "native"), fitted(explicit_padding(model), "asdl"))


@pytest.mark.parametrize("name", ["C4 mixed", "D4 fc+gconv no head"])
def test_monte_carlo_ggn_samples_the_same_labels_as_asdl(float64, name):
    model = zero_padded(NETWORKS[name]())
    assert_same_evidence(fitted(model, "native", "mc", seed=3), fitted(model, "asdl", "mc", seed=3))


@CUDA
@pytest.mark.parametrize(
    "name", ["C4 mixed", "D4 mixed shared", "C4 mixed max downsampling", "D4 lone gconv path"]
)
def test_native_on_cuda_equals_native_on_cpu(float64, name):
    """The same code on a GPU: exact-GGN factors, evidence and gradient as on the CPU."""
    model = NETWORKS[name]()
    on_cpu = fitted(copy.deepcopy(model), "native")
    assert_same_evidence(fitted(model, "native", device="cuda"), on_cpu)


@CUDA
@pytest.mark.parametrize("name", ["C4 mixed", "D4 fc+gconv no head"])
def test_monte_carlo_ggn_on_cuda_samples_the_same_labels_as_asdl(float64, name):
    model = zero_padded(NETWORKS[name]())
    native = fitted(copy.deepcopy(model), "native", "mc", seed=3, device="cuda")
    assert_same_evidence(native, fitted(model, "asdl", "mc", seed=3, device="cuda"))


def test_monte_carlo_ggn_is_unbiased(float64):
    """The mean of many MC factors approaches the exact ones (B factors; A is exact)."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 6), nn.Tanh(), nn.Linear(6, 4))
    exact = kron_factors(fitted(model, "native").laplace)
    draws = [kron_factors(fitted(model, "native", "mc", seed=s).laplace) for s in range(400)]
    for i, block in enumerate(exact):
        b = torch.stack([d[i][0] for d in draws])
        stderr = b.std(0) / math.sqrt(len(draws))
        assert ((b.mean(0) - block[0]).abs() <= 5 * stderr + 1e-12).all()


def test_circular_patches_reproduce_the_weight_gradient(float64):
    """Sum over positions of (output gradient) (patch)^T is the weight gradient exactly when
    the patches are the circularly padded ones; the zero-padded patches of the stock
    backends are not."""
    conv = nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular")
    x = torch.randn(4, 2, 5, 5)
    out = conv(x)
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, conv.weight, g)
    rows = conv_patches(conv, x)  # (M, L, D)
    g_rows = g.flatten(2).transpose(1, 2)  # (M, L, C_out)
    torch.testing.assert_close(torch.einsum("mlc,mld->cd", g_rows, rows), grad.flatten(1))
    zero_rows = F.unfold(x, 3, padding=1).transpose(1, 2)
    assert not torch.allclose(torch.einsum("mlc,mld->cd", g_rows, zero_rows), grad.flatten(1))


@pytest.mark.parametrize("delta", [0.1, 7.5])
def test_native_regression_matches_bayesian_linear_regression(float64, delta):
    X, y, sigma = blr_problem()
    model = nn.Linear(X.shape[1], 1, bias=False)
    A = X.T @ X / sigma**2 + delta * torch.eye(X.shape[1])
    with torch.no_grad():
        model.weight.copy_(torch.linalg.solve(A, X.T @ y[:, 0] / sigma**2)[None])
    evidence = LaplaceEvidence(
        model, PriorStructure(model, "scalar"), likelihood="regression", sigma_noise=sigma
    )
    assert evidence.backend == "native"
    evidence.fit(DataLoader(TensorDataset(X, y), batch_size=16))
    laplace = evidence.log_marginal_likelihood(torch.tensor([math.log(delta)])).item()
    assert laplace == pytest.approx(blr_log_evidence(X, y, sigma, delta).item(), rel=1e-6)


def test_unsupported_modules_get_the_clear_error():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(72, 3))
    with pytest.raises(UnsupportedModuleError, match=r"1 \(BatchNorm2d\)"):
        NativeGGN(model, "classification")
    grouped = nn.Sequential(nn.Conv2d(2, 2, 3, groups=2), nn.Flatten(), nn.Linear(72, 3))
    with pytest.raises(UnsupportedModuleError, match="groups=1"):
        NativeGGN(grouped, "classification")


@pytest.mark.parametrize("frozen", ["conv", "gconv"])
def test_a_frozen_path_of_the_fused_convolution_gets_no_block(float64, frozen):
    """Freezing one of the two fused paths leaves the other's factors as ASDL's."""
    model = NoHead("C4", ("fc", "conv", "gconv"))
    for layer in (model.layer1, model.layer2):
        layer.paths[frozen].requires_grad_(False)
    assert_same_evidence(fitted(model, "native"), fitted(explicit_padding(model), "asdl"))


def test_native_needs_a_kron_structure():
    model = nn.Linear(3, 2)
    from ella.errors import ConfigError

    with pytest.raises(ConfigError, match="Kronecker factors only"):
        LaplaceEvidence(model, PriorStructure(model), structure="full", backend="native")
    assert LaplaceEvidence(model, PriorStructure(model), structure="full").backend == "asdl"


def test_group_copies_share_the_gconv_filter_as_expand(float64):
    """A GCONV-only layer on a constant image: every group copy and position sees the same
    patch, so the input factor is |G| L copies of it divided by L (KFAC-expand)."""
    group = get_group("C4")
    layer = RelaxedLayer(1, 2, 4, "C4", paths=("gconv",))
    model = nn.Sequential(Lift("C4"), layer, GroupPool("C4"), nn.Flatten(), nn.Linear(32, 3))
    x = torch.ones(1, 1, 4, 4)
    la = LaplaceEvidence(model, PriorStructure(model))
    la.fit(DataLoader(TensorDataset(x, torch.tensor([1])), batch_size=1))
    a = kron_factors(la.laplace)[0][1]  # (G k^2)^2 input factor of the full group conv
    patch = torch.ones(group.order * 9)
    torch.testing.assert_close(a, group.order * torch.outer(patch, patch) / 1)


def test_chunking_a_batch_changes_nothing(float64):
    model = PerChannelView(NETWORKS["C4 mixed"]()).network
    x, y = torch.randn(10, 1, 8, 8), torch.randint(10, (10,))
    results = []
    for chunk in (3, 128):
        loss, kron = NativeGGN(model, "classification", chunk_size=chunk).kron(x, y, N=40)
        results.append((loss, kron.kfacs))
    torch.testing.assert_close(results[0][0], results[1][0])
    for block_a, block_b in zip(results[0][1], results[1][1], strict=True):
        for a, b in zip(block_a, block_b, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


class DetachedInput(nn.Module):
    """Cuts the graph between the input and the network (as a user's preprocessing
    might): the layers' outputs then depend on the input only through the weights."""

    def forward(self, x):
        return x.detach()


def test_a_graph_without_the_input_gives_the_same_factors(float64):
    """The factors are computed with the input, not the weights, in the graph; where a
    layer's output does not depend on the input differentiably the fit falls back to
    the weights' graph, with the same factors as without the cut."""
    model = PerChannelView(NETWORKS["C4 mixed"]()).network
    cut = nn.Sequential(DetachedInput(), model)
    x, y = torch.randn(6, 1, 8, 8), torch.randint(10, (6,))
    _, plain = NativeGGN(model, "classification").kron(x, y, N=6)
    _, fallback = NativeGGN(cut, "classification").kron(x, y, N=6)
    for block_a, block_b in zip(plain.kfacs, fallback.kfacs, strict=True):
        for a, b in zip(block_a, block_b, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_a_fit_leaves_every_parameters_requires_grad_as_it_was(float64):
    model = NETWORKS["C4 mixed"]()
    model.layer1.paths["conv"].requires_grad_(False)  # a path the user froze
    before = {n: p.requires_grad for n, p in model.named_parameters()}
    network = PerChannelView(model).network
    NativeGGN(network, "classification").kron(torch.randn(4, 1, 8, 8), torch.randint(10, (4,)), N=4)
    assert {n: p.requires_grad for n, p in model.named_parameters()} == before
    assert not all(before.values()) and any(before.values())


@pytest.mark.parametrize(
    "shape, kernel",
    [
        ((3, 2, 6, 5), (3, 3)),
        ((2, 4, 2, 2), (3, 3)),
        ((2, 3, 5, 7), (5, 3)),
        ((4, 1, 1, 3), (1, 3)),
    ],
)
def test_circular_patch_gram_equals_the_unfolded_gram(float64, shape, kernel):
    """The lag form of the circular patches' gram is the gram of the unfolded patches,
    also on maps smaller than the kernel's reach (lags that wrap around)."""
    from ella.marglik.kfac_products import circular_patch_gram

    x = torch.randn(*shape)
    conv = nn.Conv2d(shape[1], 2, kernel, padding=(kernel[0] // 2, kernel[1] // 2),
                     padding_mode="circular")  # fmt: skip
    if min(shape[-2:]) < max(k // 2 for k in kernel):  # torch's circular pad needs pad <= size
        pytest.skip("F.pad cannot pad this map circularly")
    rows = conv_patches(conv, x).reshape(-1, shape[1] * kernel[0] * kernel[1])
    torch.testing.assert_close(circular_patch_gram(x, kernel), rows.T @ rows)


@pytest.mark.parametrize("classes", [1, 2, 10])
@pytest.mark.parametrize("spread", [1.0, 40.0])  # 40: predictions confident to 1e-17
def test_the_softmax_hessian_root_has_k_minus_1_columns(float64, classes, spread):
    from ella.marglik.native import softmax_hessian_root

    p = (spread * torch.randn(6, classes, generator=torch.Generator().manual_seed(0))).softmax(-1)
    columns = softmax_hessian_root(p)
    assert columns.shape == (max(classes - 1, 1), 6, classes)
    hessian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    torch.testing.assert_close(
        torch.einsum("vmk,vml->mkl", columns, columns), hessian, rtol=0, atol=1e-15
    )


@pytest.mark.parametrize("classes", [1, 2, 10])
@pytest.mark.parametrize("spread", [1.0, 40.0])  # 40: predictions confident to 1e-17
def test_the_stratified_root_is_the_softmax_hessian_in_expectation(float64, classes, spread):
    """Two columns per example; enumerating the second column's class with its
    probability p_c / (1 - p_top) gives diag(p) - p p^T exactly; a sampled second column
    is one of those with a positive probability."""
    from ella.marglik.native import stratified_root

    g = torch.Generator().manual_seed(0)
    p = (spread * torch.randn(6, classes, generator=g)).softmax(-1)
    rest = p.scatter(-1, p.argmax(-1, keepdim=True), 0.0)
    chance = (rest / rest.sum(-1, keepdim=True)).nan_to_num(0.0)  # (M, K)

    def outer(v):
        return torch.einsum("mk,ml->mkl", v, v)

    enumerated = [stratified_root(p, others=torch.full((6,), c)) for c in range(classes)]
    expected = outer(enumerated[0][0])  # the top class's column, the same for every c
    for c, columns in enumerate(enumerated):
        assert columns.shape == (2, 6, classes)
        expected = expected + chance[:, c, None, None] * outer(columns[1])
    hessian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]
    torch.testing.assert_close(expected, hessian, rtol=0, atol=1e-15)
    sampled = stratified_root(p, generator=g)
    assert sampled.shape == (2, 6, classes)
    for m in range(6):
        if rest[m].sum() > 0:
            assert any(
                chance[m, c] > 0 and torch.equal(sampled[1, m], enumerated[c][1, m])
                for c in range(classes)
            )
        else:  # a certain prediction: the second column has weight 0
            assert not sampled[1, m].any()


def test_stratified_ggn_is_unbiased_and_needs_the_native_backend(float64):
    """The mean of many stratified factors approaches the exact ones (B factors; A is
    exact); a stock backend or a regression is refused with the fix named."""
    from ella.errors import ConfigError

    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 6), nn.Tanh(), nn.Linear(6, 4))
    exact = kron_factors(fitted(model, "native").laplace)
    draws = [
        kron_factors(fitted(model, "native", "stratified", seed=s).laplace) for s in range(200)
    ]
    for i, block in enumerate(exact):
        b = torch.stack([d[i][0] for d in draws])
        stderr = b.std(0) / math.sqrt(len(draws))
        assert ((b.mean(0) - block[0]).abs() <= 5 * stderr + 1e-12).all()
    prior = PriorStructure(model)
    with pytest.raises(ConfigError, match="native backend"):
        LaplaceEvidence(model, prior, backend="asdl", ggn="stratified")
    with pytest.raises(ConfigError, match="regression"):
        LaplaceEvidence(model, prior, likelihood="regression", ggn="stratified")


@pytest.mark.parametrize("group", NONTRIVIAL_GROUPS)
def test_lifted_copies_pixel_factors_are_permutations_of_the_first(float64, group, monkeypatch):
    """The first layer's FC path gets the lifted images: copy h's pixel factor is summed
    as copy 0's with pixels permuted, and its eigenvalues are copy 0's, decomposed once
    (the factors and evidence equal the stock backends' in the tests above)."""
    from ella.marglik import laplace_internals
    from ella.marglik.kfac_blocks import FCPathBlock

    order = get_group(group).order
    model = mixer(1, 10, 8, group, width=2)
    real, shapes = torch.linalg.eigvalsh, []

    def counted(matrix, UPLO="L"):  # one entry per matrix, batched or not
        shapes.extend([tuple(matrix.shape[-2:])] * (matrix.shape[0] if matrix.ndim == 3 else 1))
        return real(matrix, UPLO=UPLO)

    monkeypatch.setattr(torch.linalg, "eigvalsh", counted)
    evidence = fitted(model, "native")
    first, *rest = [b for b in evidence.laplace.backend.blocks if isinstance(b, FCPathBlock)]
    assert first.copies_permuted and not any(b.copies_permuted for b in rest)
    factors, eigenvalues = kron_factors(evidence.laplace), kron_eigenvalues(evidence.laplace)
    for (_, a), (_, lam) in zip(factors[:order], eigenvalues[:order], strict=True):
        assert a.shape == (64, 64)  # layer 1's pixel maps, one per copy: [B_i, A_i]
        torch.testing.assert_close(lam, real(a).clamp(min=0.0))
    with_marks = shapes.count((64, 64))
    shapes.clear()
    monkeypatch.setattr(laplace_internals, "_permuted_source", lambda factor: None)
    kron_eigenvalues(fitted(model, "native").laplace)
    assert shapes.count((64, 64)) - with_marks == order - 1


def test_a_permutation_mark_that_does_not_hold_is_ignored(float64):
    from ella.marglik.laplace_internals import LazyKronDecomposed, mark_permuted

    torch.manual_seed(0)
    rows = torch.randn(20, 6)
    a0 = rows.T @ rows
    perm = torch.tensor([2, 0, 1, 5, 3, 4])
    a1, wrong = a0[perm][:, perm], a0[perm][:, perm] + 1e-9 * torch.eye(6)
    mark_permuted(a1, a0, perm)
    mark_permuted(wrong, a0, perm)
    decomposed = LazyKronDecomposed([[a0], [a1], [wrong]])
    for (values,), factor in zip(decomposed.eigenvalues, (a0, a1, wrong), strict=True):
        torch.testing.assert_close(values, torch.linalg.eigvalsh(factor).clamp(min=0.0))
    for (vectors,), factor in zip(decomposed.eigenvectors, (a0, a1, wrong), strict=True):
        values = torch.linalg.eigvalsh(factor)
        torch.testing.assert_close(vectors.T @ factor @ vectors, torch.diag(values))


@pytest.mark.parametrize("size", [4, 24])  # 24 x 24: pixel factors from upper_gram
def test_pixel_sums_of_a_batch_whose_later_chunk_is_not_permuted(float64, size):
    """A chunk whose copies are not permutations after chunks whose copies were: the
    running sum of copy 0 becomes every copy's before this chunk is added."""
    from ella.marglik.kfac_blocks import FCPathBlock
    from ella.marglik.kfac_products import mirror_upper
    from ella.nn.paths import FCPath

    torch.manual_seed(0)
    path = PerChannelFCPath(FCPath(1, 2, size, "C4"))
    block = FCPathBlock(path)
    lifted = Lift("C4")(torch.randn(5, 1, size, size))  # (5, 4, 1, s, s): copies permuted
    chunks = [lifted, lifted.flip(0), torch.randn(3, 4, 1, size, size)]
    totals, expected = None, 0
    for z in chunks:
        block.hook()
        path(z)
        x = path._capture["x"]
        expected = expected + x.transpose(1, 2) @ x
        totals = block.input_sums(totals)
    assert not block.copies_permuted
    torch.testing.assert_close(mirror_upper(totals[0]), expected)
    # all chunks permuted: copy 0's sum only, every copy's once assembled
    totals = None
    for z in chunks[:2]:
        block.hook()
        path(z)
        totals = block.input_sums(totals)
    n = size * size
    assert block.copies_permuted and totals[0].shape == (1, n, n)
    b_sums = [torch.zeros(4, 8, 8), torch.zeros(8, n, n)]
    pixel = [a for _, a in block.assemble(totals, b_sums, n_data=1)[:4]]
    x = torch.cat([chunks[0], chunks[1]]).reshape(10, 4, n).transpose(0, 1)
    torch.testing.assert_close(torch.stack(pixel), x.transpose(1, 2) @ x)


@pytest.mark.parametrize("d", [512, 515, 784])
def test_upper_gram_summed_and_mirrored_is_the_gram(float64, d):
    from ella.marglik.kfac_products import gram, mirror_upper, upper_gram

    torch.manual_seed(0)
    chunks = [torch.randn(3, n, d) for n in (7, 5)]
    total = None
    for rows in chunks:
        total = upper_gram(rows, total)
    expected = sum(gram(rows) for rows in chunks)
    assert not torch.allclose(total, expected)  # the blocks below the diagonal are missing
    torch.testing.assert_close(mirror_upper(total), expected)


def test_fc_factors_from_upper_grams_equal_full_grams(float64, monkeypatch):
    """24 x 24 images: the FC paths' pixel factors (576 x 576) come from upper_gram; the
    same fit with every product full gives the same factors, chunks and batches."""
    from ella.marglik import kfac_products

    model = PerChannelView(mixer(1, 10, 24, "C4", width=1, blocks=((1, 1), (1, 2)))).network
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(9, 1, 24, 24, generator=g), torch.randint(10, (9,), generator=g)
    results = []
    for minimum in (kfac_products.UPPER_GRAM_MIN_SIZE, 10**9):
        monkeypatch.setattr(kfac_products, "UPPER_GRAM_MIN_SIZE", minimum)
        ggn = NativeGGN(model, "classification", chunk_size=4)
        results.append([f for block in ggn.kron(x, y, N=9)[1].kfacs for f in block])
    assert any(f.shape[-1] == 576 for f in results[0])
    for ours, full in zip(*results, strict=True):
        torch.testing.assert_close(ours, full, rtol=1e-12, atol=1e-12)
