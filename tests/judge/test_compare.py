"""compare_outputs / summarize_mismatches: dtype families, NaN/Inf policy, structures, messages."""
from __future__ import annotations

import collections
import math

import pytest
import torch

from pkb_env.contract import EXACT, Check, Tolerance
from pkb_env.judge.compare import compare_outputs, summarize_mismatches

F32 = Tolerance(1e-5, 1e-5, "summation order")
BF16 = Tolerance(3e-2, 3e-2, "bf16 rounding per hop")
NAN, INF = math.nan, math.inf


def cmp(expected, got, tol=F32, trial="trial 0", rank=0):
    return compare_outputs(expected, got, tol, trial, rank)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# -- floating point --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, tol", [(torch.float32, F32), (torch.float64, F32), (torch.bfloat16, BF16),
                                        (torch.float16, Tolerance(5e-3, 5e-3, "fp16"))])
def test_equal_float_tensors_match(dtype, tol):
    x = torch.randn(64, 64, generator=gen()).to(dtype)
    assert cmp(x, x.clone(), tol) == []


def test_within_tolerance_matches_and_just_beyond_does_not():
    e = torch.tensor([1.0, -2.0, 0.0, 1000.0], dtype=torch.float64)
    allowed = F32.atol + F32.rtol * e.abs()
    assert cmp(e, e + allowed * 0.99) == []
    bad = e.clone()
    bad[3] += float(allowed[3]) * 1.5
    [m] = cmp(e, bad)
    assert m.bad_elements == 1 and m.total_elements == 4 and m.first_index == [3]
    assert m.max_abs_err == pytest.approx(float(allowed[3]) * 1.5)
    assert m.max_rel_err == pytest.approx(float(allowed[3]) * 1.5 / 1000)


def test_tolerance_is_computed_in_float64():
    # in float32, 1 + 1e-5 * 1 rounds; the float64 check must not accept a float32 error of 2 ulps more
    e = torch.tensor([1.0], dtype=torch.float32)
    g = torch.nextafter(e + 2e-5, torch.tensor([2.0]))
    assert len(cmp(e, g)) == 1


def test_all_wrong_message_and_numbers():
    e = torch.randn(64, 64, generator=gen(1))
    [m] = cmp(e, torch.zeros_like(e), rank=2)
    assert m.rank == 2 and m.trial == "trial 0" and m.path == "output"
    assert m.bad_elements == 4096 and m.total_elements == 4096 and m.first_index == [0, 0]
    assert m.max_abs_err == pytest.approx(float(e.abs().max()))
    assert m.max_rel_err == pytest.approx(1.0)
    assert m.message.startswith("4096/4096 elements differ") and "atol 1e-05" in m.message
    assert m.expected == f"{e[0, 0].item():.6g}" and m.got == "0"


def test_first_bad_index_is_unravelled():
    e = torch.zeros(3, 4, 5)
    g = e.clone()
    g[2, 1, 3] = 1.0
    g[2, 3, 0] = 5.0
    [m] = cmp(e, g)
    assert m.first_index == [2, 1, 3] and m.bad_elements == 2 and m.got == "1" and m.expected == "0"
    assert m.max_abs_err == 5.0 and m.max_rel_err is None  # expected is all zero: no relative error


def test_large_tensor_is_checked_in_chunks():
    e = torch.randn(5_000_000, generator=gen(2))
    g = e.clone()
    g[4_999_999] += 1.0
    [m] = cmp(e, g)
    assert m.bad_elements == 1 and m.first_index == [4_999_999]


def test_exact_tolerance_on_floats():
    e = torch.randn(100, generator=gen(3))
    g = e.clone()
    g[7] = torch.nextafter(g[7], torch.tensor(10.0))
    [m] = cmp(e, g, EXACT)
    assert m.bad_elements == 1 and "exact match required" in m.message


def test_device_is_ignored():
    e = torch.randn(8, generator=gen(4))
    assert cmp(e, e.clone().to("meta"))[0].message.startswith("got a meta tensor")
    assert cmp(e.to("cpu"), e.clone()) == []


# -- NaN / Inf policy ------------------------------------------------------------------------------

@pytest.mark.parametrize("expected, got, ok", [
    (NAN, NAN, True),        # NaN matches only NaN
    (NAN, 1.0, False),
    (NAN, INF, False),
    (1.0, NAN, False),       # NaN where expected is finite
    (1.0, INF, False),       # Inf where expected is finite
    (1.0, -INF, False),
    (INF, INF, True),        # equal infinities match
    (-INF, -INF, True),
    (INF, -INF, False),
    (INF, 3e38, False),      # the largest float32s are still finite
    (INF, NAN, False),
])
def test_nan_inf_policy(expected, got, ok):
    e = torch.tensor([0.5, expected, 2.0])
    g = torch.tensor([0.5, got, 2.0])
    mismatches = cmp(e, g)
    assert (mismatches == []) is ok
    if not ok:
        [m] = mismatches
        assert m.bad_elements == 1 and m.first_index == [1]
        assert m.max_abs_err == math.inf


def test_every_chunk_is_checked_and_the_expected_output_is_never_written(monkeypatch):
    """The close-enough fast path and the full account agree chunk by chunk: an element off in the last chunk
    is found after earlier chunks passed, and a float64 expected output (compared without a copy) is intact."""
    from pkb_env.judge import compare

    monkeypatch.setattr(compare, "_CHUNK", 4)
    e = torch.randn(10, generator=gen(7), dtype=torch.float64)
    kept = e.clone()
    assert cmp(e, e * (1 + 1e-7)) == []
    off = e * (1 + 1e-7)
    off[9] += 1.0
    [m] = cmp(e, off)
    assert m.bad_elements == 1 and m.first_index == [9] and torch.equal(e, kept)


def test_nan_message_shows_values():
    [m] = cmp(torch.tensor([1.0, 2.0]), torch.tensor([1.0, NAN]))
    assert m.expected == "2" and m.got == "nan"


# -- integers, booleans, complex -------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8])
def test_integers_are_exact_whatever_the_tolerance(dtype):
    e = torch.randint(0, 100, (50,), generator=gen(5), dtype=dtype)
    assert cmp(e, e.clone(), Tolerance(10.0, 10.0, "loose")) == []
    g = e.clone()
    g[10] += 1
    [m] = cmp(e, g, Tolerance(10.0, 10.0, "loose"))
    assert m.bad_elements == 1 and m.first_index == [10] and "exact match required" in m.message
    assert m.max_abs_err == 1.0 and m.expected == str(int(e[10])) and m.got == str(int(g[10]))


def test_int64_beyond_float64_precision_is_exact():
    e = torch.tensor([2 ** 62 + 1], dtype=torch.int64)
    assert len(cmp(e, torch.tensor([2 ** 62], dtype=torch.int64))) == 1


def test_booleans_are_exact():
    e = torch.tensor([True, False, True, True])
    [m] = cmp(e, torch.tensor([True, True, True, False]))
    assert m.bad_elements == 2 and m.first_index == [1] and m.expected == "False" and m.got == "True"


def test_complex_compares_real_and_imaginary_parts():
    e = torch.randn(16, dtype=torch.complex64, generator=gen(6))
    assert cmp(e, e.clone()) == []
    g = e.clone()
    g[5] = complex(g[5].real.item(), g[5].imag.item() + 0.5)   # imaginary part only
    [m] = cmp(e, g)
    assert m.bad_elements == 1 and m.total_elements == 16 and m.first_index == [5]
    assert m.max_abs_err == pytest.approx(0.5, rel=1e-6) and "j)" in m.got
    h = e.clone()
    h[0] = complex(NAN, h[0].imag.item())
    assert cmp(e, h)[0].first_index == [0]


def test_conjugate_view_is_resolved():
    e = torch.randn(4, dtype=torch.complex64, generator=gen(7))
    assert cmp(e.conj().resolve_conj(), e.conj()) == []


# -- dtype, shape, kind ----------------------------------------------------------------------------

def test_dtype_mismatch_message():
    e = torch.randn(8, generator=gen(8))
    [m] = cmp(e, e.to(torch.bfloat16))
    assert m.message == "dtype bfloat16, expected float32" and m.bad_elements is None


def test_shape_mismatch_message():
    e = torch.randn(4, 16, generator=gen(9))
    [m] = cmp(e, e[:, :8].contiguous())
    assert m.message == "shape [4, 8], expected [4, 16]"
    assert cmp(e, e.reshape(64))[0].message == "shape [64], expected [4, 16]"


def test_non_contiguous_views_compare_by_value():
    e = torch.randn(8, 8, generator=gen(10))
    assert cmp(e.t().contiguous(), e.t()) == []


def test_tensor_subclass_is_rejected():
    e = torch.randn(4, generator=gen(11))
    [m] = cmp(e, torch.nn.Parameter(e.clone()))
    assert "subclass Parameter" in m.message and "plain tensor" in m.message


def test_sparse_tensor_is_rejected():
    e = torch.eye(4)
    assert "dense" in cmp(e, e.to_sparse())[0].message


@pytest.mark.parametrize("got, words", [(None, "got None"), ([1.0, 2.0], "got a list of length 2"),
                                        (3.0, "got float 3"), (object(), "type object")])
def test_non_tensor_where_tensor_expected(got, words):
    [m] = cmp(torch.zeros(2), got)
    assert m.message.startswith("expected a float32 tensor of shape [2]") and words in m.message


def test_tensor_where_none_expected():
    [m] = cmp(None, torch.zeros(3))
    assert m.message == "expected None, got a float32 tensor of shape [3]"
    assert cmp(None, None) == []


# -- structures ------------------------------------------------------------------------------------

def test_nested_tuple_paths():
    a, b = torch.randn(4, generator=gen(12)), torch.randn(2, 3, generator=gen(13))
    expected = (a, (b, None))
    assert cmp(expected, (a.clone(), (b.clone(), None))) == []
    assert cmp(expected, [a.clone(), [b.clone(), None]]) == []  # lists answer tuples
    [m] = cmp(expected, (a.clone(), (b + 1, None)))
    assert m.path == "output[1][0]" and m.bad_elements == 6


def test_sequence_length_and_type():
    a = torch.zeros(2)
    assert cmp((a, a), (a,))[0].message == "expected a tuple of length 2, got a tuple of length 1"
    assert "got a float32 tensor" in cmp((a, a), a)[0].message


def test_named_tuple_and_return_types_are_tuples():
    x = torch.randn(10, generator=gen(14))
    top = torch.topk(x, 3)
    assert cmp(tuple(top), top) == []
    Pair = collections.namedtuple("Pair", "values indices")
    assert cmp(Pair(top.values, top.indices), (top.values, top.indices)) == []


def test_dict_paths_and_keys():
    v, i = torch.randn(5, generator=gen(15)), torch.arange(5)
    expected = {"values": v, "indices": i}
    assert cmp(expected, {"indices": i.clone(), "values": v.clone()}) == []
    [m] = cmp(expected, {"values": v.clone(), "indices": i + 1})
    assert m.path == "output['indices']"
    [m] = cmp(expected, {"values": v.clone(), "idx": i})
    assert m.message == "dict keys differ: missing keys ['indices'], unexpected keys ['idx']"
    assert "expected a dict with keys ['values', 'indices']" in cmp(expected, (v, i))[0].message


def test_mismatches_in_several_leaves_are_all_reported():
    a = torch.ones(3)
    got = {"x": (a * 2, a), "y": [a, a * 3]}
    paths = [m.path for m in cmp({"x": (a, a), "y": [a, a]}, got)]
    assert paths == ["output['x'][0]", "output['y'][1]"]


def test_python_scalars():
    assert cmp(3, 3) == [] and cmp("ok", "ok") == [] and cmp(True, True) == []
    assert cmp(0.1 + 0.2, 0.3) == []                          # floats at the tolerance
    assert cmp(2.0, 2) == []                                  # an int answer to a float is a number
    assert cmp(NAN, NAN) == [] and len(cmp(1.0, NAN)) == 1
    assert cmp(3, 4)[0].message == "expected 3, got 4"
    assert "expected int 1, got bool True" == cmp(1, True)[0].message
    assert "got a float32 tensor of shape []" in cmp(1.5, torch.tensor(1.5))[0].message
    assert cmp(1 + 2j, 1 + 2j) == [] and len(cmp(1 + 2j, 1 + 3j)) == 1


def test_empty_tensors_match():
    assert cmp(torch.empty(0, 4), torch.empty(0, 4)) == []


# -- per-output checks, variable-length and fp8 outputs -----------------------------------------------

def test_each_output_path_has_its_own_check():
    checks = {"output[0]": Check(EXACT), "output[1]": Check(Tolerance(0.5, 0.0, "loose"))}
    e = (torch.zeros(4), torch.zeros(4))
    assert cmp(e, (torch.zeros(4), torch.full((4,), 0.4)), checks) == []
    [m] = cmp(e, (torch.full((4,), 0.4), torch.full((4,), 0.4)), checks)
    assert m.path == "output[0]" and "exact match required" in m.message
    with pytest.raises(ValueError, match="no comparison rule covers output"):
        cmp(torch.zeros(2), torch.zeros(2), {"output[0]": Check(EXACT)})


def test_nested_values_follow_their_outputs_check():
    checks = {"output['a']": Check(Tolerance(1.0, 0.0, "loose")), "output['b']": Check(EXACT)}
    e = {"a": [torch.zeros(2)], "b": [torch.zeros(2)]}
    assert cmp(e, {"a": [torch.full((2,), 0.9)], "b": [torch.zeros(2)]}, checks) == []
    assert len(cmp(e, {"a": [torch.zeros(2)], "b": [torch.full((2,), 1e-9)]}, checks)) == 1


def test_unordered_outputs_compare_rows_as_a_set():
    rows = torch.tensor([[3, 1], [0, 7], [3, 0], [5, 5]])
    shuffled = rows[torch.tensor([2, 0, 3, 1])]
    check = Check(EXACT, unordered=True)
    assert cmp(rows, shuffled, check) == [] and cmp(rows[:, 0], shuffled[:, 0], check) == []
    [m] = cmp(rows, shuffled.clone().index_fill_(0, torch.tensor([0]), 9), check)
    assert "rows compared as a set" in m.message
    assert "shape [3, 2], expected [4, 2]" in cmp(rows, rows[:3], check)[0].message
    assert len(cmp(rows, shuffled, Check(EXACT))) == 1     # order matters without the flag
    flags = torch.tensor([[True, False], [False, False]])
    assert cmp(flags, flags.flip(0), check) == []


def test_fp8_outputs_compare_by_value():
    e = torch.randn(64, generator=gen(16)).to(torch.float8_e4m3fn)
    assert cmp(e, e.clone(), EXACT) == []
    g = e.view(torch.uint8).clone()
    g[3] ^= 1
    [m] = cmp(e, g.view(torch.float8_e4m3fn), EXACT)
    assert m.bad_elements == 1 and m.first_index == [3]
    assert "dtype uint8, expected float8_e4m3fn" in cmp(e, e.view(torch.uint8), EXACT)[0].message


# -- summary ---------------------------------------------------------------------------------------

def test_summary_line_format():
    e = torch.full((64, 64), 1.2345)
    [m] = cmp(e, torch.zeros_like(e), trial="trial 0", rank=2)
    text = summarize_mismatches([m])
    assert text.startswith("rank 2, trial 0, output: 4096/4096 elements differ")
    assert "max abs err 1.235" in text and "max rel err 1" in text
    assert text.endswith("first at [0, 0]: expected 1.2345, got 0")
    assert "\n" not in text


def test_summary_limits_and_counts_the_rest():
    a = torch.ones(2)
    mismatches = []
    for rank in range(4):
        mismatches += cmp((a, a), (a * 0, a * 0), trial="timed call 17", rank=rank)
    text = summarize_mismatches(mismatches, limit=3)
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].startswith("rank 0, timed call 17, output[0]: 2/2 elements differ")
    assert lines[-1] == "... and 5 more mismatch(es) on rank(s) 1, 2, 3"
    assert summarize_mismatches([]) == ""


def test_summary_of_structural_mismatch_has_no_values():
    [m] = cmp(torch.zeros(2), None, rank=1, trial="trial 3")
    assert summarize_mismatches([m]) == "rank 1, trial 3, output: expected a float32 tensor of shape [2], got None"
