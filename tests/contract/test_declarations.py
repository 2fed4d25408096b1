"""The task contract's parts, one by one: size expressions, meshes and seed scopes, layouts, distributions,
declarations and their validation, world-size checks, tolerance rules, output checks, golden helpers."""
from __future__ import annotations

import math

import pytest
import torch

from pkb_env.contract import (Bernoulli, Comm, Const, Cost, Custom, Exact, Expr, ExprError, Fixed,
                              FromInputs, Group, Integers, Length, Mesh, Normal, OneHot, Output, PerRank, Permutation,
                              Positive, Preset, Propagated, Relative, Replicated, Rounded, Scalar, Sharded, Sum,
                              TaskError, TaskSpec, Tensor, Tolerance, Ulps, Uniform, UnitRows, WorldSizes, rank_seeds)
from pkb_env.contract.describe import input_lines, problem_lines
from pkb_env.contract.io import show_shape
from pkb_env.contract.mesh import SHARED, MeshError
from pkb_env.judge.seeds import SeedPlan
from pkb_env.task import load_task, size_problem


# -- expressions --------------------------------------------------------------------------------------

def test_expressions_evaluate_and_divide_exactly():
    env = {"K": 512, "W": 4, "M": 3}
    assert Expr("K / W").integer(env) == 128 and Expr("W * M + 1").integer(env) == 13
    assert Expr("ceil_div(M, 2)").integer(env) == 2 and Expr("M // 2").integer(env) == 1
    assert Expr("sqrt(K) * 2").real(env) == pytest.approx(2 * math.sqrt(512))
    assert Expr("K / W").names == {"K", "W"}
    with pytest.raises(ExprError, match=r"K / W = 512 / 3 is not a whole number"):
        Expr("K / W").integer({"K": 512, "W": 3})
    with pytest.raises(ExprError, match="names 'Q'"):
        Expr("Q + 1").integer(env)


@pytest.mark.parametrize("text", ["__import__('os')", "K.real", "[K]", "'a'", "K if W else M", "lambda: 1", "K ="])
def test_expressions_refuse_anything_but_arithmetic(text):
    with pytest.raises(ExprError):
        Expr(text)


# -- meshes and seed scopes ---------------------------------------------------------------------------

def test_mesh_coordinates_follow_device_mesh_order():
    layout = Mesh(("cp", "W / 2"), ("tp", 2)).resolve(8)
    assert layout.sizes == (4, 2)
    assert [layout.coords(r) for r in (0, 1, 2, 7)] == [{"cp": 0, "tp": 0}, {"cp": 0, "tp": 1}, {"cp": 1, "tp": 0},
                                                        {"cp": 3, "tp": 1}]
    assert layout.group_of("tp", 5) == (4, 5) and layout.group_of("cp", 5) == (1, 3, 5, 7)
    assert layout.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7)] and layout.groups("cp") == [(0, 2, 4, 6),
                                                                                                (1, 3, 5, 7)]
    assert all(layout.rank_of(layout.coords(r)) == r for r in range(8))
    assert layout.describe() == "cp=4 x tp=2 (rank = cp_rank*2 + tp_rank)"


def test_mesh_errors_name_the_problem():
    with pytest.raises(MeshError, match=r"W / 2 = 3 / 2 is not a whole number"):
        Mesh(("cp", "W / 2"), ("tp", 2)).resolve(3)
    with pytest.raises(MeshError, match="holds 4 ranks, not the world size 6"):
        Mesh(("a", 2), ("b", 2)).resolve(6)
    with pytest.raises(MeshError, match=r"names the preset's H: resolve it with the preset's dims"):
        Mesh(("tp", "H / 2")).resolve(2)
    with pytest.raises(MeshError, match="in a cycle"):
        Mesh(("a", "W / b"), ("b", "W / a"))
    with pytest.raises(MeshError, match="repeat"):
        Mesh(("tp", 2), ("tp", "W / 2"))


def test_scope_keys_and_rank_seeds():
    layout = Mesh(("cp", 2), ("tp", 2)).resolve(4)
    assert layout.scope_key((), 3) == SHARED and layout.scope_key(("tp",), 3) == "tp=1"
    assert layout.scope_key(("tp", "cp"), 3) == "cp=1,tp=1"
    seeds = [rank_seeds(7, layout, r, "trial", 0) for r in range(4)]
    assert set(seeds[3]) == {SHARED, "cp=1", "tp=1", "cp=1,tp=1"}
    assert len({s[SHARED] for s in seeds}) == 1
    assert seeds[0]["tp=0"] == seeds[2]["tp=0"] and seeds[0]["cp=0"] == seeds[1]["cp=0"]
    assert "tp=1" not in seeds[0] and seeds[1]["tp=1"] not in seeds[0].values()
    assert rank_seeds(8, layout, 3, "trial", 0)[SHARED] != seeds[3][SHARED]
    plan = SeedPlan(layout, secret=7)
    assert plan.per_rank("trial", [0]) == [[s] for s in seeds]


# -- layouts and shapes -------------------------------------------------------------------------------

def test_sharded_shapes_and_their_text():
    layout = Mesh(("cp", 2), ("tp", 2)).resolve(4)
    h = Tensor("h", ("B", "S", "D"), layout=Sharded(1, over="cp"))
    assert h.local_shape({"B": 2, "S": 16, "D": 8, "W": 4}, layout) == (2, 8, 8)
    assert show_shape(h.shape, h.layout, layout) == "(B, S/cp, D)"
    flat = Mesh(("world", "W")).resolve(4)
    a = Tensor("A", ("M", "W * K"), layout=Sharded(1))
    assert show_shape(a.shape, a.layout, flat) == "(M, K)"
    assert Sharded(0, over=("cp", "tp")).block_index(layout, 3) == 3
    assert Sharded(0, over="tp").block_index(layout, 3) == 1
    with pytest.raises(ValueError, match="does not split into 4 equal blocks"):
        Tensor("x", ("N",), layout=Sharded(0)).local_shape({"N": 6, "W": 4}, flat)


# -- distributions ------------------------------------------------------------------------------------

def _draw(dist, shape, dtype, env=None, seed=0):
    return dist.draw(torch.Generator().manual_seed(seed), shape, dtype, env or {})


def test_distributions_draw_what_they_say():
    x = _draw(Normal(std=0.02), (4096,), torch.bfloat16)
    assert x.dtype == torch.bfloat16 and abs(x.float().std().item() - 0.02) < 0.002
    u = _draw(Uniform(-2, 3), (4096,), torch.float32)
    assert u.min() >= -2 and u.max() < 3
    assert (_draw(Positive(), (4096,), torch.float32) > 0).all()
    i = _draw(Integers(0, "V"), (4096,), torch.int64, {"V": 7})
    assert i.dtype == torch.int64 and set(i.tolist()) == set(range(7))
    b = _draw(Bernoulli(0.25), (4096,), torch.bool)
    assert b.dtype == torch.bool and 0.2 < b.float().mean() < 0.3
    oh = _draw(OneHot(), (64, 8), torch.float32)
    assert torch.equal(oh.sum(-1), torch.ones(64))
    p = _draw(Permutation(), (16, 10), torch.int64)
    assert all(sorted(row) == list(range(10)) for row in p.tolist())
    rows = _draw(UnitRows(), (16, 32), torch.float32)
    assert torch.allclose(rows.norm(dim=-1), torch.ones(16))
    c = _draw(Normal(), (512,), torch.complex64)
    assert c.imag.abs().sum() > 0 and abs(c.real.std().item() - 1) < 0.15
    fp8 = _draw(Normal(), (64,), torch.float8_e4m3fn)
    assert fp8.dtype == torch.float8_e4m3fn and fp8.float().abs().sum() > 0


def test_declarations_reject_what_cannot_be_made():
    with pytest.raises(ValueError, match="cannot fill a int64 tensor"):
        Tensor("x", ("N",), dtype="int64", dist=Normal())
    with pytest.raises(ValueError, match="unknown dtype"):
        Tensor("x", ("N",), dtype="float128")
    with pytest.raises(ValueError, match="shard axis 2 is outside"):
        Tensor("x", ("N", "M"), layout=Sharded(2))
    with pytest.raises(ValueError, match="Scalar cannot be sharded"):
        Scalar("s", Integers(0, 4), layout=Sharded(0))
    with pytest.raises(ValueError, match="unordered comparison"):
        Output("o", ("N",), compare="unordered")


# -- a synthetic spec: validation, world sizes, inputs, checks ----------------------------------------

def _golden(inputs, world):
    return [x["x"].clone() for x in inputs]


def make_spec(**overrides) -> TaskSpec:
    fields = dict(
        name="toy", title="Toy", description="identity", family="tensor", pkb_id=None, origin="tests",
        parallelism="none", mesh=Mesh(("dp", 2), ("tp", "W / 2")),
        inputs=(Tensor("x", ("N", "K"), layout=Sharded(1, over="tp")),
                Tensor("idx", ("N",), dtype="int64", dist=Integers(0, "K"), layout=PerRank()),
                Scalar("root", Integers(0, "W")), Const("eps", 1e-5), Const("k", dim="K / tp"),
                Group("tp_group", "tp")),
        outputs=(Output("y", ("N", "K"), layout=Sharded(1, over="tp")),
                 Output("ids", max_shape=("N",), dtype="int64", compare="unordered")),
        golden=_golden, cost=lambda c: Cost(comm=(Comm("all_gather", c.nbytes("y") * c["tp"], "tp"),),
                                             memory_bytes=c.io_bytes()),
        tolerance_rule=Sum("K", 1, "float32"),
        presets={"tiny": Preset({"N": 4, "K": 12}, "float32"), "bench": Preset({"N": 64, "K": 1024}, "bfloat16")},
        dtypes=("float32", "bfloat16"))
    fields.update(overrides)
    return TaskSpec(**fields)


@pytest.mark.parametrize("change, message", [
    (dict(family="tensr"), "family 'tensr' is not one of"),
    (dict(inputs=(Tensor("x", ("N",)), Tensor("x", ("N",)))), "names must be unique"),
    (dict(outputs=(Output("y", ("N",), only_on="x"),)), "only_on='x' must name a Scalar"),
    (dict(inputs=(Group("g", "cp"),)), "mesh dimension 'cp'"),
    (dict(inputs=(Tensor("x", ("N",), layout=PerRank(over="ep")),)), "mesh dimension 'ep'"),
    (dict(presets={"tiny": Preset({"tp": 2}, "float32"), "bench": Preset({}, "bfloat16")}), "clash with W"),
    (dict(presets={"tiny": Preset({}, "float32")}), "needs presets 'tiny' and 'bench'"),
    (dict(dtypes=("int64",)), "must be a floating dtype"),
])
def test_spec_validation_names_the_fix(change, message):
    with pytest.raises(TaskError, match=message):
        make_spec(**change)


def test_world_sizes_follow_from_the_mesh_and_the_shapes():
    spec = make_spec()
    assert spec.allowed_world_sizes("tiny") == [2, 4, 6, 8] and spec.allowed_world_sizes("bench") == [2, 4, 8]
    with pytest.raises(TaskError, match=r"world size 3: mesh dimension tp = W / 2 .* takes 2, 4, 6, 8\)"):
        spec.check_world_size(3, "tiny")
    with pytest.raises(TaskError, match=r"world size 6: input x: dim 1 \(K = 1024\) does not split into 3"):
        spec.check_world_size(6, "bench")


def test_a_suite_task_that_cannot_take_the_world_size_is_named_with_the_sizes_it_takes():
    """An evaluation names many tasks: the refusal says which one, and the sizes it takes."""
    problem = size_problem(load_task("fsdp_and_tp"), 1, "bench")
    assert problem.startswith("task 'fsdp_and_tp' cannot run at world size 1: mesh dimension tp")
    assert problem.endswith("it takes 2, 4, 8)")


def test_world_sizes_must_split_what_the_reference_shares_out():
    """`WorldSizes(splits=...)`: sizes no declared shape shows but the ranks share evenly (tokens)."""
    spec = make_spec(mesh=Mesh(("world", "W")), inputs=(Tensor("x", ("N", "K"), layout=Sharded(1)),),
                     outputs=(Output("y", ("N", "K"), layout=Sharded(1)),),
                     world_sizes=WorldSizes(splits=("N * 3",), reason="rows are redistributed by rank"))
    assert spec.allowed_world_sizes("tiny") == [1, 2, 3, 4, 6]      # K = 12 allows 1-4, 6; 3N = 12 the same
    assert spec.allowed_world_sizes("bench") == [1, 2, 4, 8]         # K = 1024: 1, 2, 4, 8; 3N = 192 too
    with pytest.raises(TaskError, match=r"N \* 3 = 12 does not split evenly over 8 ranks \(rows are redistributed"):
        spec.check_world_size(8, replace_dims(spec, "tiny", K=24))


def replace_dims(spec: TaskSpec, preset: str, **dims) -> Preset:
    return Preset({**spec.preset(preset).dims, **dims}, spec.preset(preset).dtype)


def test_inputs_follow_the_declaration():
    spec = make_spec()
    layout = spec.layout(4)
    args = [spec.make_inputs(spec.input_context(r, 4, "tiny", "float32", "cpu", rank_seeds(1, layout, r, "t")))
            for r in range(4)]
    x, idx, root, eps, k, group = args[0]
    assert x.shape == (4, 6) and idx.dtype == torch.int64 and 0 <= idx.min() and idx.max() < 12
    assert isinstance(root, int) and eps == 1e-5 and k == 6
    assert group.name == "tp" and group.ranks == (0, 1) and group.rank == 0
    assert torch.equal(args[0][0], args[2][0]) and not torch.equal(args[0][0], args[1][0])  # tp blocks
    assert len({a[2] for a in args}) == 1                                                    # replicated root
    world = spec.world({"N": 4, "K": 12}, 4, "float32")
    full = world.assemble([dict(zip(spec.parameters, a)) for a in args], "x")
    assert full.shape == (4, 12) and torch.equal(full[:, 6:], args[1][0])
    tampered = [dict(zip(spec.parameters, a)) for a in args]
    tampered[2]["x"] = tampered[2]["x"] + 1
    with pytest.raises(AssertionError, match="replicas of block 0 differ"):
        world.assemble(tampered, "x")
    assert [t.shape for t in world.distribute(torch.zeros(4, 12), "y")] == [(4, 6)] * 4


def test_a_const_can_carry_the_task_dtype():
    """A reference whose tensor inputs do not imply its output dtype (fp8 in, the task dtype out) is told
    the dtype by a Const; the prompt shows it."""
    spec = make_spec(inputs=(Tensor("x", ("N", "K"), dtype="float8_e4m3fn", dist=Uniform(-1, 1)),
                             Const("out_dtype", task_dtype=True)),
                     mesh=Mesh(("world", "W")), outputs=(Output("y", ("N", "K")),))
    for dtype in ("float32", "bfloat16"):
        x, out_dtype = spec.make_inputs(spec.input_context(0, 2, "tiny", dtype, "cpu",
                                                           rank_seeds(1, spec.layout(2), 0)))
        assert x.dtype == torch.float8_e4m3fn and out_dtype == getattr(torch, dtype)
    from pkb_env.contract.describe import input_lines
    assert "- out_dtype: torch.bfloat16 (the task dtype), fixed" in input_lines(spec, "bench", "bfloat16", 2)
    with pytest.raises(ValueError, match="give only one of"):
        Const("out_dtype", value=1, task_dtype=True)
    with pytest.raises(ValueError, match="resolve it with the trial's dtype"):
        Const("out_dtype", task_dtype=True).resolve({})


def test_tolerance_lines_name_their_outputs_when_outputs_differ():
    from pkb_env.contract.describe import tolerance_lines
    two = make_spec(mesh=Mesh(("world", "W")), inputs=(Tensor("x", ("N", "K")),),
                    outputs=(Output("a", ("N",), tolerance=Sum("K", 1, "float32")), Output("b", ("N",))),
                    tolerance_rule=Rounded(2, 1))
    lines = tolerance_lines(two, "tiny", "float32", 2)
    assert lines[0].startswith("Tolerance of a: ") and lines[1].startswith("Tolerance of b: ")
    same = make_spec(mesh=Mesh(("world", "W")), inputs=(Tensor("x", ("N", "K")),),
                     outputs=(Output("a", ("N",)), Output("b", ("N",))), tolerance_rule=Rounded(2, 1))
    assert tolerance_lines(same, "tiny", "float32", 2)[0].startswith("Tolerance: ")


def test_custom_distributions_are_checked():
    bad = Custom(lambda gen, shape, dtype, env: torch.zeros(3), "three zeros")
    spec = make_spec(inputs=(Tensor("x", ("N", "K"), dist=bad),), mesh=Mesh(("world", "W")),
                     outputs=(Output("y", ("N", "K")),))
    ctx = spec.input_context(0, 2, "tiny", "float32", "cpu", rank_seeds(1, spec.layout(2), 0))
    with pytest.raises(ValueError, match=r"the distribution made torch.float32 \(3,\), the declaration says"):
        spec.make_inputs(ctx)


def _ragged_spec(**overrides) -> TaskSpec:
    fields = dict(mesh=Mesh(("world", "W")), lengths=(Length("rows", "N / 2", "2 * N", doc="this rank's rows"),),
                  inputs=(Tensor("x", ("rows", "K")), Group("group", "world")), outputs=(Output("y", max_shape=("W * rows", "K")),),
                  cost=lambda c: Cost(comm=(Comm("all_gather", c["W"] * c.nbytes("x")),)))
    fields.update(overrides)
    return make_spec(**fields)


def test_lengths_are_drawn_per_rank_and_call_and_seen_at_their_smallest_elsewhere():
    spec = _ragged_spec()
    layout = spec.layout(4)

    def rows(secret, rank):
        ctx = spec.input_context(rank, 4, "tiny", "float32", "cpu", rank_seeds(secret, layout, rank, "t"))
        x, group = spec.make_inputs(ctx)
        return x.shape[0]
    drawn = [[rows(secret, r) for r in range(4)] for secret in range(12)]
    assert all(2 <= n < 8 for call in drawn for n in call)                        # N = 4: [N/2, 2N)
    assert any(len(set(call)) > 1 for call in drawn) and len({tuple(c) for c in drawn}) > 1
    assert [rows(0, r) for r in range(4)] == drawn[0]                              # reproducible
    foreign = spec.input_context(1, 4, "tiny", "float32", "cpu", rank_seeds(0, layout, 0, "t"))
    with pytest.raises(KeyError, match="holds no seed"):                           # a peer's length is private
        spec.make_inputs(foreign)
    assert spec.world({"N": 4, "K": 12}, 4, "float32")["rows"] == 2               # static uses see `low`
    [term] = spec.cost_model({"N": 64, "K": 1024}, 4, "bfloat16").comm
    assert term.size_bytes == 4 * 32 * 1024 * 2
    text = "\n".join(problem_lines(spec, "tiny", "float32", 4) + input_lines(spec, "tiny", "float32", 4))
    assert "Length rows: an integer in [N / 2, 2 * N) = [2, 8), drawn per call; different on every rank" in text
    assert "x: float32 (rows, K) = (2..7, 12)" in text


@pytest.mark.parametrize("change, message", [
    (dict(outputs=(Output("y", ("rows", "K")),)), "names a Length, whose value differs per call"),
    (dict(lengths=(Length("x", 1, 4),)), "input, length and output names must be unique"),
    (dict(lengths=(Length("N", 1, 4),)), "clash with W, mesh or length names"),
    (dict(lengths=(Length("rows", 1, 4, layout=PerRank(over="tp")),)), "mesh dimension 'tp'"),
])
def test_length_declarations_name_the_fix(change, message):
    with pytest.raises(TaskError, match=message):
        _ragged_spec(**change)
    with pytest.raises(ValueError, match="cannot be sharded"):
        Length("rows", 1, 4, layout=Sharded(0))


def test_inputs_computed_from_other_inputs():
    twice = FromInputs(lambda values, shape, dtype, env: values["x"] * 2, ("x",), "twice x")
    spec = make_spec(inputs=(Tensor("x", ("N", "K"), layout=PerRank(over="tp")),
                             Tensor("y", ("N", "K"), dist=twice, layout=PerRank(over="tp"))))
    ctx = spec.input_context(1, 4, "tiny", "float32", "cpu", rank_seeds(1, spec.layout(4), 1))
    x, y = spec.make_inputs(ctx)
    assert torch.equal(y, 2 * x) and "twice x (computed from this rank's x)" in twice.describe()
    later = make_spec(inputs=(Tensor("y", ("N", "K"), dist=twice, layout=PerRank(over="tp")),
                              Tensor("x", ("N", "K"), layout=PerRank(over="tp"))))
    y, x = later.make_inputs(later.input_context(1, 4, "tiny", "float32", "cpu", rank_seeds(1, later.layout(4), 1)))
    assert torch.equal(y, 2 * x), "an input may read one declared after it"
    with pytest.raises(TaskError, match="reads 'z', which is not another tensor input"):
        make_spec(inputs=(Tensor("y", ("N", "K"), dist=FromInputs(twice.fn, ("z",), "twice z")),))
    with pytest.raises(TaskError, match="reads x, which varies over tp while y does not"):
        make_spec(inputs=(Tensor("x", ("N", "K"), layout=PerRank(over="tp")),
                          Tensor("y", ("N", "K"), dist=twice, layout=PerRank(over="dp"))))


def _plant(gen, shape, dtype, env, given):
    """Normal values with 100 planted at each row's `target` column, where this block holds it."""
    out = torch.randn(shape, generator=gen)
    columns = given.values["target"] - given.offsets[1]
    mine = (columns >= 0) & (columns < shape[1])
    out[mine.nonzero().squeeze(1), columns[mine]] = 100.0
    return out.to(dtype)


PLANTED = Custom(_plant, "normal, 100 at the target", reads=("target",))


def test_conditioned_inputs_see_the_values_they_name_and_their_block():
    """A sharded input drawn given a replicated one (Custom with reads): made after it whatever the order,
    each block plants only the targets it holds, replicas agree, and the global tensor has every target."""
    spec = make_spec(inputs=(Tensor("x", ("N", "K"), dist=PLANTED, layout=Sharded(1, over="tp")),
                             Tensor("target", ("N",), dtype="int64", dist=Integers(0, "K"), layout=Replicated())),
                     outputs=(Output("y", ("N", "K"), layout=Sharded(1, over="tp")),))
    layout = spec.layout(4)
    args = [dict(zip(spec.parameters, spec.make_inputs(spec.input_context(r, 4, "tiny", "float32", "cpu",
                                                                           rank_seeds(7, layout, r, "t")))))
            for r in range(4)]
    full = spec.world({"N": 4, "K": 12}, 4, "float32").assemble(args, "x")   # checks that replicas agree
    target = args[0]["target"]
    assert torch.equal(full[torch.arange(4), target], torch.full((4,), 100.0))
    assert (full == 100.0).sum() == 4
    unplanted = make_spec(inputs=(Tensor("x", ("N", "K"), layout=Sharded(1, over="tp")),
                                  Tensor("target", ("N",), dtype="int64", dist=Integers(0, "K"),
                                         layout=Replicated())),
                          outputs=(Output("y", ("N", "K"), layout=Sharded(1, over="tp")),))
    seeds = rank_seeds(7, layout, 0, "t")
    plain = unplanted.make_inputs(unplanted.input_context(0, 4, "tiny", "float32", "cpu", seeds))
    assert torch.equal(plain[1], target), "reading an input changes no other input's stream"


@pytest.mark.parametrize("read, message", [
    (Tensor("target", ("N",), dtype="int64", dist=Integers(0, "K"), layout=PerRank()),
     "reads target, which varies over dp while x does not"),
    (Group("target", "tp"), "reads 'target', which is not another tensor input made without reading others"),
    (Tensor("target", ("N",), dist=FromInputs(lambda v, s, d, e: v["y"], ("y",), "y again")),
     "reads 'target', which is not another tensor input made without reading others"),
])
def test_reading_inputs_that_replicas_do_not_share_is_refused(read, message):
    extra = (Tensor("y", ("N",), layout=Replicated()),)
    with pytest.raises(TaskError, match=message):
        make_spec(inputs=(Tensor("x", ("N", "K"), dist=PLANTED, layout=Sharded(1, over="tp")), read, *extra))


def test_output_checks_and_structure():
    spec = make_spec()
    checks = spec.output_checks("bfloat16", {"N": 64, "K": 1024}, 4)
    assert set(checks) == {"output[0]", "output[1]"}
    assert not checks["output[0]"].tolerance.exact and not checks["output[0]"].unordered
    assert checks["output[1]"].unordered and checks["output[1]"].tolerance.exact
    good = (torch.zeros(4, 6), torch.zeros(3, dtype=torch.int64))
    args = spec.make_inputs(spec.input_context(0, 4, "tiny", "float32", "cpu", rank_seeds(1, spec.layout(4), 0)))
    assert spec.output_problems(good, 0, args, {"N": 4, "K": 12}, 4, "float32") == []
    problems = spec.output_problems((torch.zeros(4, 12), torch.zeros(3)), 0, args, {"N": 4, "K": 12}, 4, "float32")
    assert any("shape (4, 12), declared (4, 6)" in p for p in problems)
    assert any("dtype torch.float32, declared torch.int64" in p for p in problems)


def test_cost_context_counts_declared_bytes():
    model = make_spec().cost_model({"N": 64, "K": 1024}, 4, "bfloat16")
    [term] = model.comm
    assert term.group == "tp" and term.ranks == 2 and term.size_bytes == 64 * 1024 * 2
    assert model.hbm_bytes == (64 * 512 * 2) + 64 * 8 + 64 * 512 * 2  # x + idx + y; `ids` has no fixed shape


def test_cheapest_picks_the_option_that_moves_the_fewest_bus_bytes():
    """Moving data or moving work: which is cheaper depends on the sizes and on each collective's bus
    factor (an all-reduce moves twice what an all-gather of the same S moves)."""
    spec = make_spec()
    c = spec.cost_context({"N": 64, "K": 1024}, 8, "bfloat16")                   # tp = 4, dp = 2
    reduce = (Comm("all_reduce", 1000, "tp"),)                                  # 2 * 3/4 * 1000 = 1500
    gather = (Comm("all_gather", 1200, "tp"), Comm("all_gather", 800, "dp"))   # 3/4 * 1200 + 1/2 * 800 = 1300
    assert c.bus_bytes(reduce) == 1500 and c.bus_bytes(gather) == 1300
    assert c.cheapest(reduce, gather) == gather and c.cheapest(gather, reduce) == gather
    assert c.cheapest((Comm("all_reduce", 800, "tp"),), gather) == (Comm("all_reduce", 800, "tp"),)
    alone = spec.cost_context({"N": 64, "K": 1024}, 2, "bfloat16")                  # tp = 1: nothing moves
    assert alone.bus_bytes(reduce) == 0
    with pytest.raises(ValueError, match="at least one option"):
        c.cheapest()


# -- tolerance rules ----------------------------------------------------------------------------------

def test_sum_rule_grows_with_the_number_of_terms_and_the_precision():
    rule = Sum("K", 1, "float32") + Rounded("W", "sqrt(K)") + Sum("W", "sqrt(K)", "dtype")
    small = rule(torch.bfloat16, {"K": 64, "W": 2})
    big = rule(torch.bfloat16, {"K": 4096, "W": 8})
    assert big.atol > small.atol * 10 and big.rtol == small.rtol == 4 * 2 ** -8
    u = 2 ** -8
    expected = 2 ** -24 * 4096 ** 1.5 + u * 64 * (8 + 5 * math.sqrt(8)) + u * 64 * 8 ** 1.5
    assert big.atol == pytest.approx(expected)
    assert "4096 terms" in big.reason and "rtol 4u" in big.reason
    fp32 = rule(torch.float32, {"K": 4096, "W": 8})
    assert fp32.atol < big.atol / 500 and fp32.rtol == 4 * 2 ** -24
    assert rule(torch.int64, {"K": 4, "W": 2}).exact


def test_relative_rule_widens_rtol_in_its_accumulation_precision():
    rule = Sum("K", 1, "float32") + Relative("E", "float32", what="dot products through exp")
    fp32, bf16 = rule(torch.float32, {"K": 64, "E": 64}), rule(torch.bfloat16, {"K": 64, "E": 64})
    assert fp32.rtol == pytest.approx((4 + 64) * 2 ** -24) and fp32.atol == pytest.approx(2 ** -24 * 64 ** 1.5)
    assert bf16.rtol == pytest.approx(4 * 2 ** -8 + 64 * 2 ** -24)      # accumulated in fp32, not in bf16
    assert "64 roundings in float32 relative to each value" in fp32.reason
    assert Relative(3)(torch.bfloat16, {}).rtol == pytest.approx(7 * 2 ** -8)
    with pytest.raises(ValueError, match="must be 'dtype' or 'float32'"):
        Relative(3, "float64")


def test_propagated_rule_adds_rounding_errors_in_quadrature():
    """An operand rounded to bf16 and fed to a dot product with random weights: the measured error of the
    product stays inside the rule, and the rule is far tighter than the coherent worst case (Rounded)."""
    gen = torch.Generator().manual_seed(0)
    n, s = 2048, 3.0
    h = torch.randn(4096, n, generator=gen, dtype=torch.float64) * s
    w = torch.randn(n, 64, generator=gen, dtype=torch.float64)
    error = ((h.to(torch.bfloat16).double() - h) @ w).abs().max().item()
    rule = Propagated(n, s)(torch.bfloat16, {})
    assert error < rule.atol < Rounded(n, s)(torch.bfloat16, {}).atol / 10
    assert error > rule.atol / 4, "the rule should sit near the measured error, not far above it"
    assert "2048 values of RMS 3 rounded to bfloat16" in rule.reason


def test_ulps_rule_allows_steps_of_a_fixed_dtype_whatever_the_task_dtype():
    fp8 = Ulps(1, "float8_e4m3fn")
    for task_dtype in (torch.float32, torch.bfloat16):
        tol = fp8(task_dtype, {})
        assert tol.rtol == 2 ** -3 and tol.atol == 2 ** -9
    values = torch.tensor([0.0, 2 ** -9, 1.0, 1.125, 240.0, 448.0]).to(torch.float8_e4m3fn).double()
    up_one = torch.tensor([2 ** -9, 2 ** -8, 1.125, 1.25, 256.0, 448.0]).to(torch.float8_e4m3fn).double()
    tol = fp8(torch.bfloat16, {})
    assert bool(((up_one - values).abs() <= tol.atol + tol.rtol * values.abs()).all())       # one step passes
    two = torch.tensor([1.0, 240.0]).double(), torch.tensor([1.25, 288.0]).double()
    assert not bool(((two[1] - two[0]).abs() <= tol.atol + tol.rtol * two[0].abs()).any())   # two steps fail
    assert Ulps(2)(torch.float32, {}).rtol == 4 * 2 ** -24                                      # the task dtype
    assert Ulps(1, "float8_e4m3fn")(torch.int64, {}).rtol == 2 ** -3                           # fixed dtype
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            Ulps(bad)
    with pytest.raises(ValueError, match="torch floating dtype"):
        Ulps(1, "fp8")


def test_rtol_follows_the_outputs_dtype_and_atol_the_tasks():
    """An fp32 output of a bf16 task (a loss of bf16 logits) is rounded last in fp32: its rtol is fp32's, its
    atol terms stay what the rule says; integer outputs of a float task are exact."""
    rule = Sum("K", 1, "float32") + Rounded("W", "sqrt(K)")
    env = {"K": 4096, "W": 8}
    bf16, fp32_out = rule(torch.bfloat16, env), rule(torch.bfloat16, env, torch.float32)
    assert bf16.rtol == 4 * 2 ** -8 and fp32_out.rtol == 4 * 2 ** -24 and fp32_out.atol == bf16.atol
    assert "rounded to float32 once" in fp32_out.reason
    assert rule(torch.bfloat16, env, torch.int64).exact
    spec = make_spec(outputs=(Output("y", ("N", "K"), layout=Sharded(1, over="tp")),
                              Output("loss", ("N",), dtype="float32")))
    dims = {"N": 64, "K": 1024}
    assert spec.tolerance("bfloat16", dims, 4, "y").rtol == 4 * 2 ** -8
    assert spec.tolerance("bfloat16", dims, 4, "loss").rtol == 4 * 2 ** -24
    assert spec.tolerance("bfloat16", dims, 4).rtol == 4 * 2 ** -8   # no output named: the task dtype


def test_exact_and_fixed_rules():
    assert Exact("moves bytes")(torch.bfloat16, {}).exact
    fixed = Fixed({"bfloat16": Tolerance(0.1, 0.01, "measured 0.04 over 100 trials")})
    assert fixed(torch.bfloat16, {}).atol == 0.1
    with pytest.raises(ValueError, match="no entry for float16"):
        fixed(torch.float16, {})
    with pytest.raises(ValueError, match="cannot be combined"):
        (Exact() + Sum("K"))(torch.bfloat16, {"K": 4})
