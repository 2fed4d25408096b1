"""Where the pool's actors go: the Ray resources of one, how many the cluster holds, and one placement group.

An actor at world size W claims what its ranks use, so that Ray never puts two timing-sensitive judges on
the same devices:
- `cuda`: W GPUs of one node (Ray sets CUDA_VISIBLE_DEVICES: each actor's ranks see only its own GPUs);
- `cuda-emulated`: 1 GPU (its W ranks share it; times are not measured there anyway);
- `cpu`: W CPUs, one per rank process (`cpus_per_actor` overrides: fewer oversubscribes a small machine,
  which is fine for verdicts and not for times).
All bundles are reserved at once in one placement group (SPREAD: across nodes where the cluster allows, so
that fewer judges share a host's memory bandwidth, PCIe switches and CPUs), so a cluster that cannot hold
the pool is refused at start with what it has, never left half-started.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from pkb_env.config import JudgeConfig
from pkb_env.pool.cluster import PoolError, ray_module


@dataclass(frozen=True)
class ActorShape:
    """One actor's resources, and the executor every actor of the pool runs."""

    executor: str
    cpus: float
    gpus: float

    @property
    def bundle(self) -> dict[str, float]:
        return {"CPU": self.cpus, **({"GPU": self.gpus} if self.gpus else {})}

    def describe(self) -> str:
        return ", ".join(f"{v:g} {k}" for k, v in self.bundle.items())


def alive_nodes() -> list[dict[str, float]]:
    """The resources of each live node of the connected cluster."""
    return [node["Resources"] for node in ray_module().nodes() if node.get("Alive")]


def cluster_executor(config: JudgeConfig, nodes: list[dict[str, float]]) -> str:
    """`auto` resolved for the cluster as for one machine: cuda where a node has the world size's GPUs,
    cuda-emulated where nodes have fewer, cpu where none has any."""
    if config.executor != "auto":
        return config.executor
    most = max((node.get("GPU", 0) for node in nodes), default=0)
    return "cuda" if most >= config.world_size else "cuda-emulated" if most >= 1 else "cpu"


def actor_shape(config: JudgeConfig, nodes: list[dict[str, float]], cpus_per_actor: float | None = None) -> ActorShape:
    executor = cluster_executor(config, nodes)
    if cpus_per_actor is not None and (isinstance(cpus_per_actor, bool) or not isinstance(cpus_per_actor, (int, float))
                                       or not cpus_per_actor > 0):
        raise ValueError(f"cpus_per_actor must be a positive number of CPUs or None, got {cpus_per_actor!r}")
    gpus = {"cuda": config.world_size, "cuda-emulated": 1, "cpu": 0}[executor]
    cpus = cpus_per_actor if cpus_per_actor is not None else (config.world_size if executor == "cpu" else 1)
    return ActorShape(executor, float(cpus), float(gpus))


def capacity(nodes: list[dict[str, float]], shape: ActorShape) -> int:
    """Actors of `shape` the nodes hold (each actor within one node)."""
    total = 0
    for node in nodes:
        fits = [math.floor(node.get(kind, 0) / need + 1e-9) for kind, need in shape.bundle.items() if need]
        total += min(fits) if fits else 0
    return total


def reserve(count: int, shape: ActorShape, nodes: list[dict[str, float]], timeout_s: float):
    """A ready placement group of `count` bundles of `shape`, or PoolError saying what the cluster has."""
    ray = ray_module()
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([shape.bundle] * count, strategy="SPREAD")
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise PoolError(f"the cluster could not hold {count} judge actor(s) of {shape.describe()} within {timeout_s:g} s: "
                        f"it has {describe_nodes(nodes)}; ask for fewer actors, lower cpus_per_actor, or add nodes "
                        f"(docs/scale_out.md, 'Sizing')") from None
    return group


def describe_nodes(nodes: list[dict[str, float]]) -> str:
    parts = [f"{n.get('CPU', 0):g} CPU" + (f" + {n.get('GPU', 0):g} GPU" if n.get("GPU") else "") for n in nodes]
    return f"{len(nodes)} node(s): " + "; ".join(parts) if nodes else "no live node"
