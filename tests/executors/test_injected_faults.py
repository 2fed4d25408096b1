"""Faults of the judge's own processes, injected into the executor (docs/architecture.md, "Processes"): a start
that fails, spares killed in any phase of their start, ranks that never start, a Ctrl-C that arrives while
closing. No candidate can cause them on purpose and no public method makes them happen, so each test reaches
the executor (`JudgeService.executor`, or `client.run` for the judge of a client) and says which part of it it
replaces; keep such tests here. Candidates' own faults: test_faults.py."""
import os
import signal

import psutil
import pytest

from conftest import FAST, cpu_judge, make_env
from pkb_env.client import LocalClient
from pkb_env.episode import Episode
from pkb_env.task import load_task

REFERENCE = load_task("all_reduce").reference_source


def test_a_next_generation_that_cannot_start_does_not_cost_this_step(monkeypatch):
    """Starting the next candidate rank set (at release) can fail (a full disk, a dead zygote): the step
    that released keeps its verdict, and the next step starts its own rank set or says why it cannot.

    Internals: the start of a rank set is made to fail (`executor._start` replaced); nothing else can fail it."""
    with cpu_judge(2) as judge:
        judge.open("all_reduce")
        executor = judge.executor
        real = executor._start
        failures = []

        def refuse(role, hold=False):
            failures.append(role)
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(executor, "_start", refuse)
        record = judge.judge("all_reduce", REFERENCE)
        assert record.correct, record.feedback
        assert failures and len(executor.spares) < executor.spares.depth
        monkeypatch.setattr(executor, "_start", real)
        record = judge.judge("all_reduce", REFERENCE)
        assert record.correct, record.feedback


@pytest.mark.parametrize("depth", [1, 4])
def test_spares_killed_in_any_phase_of_their_start_are_replaced(depth):
    """A pre-started rank set can die before it is used, in any phase of its start (whoever ran before
    killed it, or the machine did): the next step takes another or starts its own, and the spares are
    made up again, whatever phase each was in.

    Internals: the spares are the executor's (`executor.spares`: which processes each holds, and where its start
    has got to), and they are killed mid-start, between steps."""
    with cpu_judge(2, FAST.replace(spares=depth)) as judge:
        executor = judge.executor
        if depth > 1 and executor.namespaces_missing:
            pytest.skip(f"held spares need cells with namespaces ({executor.namespaces_missing})")
        judge.open("all_reduce")
        for _ in range(2):
            record = judge.judge("all_reduce", REFERENCE)
            assert record.correct, record.feedback
            assert len(executor.spares) == depth
            for spare in executor.spares:  # one rank of every spare, wherever its start has got to
                os.kill(spare.pids[-1], 9)
        record = judge.judge("all_reduce", REFERENCE)
        assert record.correct, record.feedback
        assert len(executor.spares) == depth and all(s.alive() for s in executor.spares)


def test_ranks_that_cannot_start_are_the_judges_failure_not_the_candidates(monkeypatch):
    """No candidate code has run in a rank set that fails to start (a host out of processes, a spare
    killed before it was used): after the spares and a second fresh start, the step is the judge's failure (a
    judge_error turn, the JudgeError's message in it, no reward) instead of charging the candidate a build error
    or an exploit flag, and the next step is judged.

    Through the client and the episode (the client turns the JudgeError into the judge_error record, the episode
    gives it no reward). Internals: the spares are killed and every fresh start is made to die (`executor._start`
    replaced), which nothing outside the executor can do at the moment it starts. Done on the service's own
    thread (client.run), between its operations, and with no spare started again (depth 0): a spare's start
    racing the patch counted as a third fresh start in one whole-suite run. Only candidate rank sets are doomed."""
    with LocalClient(FAST.replace(executor="cpu", world_size=2)) as client:
        episode = Episode(client, "all_reduce", max_turns=1000, target_speedup=float("inf"))
        episode.observation()   # the judge made ready for the task, as an env's reset does
        starts = []

        def sabotage(service):
            executor = service.executor
            real = executor._start

            def doomed(role, hold=False):
                gen = real(role, hold)
                if role == "candidate":
                    starts.append(gen)
                    for pid in gen.pids:
                        os.kill(pid, 9)
                return gen

            monkeypatch.setattr(executor.spares, "depth", 0)
            for spare in executor.spares:
                os.kill(spare.pids[0], 9)
            monkeypatch.setattr(executor, "_start", doomed)
            return executor, real

        executor, real = client.run(sabotage)
        turn = episode.step(REFERENCE)
        reward, info = turn.reward, turn.info
        assert info["verdict"] == "judge_error" and "failed to start" in info["error"] and reward == 0.0, info
        assert len(starts) == 2 and all(gen.closed for gen in starts)  # config.fresh_starts, each closed
        monkeypatch.setattr(executor, "_start", real)
        info = episode.step(REFERENCE).info
        assert info["correct"], info["feedback"]



def test_close_holds_ctrl_c_until_the_processes_are_gone():
    """A Ctrl-C during close() is raised after it, when nothing is left running, not half-way through.

    The Gymnasium env's close, as a user calls it. Internals: the executor's close is replaced by one that raises
    SIGINT first, so that it arrives while closing whatever the machine's speed."""
    env = make_env(world_size=2)
    env.reset(seed=0)
    client = env.unwrapped.client
    executor = client.run(lambda service: service.executor)
    directory = client.run(lambda service: service.directory())
    close = executor.close
    pids = client.run(lambda service: service.process_ids())
    assert pids

    def close_interrupted():
        signal.raise_signal(signal.SIGINT)  # arrives while closing
        close()

    executor.close = close_interrupted
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a test worker may not)
    try:
        with pytest.raises(KeyboardInterrupt):
            env.close()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler   # close() put it back
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not os.path.exists(directory)
