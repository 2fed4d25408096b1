"""A fleet: the actors of one pool, their placement group, and the cluster connection they hold: sizing, Ray's
restart settings, the variables every actor gets and the clean-up at close (pool.py's JudgePool starts one).
"""
from __future__ import annotations

import math
import os
import socket
from typing import Any

from pkb_env.config import JudgeConfig
from pkb_env.pool import placement
from pkb_env.pool.cluster import PoolError, connect, ray_module
from pkb_env.sandbox.variables import MULTICAST_OFF

# Variables every actor's process gets, whatever its node's environment: NVLink multicast stays off; and Ray does
# not SIGKILL the actor's direct children when the actor is killed (its default, RAY_kill_child_processes_on_
# worker_exit): the judge's zygote is one, and killed outright it could not do what it does when its parent dies
# (end every cell and rank, remove the executor's $TMPDIR/pkb-env-* directory: pkb_env/sandbox/zygote.py). Each
# `ray.kill` of an actor (a step past its deadline) left that directory behind. The zygote and everything under
# it still die with the actor (parent-death signals).
ACTOR_ENV = {**MULTICAST_OFF, "RAY_kill_child_processes_on_worker_exit": "false"}


def step_timeout(config: JudgeConfig, given: float | None) -> float:
    """How long one try of a step may take before its actor is killed: `given`, or the most an honest step
    takes (the config's step budget, plus its start and timing timeouts for the reference's part)."""
    if given is None:
        return config.step_budget_s + config.start_timeout_s + config.timing_timeout_s
    if isinstance(given, bool) or not isinstance(given, (int, float)) or given <= 0:
        raise ValueError(f"step_timeout_s must be a positive number of seconds or None, got {given!r}")
    return float(given)


class Fleet:
    """`count` actors of class `actor_class`, each made with `args`, one per bundle of a placement group.

    `config` decides their resources (placement.py); its `auto` executor is resolved for the cluster once,
    and `self.config` is what every actor must use. Ray restarts a dead actor up to `max_restarts` times
    (`max_task_retries=0`: the pool decides what to retry)."""

    def __init__(self, config: JudgeConfig, address: str, count: int | None, cpus_per_actor: float | None,
                 max_restarts: int, start_timeout_s: float):
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
            raise ValueError(f"the number of actors must be a positive integer or None (as many as the cluster "
                             f"holds), got {count!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < 0:
            raise ValueError(f"max_restarts must be an integer >= 0, got {max_restarts!r}")
        if isinstance(start_timeout_s, bool) or not isinstance(start_timeout_s, (int, float)) or start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be a positive number of seconds, got {start_timeout_s!r}")
        self.max_restarts, self.start_timeout_s = max_restarts, start_timeout_s
        self.group = None
        self.handles: list[Any] = []
        self.started: list[dict[str, Any]] = []
        self.connection = None
        # A cluster started here exists for this fleet alone: at least one actor fits, as one local judge's W
        # ranks run on however many cores the machine has.
        self.connection = connect(address, local_cpus=max(os.cpu_count() or 1,
                                                           math.ceil(cpus_per_actor or config.world_size)))
        try:
            nodes = placement.alive_nodes()
            self.shape = placement.actor_shape(config, nodes, cpus_per_actor)
            self.config = config.replace(executor=self.shape.executor)
            room = placement.capacity(nodes, self.shape)
            self.count = room if count is None else count
            if self.count < 1 or self.count > room:
                raise PoolError(f"{'no' if room < 1 else f'only {room}'} actor(s) of {self.shape.describe()} fit in the "
                                f"cluster ({placement.describe_nodes(nodes)}), {self.count} asked for; ask for at most "
                                f"{max(room, 1) if room else 0}, lower cpus_per_actor, or add nodes "
                                f"(docs/scale_out.md, 'Sizing')")
            self.group = placement.reserve(self.count, self.shape, nodes, start_timeout_s)
        except BaseException:
            self.close()
            raise

    def start(self, actor_class: type, args_for: "callable") -> None:
        """Make every actor (`args_for(index)` its constructor's arguments) and wait until each has started."""
        ray = ray_module()
        self._remote, self._args_for = ray.remote(actor_class), args_for
        self.handles = [self.make(i) for i in range(self.count)]
        try:
            self.started = ray.get([h.start.remote() for h in self.handles], timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise PoolError(f"the {self.count} actor(s) did not start within {self.start_timeout_s:g} s "
                            f"(start_timeout_s)") from None
        except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError) as exc:
            cause = getattr(exc, "cause", None) or exc
            lines = str(cause).strip().splitlines()
            raise PoolError(f"an actor could not start its judge: {type(cause).__name__}: "
                            f"{lines[-1] if lines else ''}") from None

    def make(self, index: int):
        """A new actor in bundle `index` (at start, and to replace one that Ray could not bring back)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        strategy = PlacementGroupSchedulingStrategy(placement_group=self.group, placement_group_bundle_index=index)
        return self._remote.options(num_cpus=self.shape.cpus, num_gpus=self.shape.gpus, max_restarts=self.max_restarts,
                                    max_task_retries=0, runtime_env={"env_vars": dict(ACTOR_ENV)},
                                    scheduling_strategy=strategy).remote(*self._args_for(index))

    def health(self, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Each actor's own answer (pid, host, node, busy, steps, processes), or alive False with why."""
        ray = ray_module()
        refs = [handle.health.remote() for handle in self.handles]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
        answers = []
        for index, ref in enumerate(refs):
            if ref not in ready:
                answers.append({"actor": index, "alive": False, "error": f"no answer within {timeout_s:g} s"})
                continue
            try:
                answers.append({"actor": index, "alive": True, **ray.get(ref)})
            except Exception as exc:
                answers.append({"actor": index, "alive": False, "error": str(exc).strip().splitlines()[0][:300]})
        return answers

    def process_ids(self) -> dict[str, list[int]]:
        """The live processes of every actor (its own and its judge's), by host: for leak checks."""
        hosts: dict[str, list[int]] = {}
        for answer in self.health():
            if answer.get("alive"):
                hosts.setdefault(answer["host"], []).extend(answer["processes"])
        return hosts

    def close(self, graceful_s: float = 30.0) -> None:
        """Let each actor close its judge (up to `graceful_s`), kill them, free the placement group, stop a
        cluster started here, and wait for this host's processes of the fleet to be gone."""
        ray = ray_module()
        here = socket.gethostname()
        pids = []
        if self.handles:
            try:
                pids = [pid for answer in self.health(timeout_s=2.0) if answer.get("alive") and answer["host"] == here
                        for pid in answer["processes"]]
            except Exception:
                pass
            refs = [handle.shutdown.remote() for handle in self.handles]
            ray.wait(refs, num_returns=len(refs), timeout=graceful_s)
            for handle in self.handles:
                try:
                    ray.kill(handle, no_restart=True)
                except Exception:
                    pass
            self.handles = []
        if self.group is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.group)
            except Exception:
                pass
            self.group = None
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        _wait_gone(pids, graceful_s)


def _wait_gone(pids: list[int], timeout_s: float) -> None:
    """Wait for this host's processes of the fleet to exit (Ray kills workers asynchronously); end stragglers."""
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
