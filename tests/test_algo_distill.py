"""Distillation: KL directions against hand values, JSD endpoints, chunking, OPD advantages, vocabularies."""

from __future__ import annotations

import math

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import PreTrainedTokenizerFast

from rlvr.algo import DIVERGENCES, check_same_vocabulary, opd_token_advantages, vocab_width
from rlvr.algo import distill as distill_module
from rlvr.errors import RlvrError

# asymmetric pairs of distributions: KL(p ‖ q) ≠ KL(q ‖ p) for each
STUDENT_P = [[0.9, 0.05, 0.05], [0.25, 0.25, 0.5]]
TEACHER_P = [[0.3, 0.3, 0.4], [0.8, 0.15, 0.05]]


def kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q))


def logits(probs: list[list[float]]) -> torch.Tensor:
    """[1, T, V] logits whose softmax is ``probs`` (log p, shifted to show the shift does not matter)."""
    return torch.tensor([[[math.log(x) + 3.0 for x in row] for row in probs]], dtype=torch.float64)


def div(name: str, student: torch.Tensor, teacher: torch.Tensor, **kw) -> torch.Tensor:
    return DIVERGENCES.get(name)(student, teacher, **kw)


def test_registered_names() -> None:
    assert DIVERGENCES.names() == ["forward_kl", "jsd", "reverse_kl"]


def test_forward_kl_is_kl_of_teacher_from_student() -> None:
    out = div("forward_kl", logits(STUDENT_P), logits(TEACHER_P))
    expected = [kl(t, s) for s, t in zip(STUDENT_P, TEACHER_P)]
    assert out.shape == (1, 2)
    assert out[0].tolist() == pytest.approx(expected)
    for s, t in zip(STUDENT_P, TEACHER_P):  # the direction is visible
        assert abs(kl(t, s) - kl(s, t)) > 0.2


def test_reverse_kl_is_kl_of_student_from_teacher() -> None:
    out = div("reverse_kl", logits(STUDENT_P), logits(TEACHER_P))
    assert out[0].tolist() == pytest.approx([kl(s, t) for s, t in zip(STUDENT_P, TEACHER_P)])


def test_jsd_hand_value_and_endpoints() -> None:
    student, teacher = logits(STUDENT_P), logits(TEACHER_P)
    beta = 0.3
    expected = []
    for s, t in zip(STUDENT_P, TEACHER_P):
        m = [beta * b + (1 - beta) * a for a, b in zip(s, t)]
        expected.append(beta * kl(t, m) + (1 - beta) * kl(s, m))
    assert div("jsd", student, teacher, beta=beta)[0].tolist() == pytest.approx(expected)
    forward = [kl(t, s) for s, t in zip(STUDENT_P, TEACHER_P)]
    reverse = [kl(s, t) for s, t in zip(STUDENT_P, TEACHER_P)]
    assert div("jsd", student, teacher, beta=0.0)[0].tolist() == pytest.approx(forward)
    assert div("jsd", student, teacher, beta=1.0)[0].tolist() == pytest.approx(reverse)
    half = div("jsd", student, teacher, beta=0.5)
    assert (half <= math.log(2)).all()
    with pytest.raises(ValueError, match="beta"):
        div("jsd", student, teacher, beta=1.5)


def test_temperature_divides_both_logits() -> None:
    s, t = STUDENT_P[0], TEACHER_P[0]
    # softmax(log p / 2) = √p / Σ√p
    soft_s = [math.sqrt(x) / sum(math.sqrt(y) for y in s) for x in s]
    soft_t = [math.sqrt(x) / sum(math.sqrt(y) for y in t) for x in t]
    out = div("forward_kl", logits([s]), logits([t]), temperature=2.0)
    assert float(out.detach()) == pytest.approx(kl(soft_t, soft_s))


@pytest.mark.parametrize("name", ["forward_kl", "reverse_kl", "jsd"])
def test_identical_logits_give_zero_and_finite_gradients(name: str) -> None:
    base = torch.tensor([[[2.0, -1.0, 0.5, -math.inf], [300.0, -300.0, 0.0, -math.inf]]])
    student = base.clone().requires_grad_(True)
    out = div(name, student, base)
    assert torch.isfinite(out).all() and out.abs().max() < 1e-6
    out.sum().backward()
    assert torch.isfinite(student.grad).all()


@pytest.mark.parametrize("name", ["forward_kl", "reverse_kl", "jsd"])
def test_underflowing_probabilities_stay_finite_and_exact(name: str) -> None:
    # each model gives the other's favourite token e^-200 (0 in float32) and has a -inf column
    student = torch.tensor([[[100.0, -100.0, 0.0, -math.inf]]], requires_grad=True)
    teacher = torch.tensor([[[-100.0, 100.0, 0.0, -math.inf]]])
    out = div(name, student, teacher)
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(student.grad).all()
    if name != "jsd":  # both KLs: mass ≈ 1 on a token the other gives log-prob ≈ -200
        assert float(out.detach()) == pytest.approx(200.0, rel=1e-4)
    else:  # disjoint supports: JSD(0.5) = log 2
        assert float(out.detach()) == pytest.approx(math.log(2), rel=1e-4)


@pytest.mark.parametrize("name", ["forward_kl", "reverse_kl", "jsd"])
def test_chunked_equals_unchunked(name: str, monkeypatch) -> None:
    torch.manual_seed(0)
    student, teacher = torch.randn(3, 5, 11) * 2, torch.randn(3, 5, 11) * 2
    x = student.clone().requires_grad_(True)
    whole = div(name, x, teacher, chunk_rows=1000)
    whole.sum().backward()
    whole_grad = x.grad.clone()
    # unchunked, by hand: log-softmax over the whole tensor at once
    log_s, log_t = torch.log_softmax(student, -1), torch.log_softmax(teacher, -1)
    by_hand = {
        "forward_kl": (log_t.exp() * (log_t - log_s)).sum(-1),
        "reverse_kl": (log_s.exp() * (log_s - log_t)).sum(-1),
    }
    if name in by_hand:
        assert torch.allclose(whole.detach(), by_hand[name], atol=1e-6)
    for chunk_rows in (1, 4):
        x.grad = None
        part = div(name, x, teacher, chunk_rows=chunk_rows)
        part.sum().backward()
        assert torch.allclose(part, whole, atol=1e-6) and torch.allclose(x.grad, whole_grad, atol=1e-6)
    monkeypatch.setattr(distill_module, "CHUNK_ELEMENTS", 22)  # the default: 2 rows of 11 per chunk
    with torch.no_grad():
        assert torch.allclose(div(name, student, teacher), whole.detach(), atol=1e-6)


def test_low_precision_logits_are_compared_in_float32() -> None:
    out = div("reverse_kl", logits(STUDENT_P).bfloat16(), logits(TEACHER_P).bfloat16())
    assert out.dtype == torch.float32
    assert out[0].tolist() == pytest.approx([kl(s, t) for s, t in zip(STUDENT_P, TEACHER_P)], rel=0.05)


def test_opd_advantages_are_the_negative_log_ratio_on_the_mask() -> None:
    student = torch.tensor([[-1.0, -2.0, -0.5, -math.inf]], requires_grad=True)
    teacher = torch.tensor([[-0.5, -3.0, -0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv = opd_token_advantages(student, teacher, mask)
    assert adv.tolist() == [[0.5, -1.0, 0.0, 0.0]]  # teacher likes token 0 more: pushed up
    assert not adv.requires_grad
    assert opd_token_advantages(student, teacher, mask, coef=2.0).tolist() == [[1.0, -2.0, 0.0, 0.0]]
    assert opd_token_advantages(teacher, teacher, mask).abs().sum() == 0


def tokenizer(vocab: dict[str, int]) -> PreTrainedTokenizerFast:
    backend = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_check_same_vocabulary() -> None:
    base = {"[UNK]": 0, "the": 1, "cat": 2, "sat": 3}
    check_same_vocabulary(tokenizer(base), tokenizer(dict(base)), "student-a", "teacher-a")
    with pytest.raises(RlvrError, match=r"student 'small'.*4 tokens.*teacher 'big'.*5"):
        check_same_vocabulary(tokenizer(base), tokenizer({**base, "dog": 4}), "small", "big")
    swapped = {"[UNK]": 0, "the": 1, "cat": 3, "sat": 2}
    with pytest.raises(RlvrError, match=r"2 token\(s\) to different ids.*'cat': 2 vs 3"):
        check_same_vocabulary(tokenizer(base), tokenizer(swapped), "s", "t")
    renamed = {"[UNK]": 0, "the": 1, "cat": 2, "mat": 3}
    with pytest.raises(RlvrError, match="different ids"):
        check_same_vocabulary(tokenizer(base), tokenizer(renamed), "s", "t")


def test_vocab_width_cuts_only_padding_columns() -> None:
    student, teacher = torch.randn(2, 3, 8), torch.randn(2, 3, 6)
    s, t = vocab_width(student, teacher, tokenizer_size=5)
    assert s.shape[-1] == t.shape[-1] == 6 and torch.equal(s, student[..., :6]) and torch.equal(t, teacher)
    with pytest.raises(RlvrError, match="only padding"):
        vocab_width(student, teacher, tokenizer_size=7)  # column 6 is a real token of the student
    with pytest.raises(RlvrError, match="unknown"):
        vocab_width(student, teacher)
    same = torch.randn(2, 3, 8)
    assert vocab_width(student, same)[0] is student
