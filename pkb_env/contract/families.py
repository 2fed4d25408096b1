"""Task families: PKB's categories, each with the rules a model must know for tasks of that kind.

The prompt's rules come from the family (a GEMM + reduce-scatter task is not a pure data-movement task):
what may change (order of operations, precision of accumulation), what is the lever (overlap, fusion,
fewer bytes), and what is compared. One entry per family; `TaskSpec` refuses any other name.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    title: str
    rules: str


_COMPUTE = ("Outputs are compared at the tolerance stated under Outputs, so you may reorder sums, accumulate in higher "
            "precision and fuse steps; you may not compute in a lower precision than the inputs' dtype or "
            "skip work the result depends on.")

FAMILIES: dict[str, Family] = {
    "collective": Family(
        "Collective primitives",
        "A pure data-movement task: elements move without arithmetic (or are summed, for reductions). "
        "The bound is the interconnect: bytes per rank over link bandwidth, plus one latency per round. "
        "Faster code moves the same bytes with fewer launches, fewer copies and better use of the links."),
    "tensor": Family(
        "Tensor parallel",
        "Computation and communication together: a GEMM or a normalisation whose operands or results are "
        "split over ranks. The lever is overlap (chunk the collective and compute on arrived chunks while "
        "the rest is in flight) and fusion (fewer passes over HBM). " + _COMPUTE),
    "sequence": Family(
        "Sequence parallel (Ulysses)",
        "Layout changes between sequence-sharded and head-sharded tensors (all-to-all), around attention. "
        "Exact reshuffles must deliver every element bit-exact; fused variants are compared at the "
        "tolerance. The lever is moving each element once, in large contiguous transfers."),
    "context": Family(
        "Context parallel",
        "Attention (or a recurrence) over a sequence split across ranks: ranks exchange keys and values "
        "(rings, all-gathers) and merge partial results. The lever is overlapping the exchange with the "
        "attention compute and skipping blocks a causal mask hides. " + _COMPUTE),
    "pipeline": Family(
        "Pipeline parallel",
        "Stages on different ranks hand activations to each other point to point. The lever is keeping "
        "every stage busy (micro-batching, overlapping sends with compute). " + _COMPUTE),
    "data": Family(
        "Data parallel",
        "Gradient and statistic reductions across replicas, often of small tensors where latency rules. "
        "The lever is fewer, fused collectives. " + _COMPUTE),
    "expert": Family(
        "Expert parallel",
        "Tokens routed to experts on other ranks (all-to-all dispatch and combine), with data-dependent "
        "sizes. The lever is fewer host synchronisations and fused routing. " + _COMPUTE),
    "fsdp": Family(
        "FSDP / ZeRO",
        "Parameters, gradients and optimiser states sharded over ranks: all-gathers before use and "
        "reduce-scatters after. The lever is overlap and fewer bytes. " + _COMPUTE),
    "vocab": Family(
        "Vocabulary parallel",
        "Losses and log-probabilities over a vocabulary split across ranks: reductions of maxima and sums "
        "(and top-k) across ranks. The lever is fusing the local pass and shrinking what crosses ranks. "
        + _COMPUTE),
    "graph": Family(
        "Graph parallel",
        "Feature and index exchanges between ranks that own parts of a graph, with irregular sizes. "
        "Integer outputs are compared exactly. " + _COMPUTE),
    "spatial": Family(
        "Spatial / geometric",
        "Grids split over ranks (FFTs, convolutions, halos). The lever is exchanging only what neighbours "
        "need and overlapping it with compute. " + _COMPUTE),
    "other": Family("Other", _COMPUTE),
}
