"""The top-k / top-p filter of the vocab-parallel log-probability tasks (PKB 82-84): the references' float32
filter and the golden's float64 one decide the same tokens, ties at either cut decide together, and no
order of the vocabulary changes what survives (PKB breaks ties at the nucleus cut by sort order)."""
import math

import pytest
import torch

from pkb_env.contract import rank_seeds
from pkb_env.task import load_task
from pkb_env.tasks import _vocab_topk as vocab
from pkb_env.tasks.vocab_parallel_log_prob_topk import reference as forward
from pkb_env.tasks.vocab_parallel_log_prob_topk_chunked_backward import reference as backward

def _kept(filtered: torch.Tensor) -> torch.Tensor:
    return filtered > -math.inf


def test_a_tie_straddling_the_nucleus_cut_keeps_both():
    """Two tied logits hold 0.45 of the mass each; the rest 0.1. With top_p 0.4 the cut (0.6 from below)
    falls between them in any sorted order: nothing is strictly more likely than either, so both stay."""
    rest = math.log(0.1 / 6)
    row = torch.tensor([[rest] * 3 + [math.log(0.45)] + [rest] * 3 + [math.log(0.45)]])
    for order in (torch.arange(8), torch.tensor([7, 6, 5, 4, 3, 2, 1, 0]), torch.randperm(8)):
        logits = row[:, order]
        expect = (logits == math.log(0.45))
        assert torch.equal(_kept(forward._filter_top_k_top_p(logits, None, 0.4)), expect)
        assert torch.equal(backward._filter_top_k_top_p(logits, None, 0.4)[1], expect)
        assert torch.equal(vocab.keep_float64(logits, None, 0.4), expect)


def test_ties_at_the_kth_value_are_all_kept():
    logits = torch.tensor([[5.0, 1.0, 3.0, 3.0, 0.0, 3.0]])
    expect = torch.tensor([[True, False, True, True, False, True]])
    assert torch.equal(_kept(forward._filter_top_k_top_p(logits, 2, 1.0)), expect)
    assert torch.equal(vocab.keep_float64(logits, 2, 1.0), expect)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_and_golden_filters_agree_on_many_rows(dtype):
    """Rows drawn as the tasks draw them (bf16 rounding makes ties common): the same survivors, row by row."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4096, 256, generator=gen).to(dtype)
    got = _kept(forward._filter_top_k_top_p(logits, 10, vocab.TOP_P))
    assert torch.equal(got, vocab.keep_float64(logits, 10, vocab.TOP_P))
    assert torch.equal(got, backward._filter_top_k_top_p(logits, 10, vocab.TOP_P)[1])
    counts = got.sum(-1)
    assert counts.min() >= 1 and 5 < counts.float().mean() < 10  # the nucleus cuts some of the top 10


def test_targets_usually_survive_and_log_probs_spread():
    """The planted targets survive the filter for most tokens, but not all, and their log-probabilities
    are spread (PKB's +8 made nearly all of them exactly 0)."""
    spec = load_task("vocab_parallel_log_prob_topk")
    world = spec.world(spec.preset("bench").dims, 2, "bfloat16")
    outs = []
    for trial in range(32):
        inputs = [dict(zip(spec.parameters, spec.make_inputs(spec.input_context(
            r, 2, "bench", "bfloat16", "cpu", rank_seeds(trial, spec.layout(2), r))))) for r in range(2)]
        outs.append(spec.golden(inputs, world)[0])
    log_probs = torch.cat([o.flatten() for o in outs])
    finite = log_probs.isfinite()
    assert 0.8 < finite.float().mean() < 1.0
    assert (log_probs[finite] == 0).float().mean() < 0.05 and log_probs[finite].std() > 0.3
