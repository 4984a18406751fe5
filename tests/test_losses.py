"""Every loss against a direct, loop-by-loop transcription of its equation on small tensors."""

import math

import pytest
import torch

from pipeline.errors import PipelineError
from pipeline.losses import (
    GaussianNegatives,
    distillation_loss,
    draw_direction,
    gaussian_share,
    icnce,
    ictn,
    info_nce,
    info_nce_logits,
    joint_icnce,
    tensor_norm_loss,
    twin_info_nce,
    twin_objective,
)
from pipeline.modeling import TwinOutput
from pipeline.declarations.loss_terms import validate_loss_names

TAU = 0.05


def cos(u, v):
    return float(u @ v) / (float(u.norm()) * float(v.norm()))


def other_view(i):
    return i + 1 if i % 2 == 0 else i - 1


def ref_info_nce(z1, z2, noise=(), weight=1.0, tau=TAU):
    """SimCSE Eq. 4 / GS-InfoNCE Eq. 2: one term per anchor i."""
    total = 0.0
    for i in range(len(z1)):
        denominator = sum(math.exp(cos(z1[i], z2[j]) / tau) for j in range(len(z2)))
        denominator += weight * sum(math.exp(cos(g, z1[i]) / tau) for g in noise)
        total += -math.log(math.exp(cos(z1[i], z2[i]) / tau) / denominator)
    return total / len(z1)


def ref_icnce(a, b, noise=()):
    """TNCSE Eq. 5: rows of a against b, same-row entry left out, target the other view."""
    total = 0.0
    for i in range(len(a)):
        denominator = sum(math.exp(cos(a[i], b[j]) / TAU) for j in range(len(b)) if j != i)
        denominator += sum(math.exp(cos(g, a[i]) / TAU) for g in noise)
        total += -math.log(math.exp(cos(a[i], b[other_view(i)]) / TAU) / denominator)
    return total / len(a)


def ref_tensor_norm(last_i, last_j, pooled_i, pooled_j, factor=0.5):
    """TNCSE Eq. 6 over sentences k: anchor view 2k of tower i, positive view 2k+1 of tower j."""
    terms = []
    for k in range(len(last_i) // 2):
        s = cos(last_i[2 * k], last_j[2 * k + 1])
        if s <= 0:
            s = 1e-4
        a, b = pooled_i[2 * k], pooled_j[2 * k + 1]
        terms.append(-math.log(s) * float((a - b).norm()) / (float(a.norm()) + float(b.norm())))
    return factor * sum(terms) / len(terms)


def close(tensor, value):
    return abs(tensor.item() - value) < 1e-5 * max(1.0, abs(value))


@pytest.fixture
def twin_vectors():
    generator = torch.Generator().manual_seed(0)
    # 3 sentences, 2 views each, 5 dimensions, (tower, view, dim); views of a sentence kept close
    sentences = torch.randn(2, 3, 5, generator=generator)
    last = sentences.repeat_interleave(2, dim=1) + 0.3 * torch.randn(2, 6, 5, generator=generator)
    pooled = 2 * torch.randn(2, 6, 5, generator=generator)
    cross = last + 0.5 * torch.randn(2, 6, 5, generator=generator)
    return last, pooled, cross


def test_info_nce_simcse_form():
    generator = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(4, 6, generator=generator), torch.randn(4, 6, generator=generator)
    assert close(info_nce(z1, z2), ref_info_nce(z1, z2))
    assert close(info_nce(z1, z2, temperature=0.1), ref_info_nce(z1, z2, tau=0.1))


def test_twin_info_nce_masks_self_similarity(twin_vectors):
    last, _, _ = twin_vectors
    assert close(twin_info_nce(last[0]), ref_icnce(last[0], last[0]))
    # a hand-checkable case: 2 sentences on orthogonal axes, views identical -> target logit 1/τ
    views = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    expected = -math.log(math.exp(1 / TAU) / (math.exp(1 / TAU) + 2 * math.exp(0)))
    assert close(twin_info_nce(views), expected)


def test_icnce_pairs_the_other_view_in_the_other_tower(twin_vectors):
    last, _, _ = twin_vectors
    assert close(icnce(last[0], last[1]), ref_icnce(last[0], last[1]))
    assert close(icnce(last[1], last[0]), ref_icnce(last[1], last[0]))
    assert not close(icnce(last[0], last[1]), ref_icnce(last[1], last[0]))


def test_tensor_norm_loss_and_its_clamp(twin_vectors):
    last, pooled, _ = twin_vectors
    expected = ref_tensor_norm(last[0], last[1], pooled[0], pooled[1])
    assert close(tensor_norm_loss(last[0], last[1], pooled[0], pooled[1]), expected)
    assert close(
        tensor_norm_loss(last[0], last[1], pooled[0], pooled[1], factor=1.0),
        ref_tensor_norm(last[0], last[1], pooled[0], pooled[1], factor=1.0),
    )
    # hand-checkable: sentence 0 has cosine 0.6, sentence 1 a negative cosine (-> 1e-4)
    last_i = torch.tensor([[1.0, 0.0], [9.0, 9.0], [1.0, 0.0], [9.0, 9.0]])
    last_j = torch.tensor([[9.0, 9.0], [0.6, 0.8], [9.0, 9.0], [-1.0, 0.2]])
    pooled_i = torch.tensor([[3.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    pooled_j = torch.tensor([[0.0, 0.0], [0.0, 4.0], [0.0, 0.0], [1.0, 1.0]])
    expected = 0.5 * (-math.log(0.6) * 5 / 7 + -math.log(1e-4) * 0.0) / 2
    assert close(tensor_norm_loss(last_i, last_j, pooled_i, pooled_j), expected)
    pooled_j[3] = torch.tensor([2.0, 0.0])  # ‖(1,1) − (2,0)‖ = √2, norms √2 + 2
    expected = 0.5 * (-math.log(0.6) * 5 / 7 + -math.log(1e-4) * math.sqrt(2) / (math.sqrt(2) + 2)) / 2
    assert close(tensor_norm_loss(last_i, last_j, pooled_i, pooled_j), expected)
    expected = ref_tensor_norm(last_i, last_j, pooled_i, pooled_j)
    assert close(tensor_norm_loss(last_i, last_j, pooled_i, pooled_j), expected)


def test_tensor_norm_loss_gradients():
    generator = torch.Generator().manual_seed(2)
    last_i, last_j, pooled_i, pooled_j = (torch.randn(4, 5, generator=generator) for _ in range(4))
    last_j[1] = last_i[0] + 0.1  # sentence 0: positive cosine
    last_j[3] = -last_i[2]  # sentence 1: negative cosine, clamped
    tensors = [t.requires_grad_() for t in (last_i, last_j, pooled_i, pooled_j)]
    tensor_norm_loss(*tensors).backward()
    for tensor in tensors:
        assert tensor.grad.abs().sum() > 0
    # only anchor views 2k of tower i and positive views 2k+1 of tower j take part
    assert pooled_i.grad[1::2].abs().sum() == 0 and pooled_j.grad[0::2].abs().sum() == 0
    # the clamped cosine passes no gradient to h^L; its norm term still trains h^P
    assert last_i.grad[2].abs().sum() == 0 and last_j.grad[3].abs().sum() == 0
    assert last_i.grad[0].abs().sum() > 0 and pooled_i.grad[2].abs().sum() > 0


def ref_ictn(last, pooled):
    forward = ref_tensor_norm(last[0], last[1], pooled[0], pooled[1])
    return forward + ref_tensor_norm(last[1], last[0], pooled[1], pooled[0])


def test_ictn_is_both_directions(twin_vectors):
    last, pooled, _ = twin_vectors
    assert close(ictn(last, pooled), ref_ictn(last, pooled))


def test_joint_icnce_direction(twin_vectors):
    last, _, cross = twin_vectors
    one = ref_icnce(last[0], last[1]) + ref_icnce(cross[0], cross[1])
    zero = ref_icnce(last[1], last[0]) + ref_icnce(cross[1], cross[0])
    assert close(joint_icnce(last, cross, 1), one)
    assert close(joint_icnce(last, cross, 0), zero)
    draws = {draw_direction(torch.Generator().manual_seed(seed)) for seed in range(20)}
    assert draws == {0, 1}
    assert draw_direction(torch.Generator().manual_seed(3)) == draw_direction(torch.Generator().manual_seed(3))


def test_tncse_objective_sums_the_switched_terms(twin_vectors):
    last, pooled, _ = twin_vectors
    out = TwinOutput(last, pooled, None)
    nce = ref_icnce(last[0], last[0]) + ref_icnce(last[1], last[1])
    icnce_value = ref_icnce(last[0], last[1])
    ictn_value = ref_ictn(last, pooled)
    full = twin_objective(out)
    assert set(full.terms) == {"nce", "icnce", "ictn"}
    assert close(full.terms["nce"], nce) and close(full.terms["icnce"], icnce_value)
    assert close(full.terms["ictn"], ictn_value)
    assert close(full.total, nce + icnce_value + ictn_value)
    ablated = twin_objective(out, losses=["icnce", "ictn"])
    assert set(ablated.terms) == {"icnce", "ictn"} and close(ablated.total, icnce_value + ictn_value)


def test_jtcse_objective_uses_cross_outputs_and_the_drawn_direction(twin_vectors):
    last, pooled, cross = twin_vectors
    out = TwinOutput(last, pooled, cross)
    for seed in range(4):
        direction = draw_direction(torch.Generator().manual_seed(seed))
        result = twin_objective(out, generator=torch.Generator().manual_seed(seed))
        assert close(result.terms["icnce"], float(joint_icnce(last, cross, direction)))
        assert close(result.total, float(result.terms["nce"] + result.terms["icnce"] + result.terms["ictn"]))


def test_objective_gradients(twin_vectors):
    last, pooled, _ = (t.clone().requires_grad_() for t in twin_vectors)
    twin_objective(TwinOutput(last, pooled, None), losses=["nce"]).total.backward()
    assert pooled.grad is None  # only the norm loss reads the pooler output
    last.grad = None
    twin_info_nce(last[0]).backward()
    assert last.grad[1].abs().sum() == 0  # tower I's L_NCE gives tower II nothing


@pytest.mark.parametrize(
    "losses, message", [(["nce", "ictm"], "unknown loss ictm"), ([], "switches every loss term off")]
)
def test_bad_loss_names_raise_one_line(losses, message):
    with pytest.raises(PipelineError) as error:
        validate_loss_names(losses)
    assert message in str(error.value) and "allowed:" in str(error.value) and "train.losses" in str(error.value)
    assert "\n" not in str(error.value)
    with pytest.raises(PipelineError):
        twin_objective(TwinOutput(torch.randn(2, 4, 3), torch.randn(2, 4, 3), None), losses=losses)


def test_gaussian_with_no_vectors_is_plain_info_nce(twin_vectors):
    last, _, _ = twin_vectors
    z1, z2 = last[0][0::2], last[0][1::2]
    none = GaussianNegatives(count=0)
    assert torch.equal(info_nce(z1, z2, gaussian=none), info_nce(z1, z2))
    assert torch.equal(icnce(last[0], last[1], gaussian=none), icnce(last[0], last[1]))


def test_gaussian_negatives_match_gs_infonce(twin_vectors):
    last, _, _ = twin_vectors
    z1, z2 = last[0][0::2], last[0][1::2]
    noise = torch.normal(0.5, 2.0, (4, 5), generator=torch.Generator().manual_seed(9))
    gaussian = GaussianNegatives(count=4, mean=0.5, std=2.0, weight=2.0, generator=torch.Generator().manual_seed(9))
    assert close(info_nce(z1, z2, gaussian=gaussian), ref_info_nce(z1, z2, noise, weight=2.0))
    # default M = 3 × sentences: 3 sentences -> 9 vectors for the SimCSE form and the twin forms
    assert GaussianNegatives().logits(z1, TAU, len(z1)).shape == (3, 9)
    noise = torch.normal(0.0, 1.0, (9, 5), generator=torch.Generator().manual_seed(4))
    gaussian = GaussianNegatives(generator=torch.Generator().manual_seed(4))
    assert close(icnce(last[0], last[1], gaussian=gaussian), ref_icnce(last[0], last[1], noise))


def test_gaussian_std_does_not_change_the_logits_at_mean_zero(twin_vectors):
    """Cosines see only a vector's direction, and N(0, σ²I)'s is uniform whatever σ: the script's
    random_std 0.5 and the paper's N(0, 1) give the same logits from the same draws."""
    last, _, _ = twin_vectors
    z1 = last[0][0::2]
    draws = [GaussianNegatives(count=6, std=std, generator=torch.Generator().manual_seed(3)) for std in (1.0, 0.5, 0.1)]
    reference = draws[0].logits(z1, TAU, len(z1))
    for gaussian in draws[1:]:
        assert torch.allclose(gaussian.logits(z1, TAU, len(z1)), reference, atol=1e-5)
    shifted = GaussianNegatives(count=6, mean=1.0, generator=torch.Generator().manual_seed(3))
    assert not torch.allclose(shifted.logits(z1, TAU, len(z1)), reference, atol=1e-3)


def test_gaussian_share_is_the_softmax_mass_of_the_gaussian_columns():
    # two rows, two in-batch columns then one Gaussian column: row 0 puts e^0 / (e^0 + e^0 + e^0) on it
    logits = torch.tensor([[0.0, 0.0, 0.0], [math.log(3.0), 0.0, 0.0]])
    assert math.isclose(gaussian_share(logits, 1).item(), (1 / 3 + 1 / 5) / 2, rel_tol=1e-6)
    assert gaussian_share(logits, 0).item() == 0.0
    z1, z2 = torch.randn(4, 8), torch.randn(4, 8)
    gaussian = GaussianNegatives(count=12, generator=torch.Generator().manual_seed(1))
    logits, targets = info_nce_logits(z1, z2, TAU, gaussian)
    assert logits.shape == (4, 16) and torch.equal(targets, torch.arange(4))
    share = gaussian_share(logits, 12).item()
    assert 0.0 < share < 1.0


def test_gaussian_settings_are_validated():
    with pytest.raises(PipelineError, match="gaussian.count=-1"):
        GaussianNegatives(count=-1)
    with pytest.raises(PipelineError, match="gaussian.std=0"):
        GaussianNegatives(std=0)


def test_similarities_stay_float32_under_autocast(twin_vectors):
    last, _, _ = twin_vectors
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value = icnce(last[0].bfloat16(), last[1].bfloat16())
    assert value.dtype == torch.float32
    assert close(value, ref_icnce(last[0].bfloat16().float(), last[1].bfloat16().float()))


def test_distillation_loss_is_mse_to_a_frozen_teacher():
    student = torch.tensor([[1.0, 2.0], [0.0, -1.0]], requires_grad=True)
    teacher = torch.tensor([[0.0, 2.0], [2.0, 1.0]], requires_grad=True)
    loss = distillation_loss(student, teacher)
    assert close(loss, (1 + 0 + 4 + 4) / 4)
    loss.backward()
    assert student.grad is not None and teacher.grad is None
