"""PKB compatibility (docs/pkb_compat.md): PKB-format files judged unchanged, with PKB-format candidates written here
(PKB's own files never enter the project; benchmarks/pkb_references.py judges PKB's reference files from a checkout).

The adapter's mappings are checked in this process against the tasks' real declarations (no ranks); the judge's
side (the screen against PKB's signature, PKB's `utils` helpers in the rank, the record saying which statement
judged a file) on one shared judge of CPU ranks."""
from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from conftest import FAST
from pkb_env.compat import helpers
from pkb_env.compat.adapter import PkbResultError, adapt
from pkb_env.compat.files import classify
from pkb_env.compat.rule import pkb_close
from pkb_env.record import EvaluationRecord, Verdict
from pkb_env.task import load_task


def adapted(task: str, solution, rank: int = 0, world_size: int = 2, preset: str = "tiny"):
    spec = load_task(task)
    dims = spec.preset(preset).dims
    return adapt(spec, solution, spec.env(dims, world_size), rank, world_size, spec.layout(world_size, dims))


# -- the adapter, in this process ------------------------------------------------------------------------------
def test_an_output_only_on_the_root_is_none_elsewhere_whatever_pkb_returns_there():
    pkb_reduce = lambda tensor, dst: tensor.clone()   # PKB's reduce returns a tensor on every rank  # noqa: E731
    x = torch.ones(2, 2)
    assert adapted("reduce", pkb_reduce, rank=1)(x, 0) is None
    assert torch.equal(adapted("reduce", pkb_reduce, rank=0)(x, 0), x)


def test_an_input_returned_as_the_output_is_copied_pkbs_identity_at_world_size_one():
    pkb_ulysses = lambda x, scatter_dim, gather_dim, group=None: x.contiguous()   # noqa: E731
    x = torch.arange(8.0).reshape(2, 4)
    out = adapted("ulysses_all_to_all", pkb_ulysses, world_size=1)(x, 0, 1, None)
    assert torch.equal(out, x) and out.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    fresh = adapted("ulysses_all_to_all", lambda x, s, g, group=None: x + 0, world_size=1)
    kept = torch.zeros(1)
    assert fresh(kept, 0, 1, None).untyped_storage().data_ptr() != kept.untyped_storage().data_ptr()


def test_a_sparse_argument_passes_the_adapter_pkbs_spherical_convolution_takes_one():
    """The copy of returned inputs looks at arguments' memory: a sparse one is its parts (a sparse tensor has no
    storage to ask: GPT-5.5's file for PKB 62 failed so on one H100, before this was fixed)."""
    spec = load_task("torchharmonics_spherical_convolution")
    psi = torch.sparse_coo_tensor(torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2))
    args = [psi if name == "psi" else torch.zeros(2) for name in spec.parameters]
    seen = {}

    def pkb_conv(*pkb_args):
        seen["sparse"] = [a for a in pkb_args if isinstance(a, torch.Tensor) and a.is_sparse]
        return pkb_args[0] + 1

    adapted("torchharmonics_spherical_convolution", pkb_conv, world_size=1)(*args)
    assert len(seen["sparse"]) == 1


def test_parameters_are_converted_as_declared_lists_python_ints_and_transposes():
    seen = {}

    def pkb_all2all(local_tensor, input_split_sizes, output_split_sizes, group):
        seen.update(inp=input_split_sizes, out=output_split_sizes)
        return local_tensor.clone()

    adapted("moe_all2all_primitive", pkb_all2all)(torch.zeros(3, 2), torch.tensor([1, 2]), torch.tensor([2, 1]), None)
    assert seen == {"inp": [1, 2], "out": [2, 1]} and type(seen["inp"][0]) is int

    def pkb_at(A_local, B):
        seen["A_local"] = A_local
        return A_local @ B

    a_t = torch.arange(6.0).reshape(3, 2)   # the task's K-major block (K/W, M)
    adapted("allgather_gemm_transposed_a", pkb_at)(a_t, torch.ones(3, 4))
    assert torch.equal(seen["A_local"], a_t.T)


def test_several_inputs_become_one_list_and_harness_constants_fill_dropped_parameters():
    seen = {}

    def pkb_clip(grad_tensors, max_norm, norm_type=2.0, fsdp_group=None):
        seen["grads"] = grad_tensors
        return torch.tensor(1.0)

    grads = [torch.full((2, 2), float(i)) for i in range(3)]
    adapted("clip_grad_norm_no_ep", pkb_clip)(*grads, 1.0, 2.0, None)
    assert isinstance(seen["grads"], list) and all(a is b for a, b in zip(seen["grads"], grads))

    def pkb_fsdp_tp(x_local, W1_shard, W2_shard, W3_shard, n_tp, n_fsdp):
        seen["sizes"] = (n_tp, n_fsdp)
        return x_local

    spec = load_task("fsdp_and_tp")
    layout = spec.layout(4, spec.preset("tiny").dims)
    adapted("fsdp_and_tp", pkb_fsdp_tp, world_size=4)(torch.zeros(1), None, None, None, None, None)
    assert seen["sizes"] == (layout.sizes[layout.names.index("tp")], layout.sizes[layout.names.index("fsdp")])


def test_returned_state_is_copied_into_the_inputs_updated_in_place_and_nothing_is_returned():
    spec = load_task("fsdp_step_e2e")
    args = [torch.zeros(3) if isinstance(d, type(spec.inputs[0])) else 1 for d in spec.inputs]
    names = spec.parameters
    state = {n: args[names.index(n)] for n in ("flat_param_shard", "exp_avg_shard", "exp_avg_sq_shard")}

    def pkb_step(X_local, y_local, flat_param_shard, param_shapes, m, v, *hyper):
        return flat_param_shard + 1, m + 2, v + 3

    args[names.index("X")], args[names.index("y")] = torch.zeros(2, 5), torch.zeros(2, 7)
    assert adapted("fsdp_step_e2e", pkb_step)(*args) is None
    assert [float(state[n][0]) for n in state] == [1.0, 2.0, 3.0]


def test_a_metrics_tensor_becomes_the_dict_output_in_its_declared_order():
    spec = load_task("importance_sampling_loss")
    fields = [f.name for f in next(o for o in spec.outputs if o.name == "metrics").fields]

    def pkb_loss(*args):
        return torch.tensor(1.0), None, torch.zeros(4), torch.zeros(4), torch.arange(5.0)

    out = adapted("importance_sampling_loss", pkb_loss)(*[None] * len(spec.inputs))
    assert list(out[4]) == fields and [float(out[4][f]) for f in fields] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_values_pkb_returns_in_another_dtype_are_cast_to_the_dtype_the_task_states():
    loss = adapted("vocab_parallel_cross_entropy", lambda logits, target, group: logits.sum(-1))(
        torch.ones(2, 3, 4, dtype=torch.bfloat16), torch.zeros(2, 3, dtype=torch.int64), None)
    assert loss.dtype == torch.float32 and torch.equal(loss, torch.full((2, 3), 4.0))

    def pkb_gsplat(*args):   # PKB's ids come back int64 (torch.cumsum promotes its int32 offsets)
        ids = torch.arange(3, dtype=torch.int64)
        return ids, ids + 8, torch.ones(3, 2, dtype=torch.int32), *(torch.zeros(3, k) for k in (2, 1, 3, 1, 3))

    task = "gsplat_3d_gaussian_splatting"
    out = adapted(task, pkb_gsplat)(*[None] * len(load_task(task).inputs))
    assert out[0].dtype == out[1].dtype == torch.int32 and out[1].tolist() == [8, 9, 10]


def test_a_result_of_another_structure_says_what_pkbs_problem_returns():
    with pytest.raises(PkbResultError, match="a tuple of 12 values .*got a tensor"):
        adapted("ddp", lambda *args: torch.zeros(1))(*[torch.zeros(1)] * len(load_task("ddp").inputs))


# -- file names --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, task, how", [
    ("12_allgather_gemm_cuda.py", "allgather_gemm", "name"),
    ("11_gemm_allgather_AT_triton.py", "allgather_gemm_transposed_a", "alias"),       # PKB's older name
    ("34_ulysses_all_to_all_tensor_primitive_cuda.py", "ulysses_all_to_all", "name"),  # older number 34, PKB's 33
    ("18_rms_norm_cuda.py", "tp_rms_norm", "alias"),
    ("87_conv2d_boundary_exchange.py", "conv2d_halo_exchange", "name"),               # a reference file
    ("13_my_own_name_cuda.py", "gemm_allreduce", "number"),
    ("47_fsdp_adamw_sharded_cuda.py", None, ""),
    ("solution.py", None, ""),
])
def test_pkb_file_names_map_to_tasks_by_problem_name_then_number(name, task, how):
    found = classify(name)
    assert (found.task, found.how) == (task, how)
    assert (found.why == "") == (task is not None)


# -- PKB's own check, for the record ---------------------------------------------------------------------------
def test_pkbs_rule_ignores_dtype_allows_one_percent_and_never_matches_nan():
    x = torch.tensor([1.0, 100.0])
    assert pkb_close(x, (x * 1.009).to(torch.bfloat16))
    assert not pkb_close(x, x * 1.03)
    assert not pkb_close(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    assert pkb_close({"a": x, "b": None}, {"a": x, "b": None}) and not pkb_close({"a": x}, {"a": x, "b": 1})
    assert pkb_close(torch.tensor([1 + 1j]), torch.tensor([1 + 5j]))   # .float() keeps the real part


# -- PKB's helpers -------------------------------------------------------------------------------------------------
def test_pkbs_helpers_import_as_utils_and_nothing_else_of_utils_does():
    finder_count = len(sys.meta_path)
    helpers.install()
    try:
        from utils.cuda_helpers import compile_cuda_extension  # noqa: F401
        import utils.cuda_helpers as module
        assert [n for n in vars(module) if not n.startswith("__")] == ["compile_cuda_extension"]
        assert not hasattr(module, "__file__")
        with pytest.raises(ModuleNotFoundError, match="helpers for solutions only"):
            import utils.input_output_tensors  # noqa: F401  (PKB's input maker: a candidate's answer key there)
        from pkb_env.runtime import CompileError
        with pytest.raises(CompileError, match="extra_include_paths"):
            compile_cuda_extension("x", "", extra_include_paths=["/tk/include"])
    finally:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, helpers.HelperFinder)]
        for name in [n for n in sys.modules if n == "utils" or n.startswith("utils.")]:
            del sys.modules[name]
    assert len(sys.meta_path) == finder_count


def test_a_record_with_its_pkb_judgement_survives_json():
    from pkb_env.record import PkbJudgement

    record = EvaluationRecord(task="reduce", world_size=2, preset="tiny", dtype="float32", executor="cpu",
                              hardware="x", verdict=Verdict.WRONG,
                              pkb=PkbJudgement(4, "reduce", "pkb", "x.pkb", pkb_env_verdict="correct"))
    assert EvaluationRecord.from_dict(record.to_dict()) == record


# -- the judge, on CPU ranks -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pkb_client():
    from pkb_env.client import LocalClient

    with LocalClient(FAST.replace(executor="cpu", world_size=2, pkb=True)) as client:
        yield client


def judged(client, task: str, code: str) -> EvaluationRecord:
    return client.submit(task, textwrap.dedent(code)).result()


PKB_REDUCE = """
    import torch
    import torch.distributed as dist

    def solution(tensor, dst=0):
        out = tensor.clone()
        dist.reduce(out, dst=dst, op=dist.ReduceOp.SUM)
        return out                     # PKB: a tensor on every rank
"""


def test_a_pkb_file_is_judged_unchanged_and_the_record_says_by_which_statement(pkb_client):
    record = judged(pkb_client, "reduce", PKB_REDUCE)
    assert record.verdict is Verdict.CORRECT, record.feedback
    assert (record.pkb.statement, record.pkb.problem, record.pkb.pkb_id) == ("pkb-env", "reduce", 4)
    assert record.pkb.pkb_rule is True
    assert "Judged on pkb-env's statement of PKB problem 4 (reduce)" in record.feedback


def test_a_pkb_file_is_screened_against_pkbs_signature(pkb_client):
    code = """
        import torch.distributed as dist

        def solution(grad_tensors, max_norm, norm_type=2.0, fsdp_group=None):
            total = sum(float(g.float().pow(2).sum()) for g in grad_tensors)
            import torch
            total = torch.tensor(total)
            dist.all_reduce(total, group=fsdp_group)
            norm = total.sqrt()
            for g in grad_tensors:
                g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0).to(g.dtype))
            return norm
    """
    record = judged(pkb_client, "clip_grad_norm_no_ep", code)
    assert record.verdict not in (Verdict.UNPARSABLE, Verdict.FLAGGED), record.feedback   # PKB's 4 parameters
    one_too_few = code.replace("def solution(grad_tensors, max_norm,", "def solution(grad_tensors,")
    refused = judged(pkb_client, "clip_grad_norm_no_ep", one_too_few.replace("max_norm /", "1.0 /"))
    assert refused.verdict is Verdict.UNPARSABLE and "def solution(grad_tensors, max_norm" in refused.error


def test_pkbs_helpers_are_importable_in_a_pkb_rank_and_pkbs_harness_is_not(pkb_client):
    with_helper = "from utils.cuda_helpers import compile_cuda_extension\n" + textwrap.dedent(PKB_REDUCE)
    assert judged(pkb_client, "reduce", with_helper).verdict is Verdict.CORRECT
    harness = "from utils.input_output_tensors import create_input_tensor\n" + textwrap.dedent(PKB_REDUCE)
    record = judged(pkb_client, "reduce", harness)
    assert record.verdict is Verdict.BUILD_ERROR and "helpers for solutions only" in record.error


def test_a_pkb_file_right_by_pkbs_statement_and_wrong_by_pkb_envs_is_told_how_they_differ(pkb_client):
    code = """
        import torch
        import torch.distributed as dist

        def solution(idx, value, num_nodes, group=None):   # PKB's owner rule: index i to rank i % W
            world = dist.get_world_size(group)
            owner = idx % world
            order = torch.argsort(owner, stable=True)
            send = torch.bincount(owner, minlength=world)
            recv = torch.empty_like(send)
            dist.all_to_all_single(recv, send, group=group)
            send, recv = send.tolist(), recv.tolist()
            out_idx = idx.new_empty(sum(recv))
            dist.all_to_all_single(out_idx, idx[order], recv, send, group=group)
            out_value = value.new_empty(sum(recv), value.shape[1])
            dist.all_to_all_single(out_value, value[order], recv, send, group=group)
            return out_idx, out_value
    """
    record = judged(pkb_client, "gnn_sparse_embedding_all2all", code)
    assert record.verdict is Verdict.CORRECT and record.pkb.statement == "pkb", record.feedback
    assert record.pkb.pkb_env_verdict == "wrong"
    assert record.pkb.note.startswith("correct by PKB's statement, wrong by pkb-env's")
    assert "PKB's semantics differ here: pkb-env's rank s owns the indices" in record.feedback


def test_the_feedback_says_what_a_variant_takes_from_pkb_and_what_it_keeps_of_the_task():
    from pkb_env.judge.pkb import finish
    from pkb_env.task import pkb_variant

    def told(task: str) -> str:
        spec = load_task(task)
        variant = pkb_variant(spec)
        record = EvaluationRecord(task=variant.name, world_size=2, preset="tiny", dtype="float32", executor="cpu",
                                  hardware="x", verdict=Verdict.CORRECT)
        return finish(record, spec, variant, None, "").feedback

    assert "PKB's inputs, function and tolerance, with pkb-env's checks" in told("fused_moe_fwd")
    assert "PKB's function and tolerance; the task's inputs and edge cases, with" in told("grad_acc_loss")
    assert "PKB's tolerance; the task's function and inputs without its edge case tied_logits, with" in told(
        "load_balancing_loss")
    assert "PKB's inputs and tolerance; the task's function, with" in told("gnn_negative_scoring")
    unmapped = told("sequence_parallel_mlp")   # no pkb-env verdict can stand beside it: the record says why
    assert "Beside it: pkb-env's statement cannot judge it (PKB's inputs (x by hidden blocks" in unmapped


PKB_LOAD_BALANCING = """
    import torch
    import torch.distributed as dist

    def solution(gate_logits, num_experts, top_k=2, attention_mask=None):
        logits = gate_logits.float()
        probs = logits.softmax(dim=-1)
        chosen = torch.topk(logits, top_k, dim=-1).indices          # PKB's: no order among ties
        routed = torch.bincount(chosen.flatten(), minlength=num_experts).float() / logits.shape[0]
        loss = num_experts * (routed * probs.mean(dim=0)).sum()
        dist.all_reduce(loss)
        return loss / dist.get_world_size()
"""


def test_a_pkb_file_is_judged_on_pkbs_statement_with_pkb_envs_verdict_beside_it(pkb_client):
    record = judged(pkb_client, "load_balancing_loss", PKB_LOAD_BALANCING)
    assert record.task == "load_balancing_loss"
    assert (record.pkb.statement, record.pkb.judged_on) == ("pkb", "pkb_env.tasks.load_balancing_loss.pkb")
    assert record.verdict is Verdict.CORRECT, record.feedback
    assert record.pkb.pkb_env_verdict is not None   # both statements apply: pkb-env's verdict is beside it
    if record.pkb.pkb_env_verdict != "correct":     # torch.topk broke a drawn tie as pkb-env's rule does not
        assert record.pkb.note.startswith("correct by PKB's statement, wrong by pkb-env's")
        assert "tie rule" in record.feedback


def test_pkbs_helpers_exist_only_for_pkb_files():
    from pkb_env.client import LocalClient

    with LocalClient(FAST.replace(executor="cpu", world_size=2)) as client:
        code = "from utils.cuda_helpers import compile_cuda_extension\n" + textwrap.dedent(PKB_REDUCE)
        record = client.submit("all_reduce", code.replace("dst=0", "")).result()
    assert record.verdict is Verdict.BUILD_ERROR and "No module named 'utils'" in record.error


def test_a_problem_no_statement_judges_is_unjudged_with_the_reason_and_nothing_runs(pkb_client):
    code = """
        import torch.distributed as dist

        def solution(seed_nodes, fanouts, colptr, row, node_to_rank, group=None, replace=False):
            raise SystemExit("never run")
    """
    record = judged(pkb_client, "gnn_neighbor_sampling", code)
    assert record.verdict is Verdict.JUDGE_ERROR and record.pkb.statement == "none"
    assert "no statement of PKB problem 64" in record.error and "PKB's semantics differ here" in record.error
    assert record.build is None and "the file was not run" in record.feedback
    multicast = code.replace('raise SystemExit("never run")', 'return "multimem.ld_reduce.global.add.f32"')
    assert judged(pkb_client, "gnn_neighbor_sampling", multicast).verdict is Verdict.FLAGGED   # the file's own


def test_a_build_asked_for_ahead_of_a_step_is_checked_as_a_steps_would_be():
    from pkb_env.runtime.kernels import extension_request
    from pkb_env.service import JudgeService

    with JudgeService(FAST.replace(executor="cpu", world_size=1)) as service:
        refused = service.prebuild(extension_request("ext", "", '#include "/etc/passwd"\n'))
    assert "refused" in refused and "headers are the toolkit's" in refused


def test_a_folder_of_pkb_files_is_an_agent_whose_tasks_are_the_files_problems(tmp_path):
    from pkb_env.evaluation import agent_from_spec, resolve_tasks

    for name in ("12_allgather_gemm_cuda.py", "34_ulysses_all_to_all_tensor_primitive_triton.py",
                 "12_allgather_gemm_triton.py", "47_fsdp_adamw_sharded_cuda.py"):
        (tmp_path / name).write_text(f"# {name}\n")
    agent = agent_from_spec(f"pkb:{tmp_path}")
    assert resolve_tasks(None, agent) == ["allgather_gemm", "ulysses_all_to_all"]
    assert agent.act({"task_id": "allgather_gemm"}) == "# 12_allgather_gemm_cuda.py\n"   # the first in name order
    assert sorted(p.name for p, _ in agent.skipped) == ["12_allgather_gemm_triton.py", "47_fsdp_adamw_sharded_cuda.py"]


def test_splits_pkb_returned_as_python_lists_become_the_tasks_int64_tensors():
    def pkb_preprocess(expert_mask, num_experts, group=None):   # PKB's older 26 (its published corpus's)
        return [1, 2], [3, 4], torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)

    out = adapted("moe_token_preprocess", pkb_preprocess)(None, 4, None)
    assert out[0].dtype == torch.int64 and out[0].tolist() == [1, 2] and out[1].tolist() == [3, 4]


# PKB 28 and 29 in PKB's format, written here from PKB's statement: they move rows by the counts they are given, so
# they are right on PKB's equal counts (the variant) and on the task's real ones (pkb-env's verdict beside).
PKB_PRE_ALL2ALL = """
    import torch
    import torch.distributed as dist

    def solution(hidden_states, expert_mask, num_experts, input_splits, output_splits,
                 num_global_tokens_per_local_expert, group=None):
        routing_map = expert_mask.sum(dim=1)
        picked = routing_map.bool()
        tokens = torch.arange(picked.shape[1], device=picked.device).expand_as(picked)
        permutation = tokens.masked_select(picked)
        received = hidden_states.new_empty((sum(output_splits), hidden_states.shape[1]))
        dist.all_to_all_single(received, hidden_states[permutation], output_splits, input_splits, group=group)
        world = dist.get_world_size(group)
        local = num_experts // world
        chunks = received.split(num_global_tokens_per_local_expert.flatten().tolist())
        regrouped = torch.cat([chunks[s * local + l] for l in range(local) for s in range(world)])
        return regrouped, routing_map, permutation, hidden_states.shape
"""
PKB_POST_ALL2ALL = """
    import torch
    import torch.distributed as dist

    def solution(expert_outputs, routing_weights, selected_experts, num_experts, input_splits, output_splits,
                 num_global_tokens_per_local_expert, routing_map, local_input_permutation_mapping,
                 org_hidden_states_shape, group=None):
        world = dist.get_world_size(group)
        local = num_experts // world
        chunks = expert_outputs.split(num_global_tokens_per_local_expert.T.flatten().tolist())
        by_source = torch.cat([chunks[l * world + s] for s in range(world) for l in range(local)])
        back = expert_outputs.new_empty((sum(input_splits), expert_outputs.shape[1]))
        dist.all_to_all_single(back, by_source, input_splits, output_splits, group=group)
        weights = routing_weights.new_zeros(routing_map.T.shape).scatter(1, selected_experts, routing_weights)
        rows = back * weights.T[routing_map].unsqueeze(1)
        pairs = local_input_permutation_mapping
        return rows.new_zeros(org_hidden_states_shape).index_add_(0, pairs, rows)
"""


@pytest.mark.parametrize("task, code, wrong", [
    ("moe_pre_all2all", PKB_PRE_ALL2ALL, ("return regrouped,", "return received,")),   # skips the regrouping
    ("moe_post_all2all", PKB_POST_ALL2ALL, ("(0, pairs, rows)", "(0, pairs[1:], rows[1:])")),   # drops a pair
])
def test_pkbs_moe_dispatch_and_combine_are_judged_on_pkbs_equal_splits(pkb_client, task, code, wrong):
    record = judged(pkb_client, task, code)
    assert record.verdict is Verdict.CORRECT, record.feedback
    assert (record.pkb.statement, record.pkb.judged_on) == ("pkb", f"pkb_env.tasks.{task}.pkb")
    assert record.pkb.pkb_env_verdict == "correct"   # it follows the counts: the task's real ones too
    assert "PKB's inputs, function and tolerance" in record.feedback
    assert code.count(wrong[0]) == 1
    broken = judged(pkb_client, task, code.replace(*wrong))
    assert broken.verdict is Verdict.WRONG and broken.pkb.statement == "pkb", broken.feedback


# PKB 40 in PKB's format, written here from PKB's statement: every tensor in the run's dtype (as PKB's harness passes
# them), the step computed in it, the twelve updated tensors returned.
PKB_DDP = """
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    def solution(X_local, y_local, W1, b1, W2, b2, exp_avg_W1, exp_avg_b1, exp_avg_W2, exp_avg_b2, exp_avg_sq_W1,
                 exp_avg_sq_b1, exp_avg_sq_W2, exp_avg_sq_b2, lr, beta1, beta2, eps, step):
        params, moments = (W1, b1, W2, b2), (exp_avg_W1, exp_avg_b1, exp_avg_W2, exp_avg_b2)
        squares = (exp_avg_sq_W1, exp_avg_sq_b1, exp_avg_sq_W2, exp_avg_sq_b2)
        assert all(t.dtype == X_local.dtype for t in params + moments + squares), "expects one dtype"
        leaves = [p.detach().clone().requires_grad_(True) for p in params]
        F.mse_loss(F.linear(F.relu(F.linear(X_local, leaves[0], leaves[1])), leaves[2], leaves[3]), y_local).backward()
        grad = torch.cat([p.grad.reshape(-1) for p in leaves])
        dist.all_reduce(grad)
        grad /= dist.get_world_size()
        new_p, new_m, new_v, offset = [], [], [], 0
        for p, m, v in zip(params, moments, squares):
            g = grad[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
            m = m.mul(beta1).add_(g, alpha=1 - beta1)
            v = v.mul(beta2).addcmul_(g, g, value=1 - beta2)
            update = (m / (1 - beta1 ** step)).div((v / (1 - beta2 ** step)).sqrt().add(eps))
            new_p.append(p.add(update, alpha=-lr))
            new_m.append(m)
            new_v.append(v)
        return (*new_p, *new_m, *new_v)
"""


def test_a_pkb_mlp_step_gets_every_tensor_in_the_runs_dtype_as_pkbs_harness_passes_them(pkb_client):
    record = pkb_client.submit("ddp", textwrap.dedent(PKB_DDP), dtype="bfloat16").result()
    assert (record.pkb.statement, record.pkb.judged_on, record.dtype) == ("pkb", "pkb_env.tasks.ddp.pkb", "bfloat16")
    assert record.verdict is Verdict.CORRECT, record.feedback
    unaveraged = PKB_DDP.replace("grad /= dist.get_world_size()", "pass")   # the moments twice the gradient's
    wrong = pkb_client.submit("ddp", textwrap.dedent(unaveraged), dtype="bfloat16").result()
    assert wrong.verdict is Verdict.WRONG and wrong.pkb.statement == "pkb", wrong.feedback


def test_a_variant_that_takes_fewer_dtypes_says_it_judged_in_another(pkb_client):
    """PKB's statements of ulysses_attention, dinov2_distributed_knn and the chunked top-k backward take float32
    only (docs/pkb_compat.md); a bfloat16 run judges their files in float32, and a file that asserts bfloat16
    (GPT-5.5's 40 and 85 on one H100) must be told so, not only fail its own assert."""
    from pkb_env.judge.pkb import statement_of

    task = load_task("ulysses_attention")
    chosen, dtype, told = pkb_client.run(lambda service: statement_of(service, task, "tiny", "bfloat16"))
    assert chosen is not task and dtype == "float32"        # PKB's statement, in the dtype it takes
    assert "judged in float32, not the bfloat16 asked" in told
    _, same, nothing = pkb_client.run(lambda service: statement_of(service, task, "tiny", "float32"))
    assert (same, nothing) == ("float32", "")


# PKB 43 in PKB's format, written here from PKB's statement: as Claude Opus 4.7's 44 does, the dtype taken from the
# master weights and every tensor read in it (PKB's harness passes them all in the run's dtype).
PKB_FUSED_ADAM = """
    import torch
    import torch.distributed as dist

    def solution(grad_shard, master_shard, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, step):
        dtype = master_shard.dtype
        if grad_shard.dtype != dtype or exp_avg.dtype != dtype:
            raise RuntimeError(f"expected scalar type {dtype} but found {grad_shard.dtype}")
        m = exp_avg.mul(beta1).add_(grad_shard, alpha=1 - beta1)
        v = exp_avg_sq.mul(beta2).addcmul_(grad_shard, grad_shard, value=1 - beta2)
        update = (m / (1 - beta1 ** step)).div((v / (1 - beta2 ** step)).sqrt().add(eps))
        w = master_shard.add(update, alpha=-lr)
        parts = [torch.empty_like(w) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, w)
        return torch.cat(parts)
"""


def test_pkbs_fused_adam_gets_its_master_weights_and_moments_in_the_runs_dtype(pkb_client):
    """PKB 43's harness passes the master weights and moments in the run's dtype (pkb-env's task keeps them fp32 on
    purpose): Claude Opus 4.7's 44, which reads every tensor in the weights' dtype, was rejected at bfloat16 on one
    H100 ("expected scalar type Float but found BFloat16"), a file PKB's harness runs."""
    record = pkb_client.submit("fused_adam_grad_unshard_allgather", textwrap.dedent(PKB_FUSED_ADAM),
                               dtype="bfloat16").result()
    assert (record.pkb.statement, record.dtype) == ("pkb", "bfloat16"), record.feedback
    assert record.verdict is Verdict.CORRECT, record.feedback
    assert record.pkb.pkb_env_verdict == "runtime_error"      # pkb-env's statement beside: fp32 master weights
    shuffled = PKB_FUSED_ADAM.replace("torch.cat(parts)", "torch.cat(parts[::-1])")
    wrong = pkb_client.submit("fused_adam_grad_unshard_allgather", textwrap.dedent(shuffled), dtype="bfloat16").result()
    assert wrong.verdict is Verdict.WRONG and wrong.pkb.statement == "pkb", wrong.feedback
