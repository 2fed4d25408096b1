"""What several tasks' PKB declarations share (contract/pkb.py, docs/pkb_compat.md): how pkb-env's function departs
from PKB's where a family departs alike, and the variants stating PKB's problem where pkb-env's function differs
from PKB's on ties only (`without_ties`) or in a 16-bit dtype's precision only (`in_inputs_dtype`)."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

from pkb_env.contract import DTYPES, TASK_DTYPE, Distribution, Fixed, Output, Preset, TaskSpec, Tolerance
from pkb_env.contract.pkb import PKB_TOLERANCE_TEXT
from pkb_env.contract.results import returns_of

MOE_ROUTER = ("PKB's router is part of the function: a gate (its weight and bias) scores the tokens, then softmax and "
              "top-k pick the experts; pkb-env draws the routing jointly over the ranks and passes it (topk_idx, "
              "topk_weights, with idle ranks and empty experts as edge cases), and its experts are weight tensors "
              "rather than nn.Linear modules")
MOE_UNMAPPED = "PKB's gate weights cannot be made from a routing drawn before the call"

TOP_P = ("PKB's reference filters top-k and top-p in the logits' dtype with torch's sort, so ties at the cut and "
         "bfloat16 rounding decide which tokens survive; pkb-env filters in float32 and states the tie rule (the "
         "lower vocabulary index first), with tied logits drawn")

PKB_VARIANT = ("PKB's problem as PKB states it, judged with pkb-env's checks: inputs from secret per-call seeds with "
               "PKB's distributions (not PKB's 42 + rank + trial), every timed call checked, PKB's tolerance")
PKB_VARIANT_OWN_INPUTS = ("PKB's problem as PKB states it, judged with pkb-env's checks: the task's inputs from secret "
                          "per-call seeds and its edge cases (PKB's function is defined on them as the task's), every "
                          "timed call checked, PKB's tolerance")


def pkb_rule(dtypes) -> Fixed:
    """PKB's tolerance at every dtype: torch.allclose(got.float(), expected.float(), atol=1e-2, rtol=1e-2)."""
    return Fixed({d: Tolerance(1e-2, 1e-2, PKB_TOLERANCE_TEXT) for d in dtypes})


def plain_clauses(spec: TaskSpec) -> tuple:
    """The task's clauses a variant keeps: a variant draws PKB's inputs with none of pkb-env's edge cases, so a
    clause an edge case draws goes (PKB's statement has no such corner), as does one that adds a trial in a 16-bit
    dtype (pkb-env's rule of computing in float32 whatever the inputs' dtype: PKB judges a file in one dtype, the
    one it is run at, and its reference computes in that dtype)."""
    return tuple(c for c in spec.clauses if not c.edge and not c.dtypes)


def float32_presets(presets: Mapping[str, Preset]) -> dict[str, Preset]:
    """`presets` in float32, each noting why (a variant kept to float32: its module docstring says why)."""
    return {name: replace(p, dtype="float32", note=f"{p.note} (float32: the module docstring)")
            for name, p in presets.items()}


TIES_FLOAT32 = ("16-bit values tie, and PKB's statement leaves the order of ties to the kernel (torch.topk's or "
                "sort's)")

# Why the top-k / top-p variants (PKB 82-84) stay in float32: measured on CPU in one process, PKB's draws at bench
# (2 x 8 tokens over 256 ids, top-k 10, top-p 0.9), 500 calls, PKB's filter in bfloat16 against the exact filter of
# the same bfloat16 logits, PKB's rule.
VOCAB_FLOAT32 = ("in bfloat16 PKB's reference decides the top-p cut on bfloat16 probabilities (a bf16 softmax and "
                 "cumulative sum against 1 - top_p), so rounding, not only ties, decides which tokens survive: "
                 "against the exact filter of the same bfloat16 logits PKB's own bf16 reference was past PKB's "
                 "tolerance in 785 of 8000 tokens (410 of 500 calls) with the target raised by sqrt(2 ln V) + 0.5, "
                 "and 37 of 8000 with PKB's +8 (CPU, bench). A draw could keep the cut away from the threshold "
                 "only by seeing each token's top k over the whole vocabulary, and a rank draws only its own "
                 "block (docs/task_contract.md); with a target raised until it alone survives, every output is 0 "
                 "and no kernel's cut is tested")

# Why the k-NN variant (PKB 79) stays in float32: measured on CPU, PKB's bench draws (32 unit-normal queries of 384
# against 16384 training features, k = 200), 160 queries.
KNN_FLOAT32 = ("in bfloat16 PKB's similarities are bfloat16 values (its matmul returns the dtype): the 200 nearest "
               "of 16384 lie a median 1.4e-4 apart while a bfloat16 step there (about 0.115) is 4.9e-4, so the k-th "
               "and next similarities tied in 121 of 160 queries and every query had a tie within its top k + 1 "
               "(the labels are returned in that order). A draw could keep them apart only from every rank's "
               "training block, and a rank draws only its own (docs/task_contract.md)")


def without_ties(spec: TaskSpec, *, draws: Mapping[str, Distribution], why: str,
                 float32_only: str = TIES_FLOAT32) -> TaskSpec:
    """The variant stating PKB's problem where pkb-env's function differs from PKB's only on ties: the same reference
    and golden (equal to PKB's function wherever nothing ties), with the inputs drawn as PKB draws them (`draws`:
    continuous, so that nothing ties), none of pkb-env's tie edge cases, PKB's tolerance on every float output, in
    float32 only, for the reason `float32_only` gives (by default: 16-bit values tie often, and PKB's statement
    defines no order for ties, torch.topk's or sort's order being whatever the kernel gives). A 16-bit statement
    would need draws kept away from ties (and, for a top-p cut, from the threshold) by more than the dtype's
    rounding; where that depends on the whole of a sharded input, no rank can draw it, since each makes only its own
    block. `why` says what pkb-env states about ties that PKB does not."""
    inputs = tuple(replace(d, dist=draws[d.name]) if d.name in draws else d for d in spec.inputs)
    missing = set(draws) - {d.name for d in spec.inputs}
    if missing:
        raise ValueError(f"{spec.name}: no input named {sorted(missing)} to draw as PKB does")
    outputs = tuple(replace(o, tolerance=None, ties="") for o in spec.outputs)
    presets = float32_presets(spec.presets)
    return replace(spec, name=f"pkb_env.tasks.{spec.name}.pkb",
                   title=f"PKB {spec.pkb_id} as PKB states it: {spec.title}",
                   inputs=inputs, outputs=outputs, edges=(), clauses=plain_clauses(spec),
                   presets=presets, dtypes=("float32",),
                   tolerance_rule=pkb_rule(("float32",)),
                   departures=(PKB_VARIANT, f"inputs that never tie, as PKB draws them: {why}",
                               f"float32 only: {float32_only}"),
                   reference_path=None, pkb=None)

RELU = ("PKB's MLP is relu(X W1^T + b1) W2^T + b2; pkb-env's uses SiLU (ReLU's kink makes the gradient jump where a "
        "pre-activation is within rounding of 0, so two correct orders of the same sum disagree by a whole gradient "
        "there: tasks/_mlp_step.py)")


def in_dtype(what: str, returns: str, pkb: str, pkb_env: str) -> str:
    """The `differs` of a task whose function is PKB's in float32 and departs in a 16-bit dtype only: PKB's
    reference computes `what` in the inputs' dtype and returns `returns` in it (`pkb`: what that rounds), pkb-env
    computes `pkb_env` in float32."""
    return (f"PKB's reference computes {what} in the inputs' dtype and returns {returns} in it ({pkb}); pkb-env "
            f"states {pkb_env} in float32 whatever the inputs' dtype, which its bfloat16 trial checks (in float32 "
            f"the two are one function)")


def pkb_tolerance(output: Output) -> Output:
    """`output` compared by the variant's tolerance_rule (PKB's): its own rule dropped, its fields' too."""
    return replace(output, tolerance=None, fields=tuple(pkb_tolerance(f) for f in output.fields))


def in_inputs_dtype(spec: TaskSpec, outputs: tuple[str, ...], why: str, *, float32_only: str = "") -> TaskSpec:
    """The variant stating PKB's problem where pkb-env's function is PKB's except in a 16-bit dtype, where PKB
    computes in the inputs' dtype and returns `outputs` in it and pkb-env computes in float32 (a clause of the task
    adds a bfloat16 trial to every step to check it). The task with `outputs` in the task dtype (the golden's
    rounded to it, the reference's too: tasks/<name>/pkb/reference.py), PKB's tolerance on every float output, and
    none of the task's 16-bit clauses; its inputs, edge cases and other clauses stay, since PKB's function is the
    task's on them (PKB's reference handles the corners the edge cases draw as the task states them). `why` says
    what PKB's reference computes in the dtype. `float32_only` (the reason) keeps the variant to float32, where PKB's
    own reference in a 16-bit dtype is past PKB's tolerance."""
    returned = [o.name for o in spec.outputs if not o.inplace]
    unknown = set(outputs) - set(returned)
    if unknown or returns_of(spec.outputs, spec.returns) not in ("tensor", "tuple"):
        raise ValueError(f"{spec.name}: in_inputs_dtype rounds returned outputs of a tensor or tuple: "
                         f"{sorted(unknown) or spec.returns} cannot be")
    positions = {returned.index(name) for name in outputs}
    single = returns_of(spec.outputs, spec.returns) == "tensor"
    golden = spec.golden

    def rounded(inputs, world):
        """The task's golden (float64, rounded once to float32), `outputs` rounded on to the trial's dtype."""
        dtype = DTYPES[world.dtype]
        if single:
            return [value.to(dtype) for value in golden(inputs, world)]
        return [tuple(v.to(dtype) if i in positions else v for i, v in enumerate(rank))
                for rank in golden(inputs, world)]

    dtypes = ("float32",) if float32_only else spec.dtypes
    presets = float32_presets(spec.presets) if float32_only else spec.presets
    names = ", ".join(outputs)
    departures = (PKB_VARIANT_OWN_INPUTS,
                  f"computed in the inputs' dtype with {names} returned in it, as PKB's reference does: {why}",
                  *((f"float32 only: {float32_only}",) if float32_only else ()))
    return replace(spec, name=f"pkb_env.tasks.{spec.name}.pkb",
                   title=f"PKB {spec.pkb_id} as PKB states it: {spec.title}",
                   description=f"{spec.description} As PKB states it: where this says fp32, compute in the inputs' "
                               f"dtype as PKB's reference does, {names} returned in the task dtype; outputs within "
                               f"PKB's tolerance (allclose, atol = rtol = 1e-2) are correct.",
                   outputs=tuple(pkb_tolerance(replace(o, dtype=TASK_DTYPE) if o.name in outputs else o)
                                 for o in spec.outputs),
                   golden=rounded, clauses=tuple(c for c in spec.clauses if not c.dtypes), presets=presets,
                   dtypes=dtypes, tolerance_rule=pkb_rule(dtypes), departures=departures,
                   reference_path=None, pkb=None)
