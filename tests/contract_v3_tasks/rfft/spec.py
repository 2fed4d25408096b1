"""contract_v3_tasks.rfft (an example spec outside the suite): a complex output of the task dtype, compared on both
parts at a tolerance that the FFT's size sets (tests/contract/test_output_kinds.py; docs/task_contract.md,
"Complex outputs")."""

import torch

from pkb_env.contract import Comm, Cost, Fft, Output, Preset, Replicated, Sharded, TaskSpec, Tensor


def golden(inputs, world):
    """The transform of the whole x in float64, rounded once to the complex type of the task dtype."""
    x = world.assemble(inputs, "x").double()
    return world.distribute(torch.fft.rfft(x, dim=1).to(torch.complex64), "spectrum")


def cost(c):
    return Cost(comm=(Comm("all_gather", c["W"] * c.nbytes("x")),), memory_bytes=c.io_bytes())


SPEC = TaskSpec(
    name="contract_v3_tasks.rfft",
    title="Real FFT of row-sharded data (contract test)",
    description="Every rank holds rows of x (M, N); every rank returns torch.fft.rfft of the whole x along dim 1.",
    family="tensor",
    pkb_id=None,
    origin="tests: contract v3 (complex outputs, the Fft rule)",
    inputs=(Tensor("x", ("M", "N"), layout=Sharded(0), doc="this rank's rows"),),
    outputs=(Output("spectrum", ("M", "N // 2 + 1"), dtype="complex", layout=Replicated(),
                    doc="the real FFT of every row of x"),),
    golden=golden,
    cost=cost,
    tolerance_rule=Fft("N", "sqrt(N)", what="rfft along rows of unit-normal values"),
    presets={"tiny": Preset({"M": 8, "N": 64}, "float32", "CPU ranks, milliseconds"),
             "bench": Preset({"M": 1024, "N": 4096}, "float32", "16 MiB of fp32 rows")},
    dtypes=("float32",),
)
