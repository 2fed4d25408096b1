"""The cost model and the roofline: one table of nccl-tests bus factors, max(comm, compute, memory) with
the serial sum and the dominant term, peaks from datasheets and calibrations, a fraction never clipped."""
from __future__ import annotations

import pytest

from pkb_env.contract import COLLECTIVES, Comm, Compute, Cost, CostModel, Peaks
from pkb_env.contract.cost import bound
from pkb_env.judge.roofline import roofline
from pkb_env.task import load_task, task_names
from pkb_env.topology import Calibration, load_topology

# nccl-tests doc/PERFORMANCE.md and src/*.cu: busbw = algbw x factor(n); gather/scatter as their perf tests.
NCCL_TESTS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0, "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n,
    "sendrecv": lambda n: 1.0, "all_to_allv": lambda n: 1.0,
}
H200 = load_topology("h200_8gpu").datasheet_peaks()


def test_the_bus_factor_table_is_nccl_tests():
    assert set(COLLECTIVES) == set(NCCL_TESTS_FACTORS)
    for name, factor in NCCL_TESTS_FACTORS.items():
        for n in range(2, 9):
            assert COLLECTIVES[name].bus_factor(n) == pytest.approx(factor(n)), (name, n)


@pytest.mark.parametrize("task, collective, s", [
    ("all_reduce", "all_reduce", lambda w, c: c), ("all_gather", "all_gather", lambda w, c: w * c),
    ("reduce_scatter", "reduce_scatter", lambda w, c: w * c), ("all_to_all", "all_to_all", lambda w, c: w * c),
    ("broadcast", "broadcast", lambda w, c: c), ("reduce", "reduce", lambda w, c: c),
    ("gather", "gather", lambda w, c: w * c), ("scatter", "scatter", lambda w, c: w * c),
])
def test_primitives_declare_nccl_tests_sizes(task, collective, s):
    spec = load_task(task)
    for preset in ("tiny", "bench"):
        dims = spec.presets[preset].dims
        for dtype in spec.dtypes:
            chunk = dims["M"] * dims["N"] * {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
            for w in range(2, 9):
                [term] = spec.cost_model(dims, w, dtype).comm
                assert term.collective == collective and term.size_bytes == s(w, chunk) and term.steps == 1
                assert term.bus_bytes == round(s(w, chunk) * NCCL_TESTS_FACTORS[collective](w))


def test_a_group_of_one_moves_nothing():
    model = CostModel.of(Cost(comm=(Comm("all_reduce", 1 << 20, "cp"),)), {"cp": 1}, "bfloat16")
    assert model.comm[0].bus_bytes == 0 and model.comm[0].steps == 0
    assert bound(model, H200).bound_s == 0


def test_bound_is_the_max_and_names_the_dominant_term():
    cost = Cost(comm=(Comm("all_reduce", 2 << 20, "tp"),), compute=(Compute(2 * 1024 ** 3),), memory_bytes=4 << 20)
    model = CostModel.of(cost, {"tp": 4}, "bfloat16")
    b = bound(model, H200)
    comm = 0.7e-6 + 1.5 * (2 << 20) / 450e9
    assert b.comm_s == pytest.approx(comm) and b.compute_s == pytest.approx(2 * 1024 ** 3 / 989.4e12)
    assert b.memory_s == pytest.approx((4 << 20) / 4800e9)
    assert b.bound_s == b.comm_s and b.dominant == "communication"
    assert b.serial_s == pytest.approx(b.comm_s + b.compute_s + b.memory_s)
    fp32 = bound(CostModel.of(cost, {"tp": 4}, "float32"), H200)      # no tensor cores: 66.9 TFLOP/s
    assert fp32.compute_s == pytest.approx(2 * 1024 ** 3 / 66.9e12) and fp32.dominant == "compute"
    assert not CostModel.of(cost, {"tp": 4}, "float32").compute[0].tensor_cores


def test_missing_peaks_leave_terms_out_and_say_so():
    model = CostModel.of(Cost(compute=(Compute(1e9, "vector"),), memory_bytes=1e6), {"world": 2}, "float16")
    b = bound(model, Peaks("calibrated", matmul_tflops={"float32": 1.0}))
    assert b.compute_s == 0 and "vector compute (no float16 rate)" in b.missing and "memory" in b.missing[1]
    vector = bound(model, Peaks("datasheet", matmul_tflops={"float16": 10.0}, hbm_gbps=1000))
    assert vector.compute_s == pytest.approx(1e9 / 10e12)                 # vector work at most the matmul rate


def test_the_fraction_is_not_clipped():
    model = CostModel.of(Cost(comm=(Comm("all_reduce", 8 << 20),)), {"world": 8}, "bfloat16")
    floor = bound(model, H200).bound_s
    fast = roofline(model, floor / 2, None, H200)
    assert fast.fraction == pytest.approx(2.0) and fast.spec_fraction == pytest.approx(2.0)
    slow = roofline(model, floor * 4, None, H200)
    assert slow.fraction == pytest.approx(0.25) and slow.busbw_gbps == pytest.approx(1.75 * (8 << 20) / (floor * 4) / 1e9)
    assert roofline(model, 1e-3, None, None) is None


def test_calibrated_peaks_overlay_the_datasheet():
    topo = load_topology("h200_8gpu")
    cal = Calibration("h200", 2, alpha_s=9e-6, bandwidth_gbps=370.0, measured_at=0.0,
                      matmul_tflops=(("bfloat16", 780.0),), copy_gbps=3900.0)
    peaks = topo.peaks(cal)
    assert peaks.source == "calibrated" and peaks.link_gbps == 370 and peaks.alpha_s == 9e-6
    assert peaks.matmul_tflops["bfloat16"] == 780 and peaks.matmul_tflops["float8_e4m3fn"] == 1978.9
    assert peaks.hbm_gbps == 3900 and topo.peaks(None).source == "datasheet"
    assert load_topology("cpu").peaks(None) is None and load_topology("cpu").peaks(cal).link_gbps == 370


def test_datasheets_have_sources_and_every_peak():
    for board in ("h100_8gpu", "h200_8gpu", "b200_8gpu"):
        topo = load_topology(board)
        assert topo.link_bandwidth_gbps and topo.hbm_gbps and topo.alpha_us is not None
        assert {"bfloat16", "float16", "float32"} <= set(topo.matmul_tflops)
        assert any("TFLOP" in s or "PF" in s for s in topo.sources)


@pytest.mark.parametrize("task", task_names())
def test_every_task_has_a_positive_bound_at_bench_on_gpus(task):
    spec = load_task(task)
    for w in spec.allowed_world_sizes("bench", (2, 4, 8)):
        dtype = "bfloat16" if "bfloat16" in spec.dtypes else spec.presets["bench"].dtype  # the FFTs: no complex bf16
        b = bound(spec.cost_model(spec.presets["bench"].dims, w, dtype), H200)
        assert b.bound_s > 0 and not b.missing, (task, w, b)
