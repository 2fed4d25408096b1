"""The adversarial regression suite: every exploit in exploits.py meets its expected outcome, gains no
speed, leaves nothing behind (processes, files) and leaves the judge able to judge the next (reference)
step correctly; every candidate in legit.py is judged correct without an EXPLOIT flag.

"Gains no speed" is judged against the honest distribution of the same work under the production
protocol: an exploit whose time is believed (correct, not suspect) must not be faster than every honest
run of the task's reference (three up front, then the one right after each exploit, under the same load)
by more than their own spread (at least 1.5x on loaded CPU ranks; conftest.Baseline).

Exploits the judge does not stop today carry `hole` and run as xfail(strict=True): the reason names the
hole, and a fix turns the test into an XPASS that fails until the mark is removed.

With PKB_ADVERSARIAL_TABLE set, the module writes a Markdown table of what happened to that path.
"""
from __future__ import annotations

import os
import time

import psutil
import pytest


from .conftest import ADVERSARIAL, WORLD_SIZE, CANARY, uncontained
from .exploits import BY_NAME as EXPLOITS_BY_NAME, EXPLOITS, FLAGGED, RUNTIME_ERROR, WRONG
from .legit import BY_NAME as LEGIT_BY_NAME, LEGIT

MAX_FEEDBACK_CHARS = 12_000
ROOT_GROWTH_BYTES = 4 << 20

RESULTS: dict[str, dict] = {"exploits": {}, "legit": {}}


def _exploit_params():
    """Every exploit, as a strict xfail where its hole is open here. A racy hole (the judge sometimes wins)
    cannot be a strict xfail and a non-strict one can never fail, so it is not run where it is open: the
    hole is listed in docs/known_holes.md instead, and the test runs where it is closed."""
    exposed = uncontained()
    for e in EXPLOITS:
        open_here = e.hole and (e.hole_if == "always" or exposed)
        if open_here and e.racy:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=f"HOLE: {e.hole}")] if open_here else []
        yield pytest.param(e.name, marks=marks, id=e.name)


# -- legitimate candidates ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", [c.name for c in LEGIT])
def test_legit_candidate_is_correct(adv_env, name):
    cand = LEGIT_BY_NAME[name]
    adv_env.reset(options={"task": cand.task})
    _, reward, _, _, info = adv_env.step(cand.code)
    record = info["record"]
    RESULTS["legit"][name] = {"task": cand.task, "why": cand.why, "verdict": info["verdict"], "reward": reward,
                              "speedup": info["speedup"], "flags": [f.code for f in record.flags]}
    assert info["verdict"] == "correct", info["feedback"]
    assert not record.exploit_flags, [f.message for f in record.exploit_flags]


# -- exploits ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(_exploit_params()))
def test_exploit_is_defeated(adv_env, baseline, name):
    e = EXPLOITS_BY_NAME[name]
    judge = adv_env.unwrapped.client   # its JudgeService's public methods, on the judge's thread (client.run)
    directory = judge.run(lambda service: service.directory())
    baseline.prime(e.task)
    obs, _ = adv_env.reset(options={"task": e.task})
    _remove(e.files)
    if e.fresh_reference_time:  # as on the first step of a task in a real run
        judge.run(lambda service: service.forget_reference_timing(e.task))
    processes_before = len(judge.run(lambda service: service.process_ids()))
    root_before = judge.run(lambda service: service.directory_bytes())

    problems: list[str] = []
    verdict, reward, speedup, feedback, believed = "judge_error", None, None, "", None
    try:
        _, reward, _, _, info = adv_env.step(e.code)
        verdict, speedup, feedback = info["verdict"], info["speedup"], info["feedback"]
        if speedup is not None:  # correct, timed and not suspect (record.speedup): its time counts
            believed = info["record"].timing.time_s
    except Exception as exc:  # the judge must turn anything a candidate does into a verdict
        problems.append(f"env.step raised {type(exc).__name__}: {str(exc)[:300]}")
    RESULTS["exploits"][name] = {"family": e.family, "seen": e.seen, "expected": e.expected, "task": e.task,
                                 "verdict": verdict, "reward": reward, "speedup": speedup, "hole": e.hole}

    # The outcome.
    if reward is not None:
        if e.expected in (FLAGGED, WRONG, RUNTIME_ERROR) and verdict != e.expected:
            problems.append(f"expected verdict {e.expected!r}, got {verdict!r}: {feedback[:600]}")
        if e.leak and e.leak in feedback:
            at = feedback.index(e.leak)
            problems.append(f"the exploit got hold of what it must not see: {feedback[at:at + 160]!r}...")
        if CANARY[1] in feedback:
            problems.append("the judge's secret canary reached the feedback")
        if len(feedback) > MAX_FEEDBACK_CHARS:
            problems.append(f"feedback of {len(feedback)} chars (cap {MAX_FEEDBACK_CHARS})")

    # Nothing of the candidate survives the step.
    if e.settle_s:
        time.sleep(e.settle_s)  # an escaping process must have finished escaping by now
    strays = list({p.pid: p for p in _marker_processes(e.marker) + _strays_under(judge, directory)}.values())
    strays = psutil.wait_procs(strays, timeout=1.0)[1] if strays else []  # dying on their own is fine
    if strays:
        problems.append(f"{len(strays)} process(es) of the candidate outlived the step: "
                        f"{[' '.join(p.info['cmdline'] or [])[:60] for p in strays][:4]}")
        _kill(strays, directory)  # this exploit's: cleaned up so later tests run on a quiet machine
    left = [f for f in e.files if os.path.exists(f)]
    if left:
        problems.append(f"files outside the rank set directory survived the step: {left}")
        _remove(left)
    root_after = judge.run(lambda service: service.directory_bytes())
    if root_after > root_before + ROOT_GROWTH_BYTES:
        problems.append(f"the executor's directory grew by {(root_after - root_before) >> 20} MiB")
    processes_after = len(judge.run(lambda service: service.process_ids()))
    if processes_after > processes_before + WORLD_SIZE:
        problems.append(f"the executor owns {processes_after} processes, {processes_before} before the step")
    if e.fresh_reference_time:  # the reference ranks may have been tampered with: start clean
        judge.run(lambda service: service.restart_reference())

    # The judge is intact: the reference itself is judged correct on the next step (and its time joins the
    # honest distribution, measured under the load the exploit ran under).
    try:
        obs, _ = adv_env.reset(options={"task": e.task})  # a new episode: the exploit's step may have ended its own
        _, ref_reward, _, _, info = adv_env.step(obs["reference"])
        if info["correct"]:
            baseline.add(e.task, info["record"])
        else:
            problems.append(f"the next (reference) step was judged {info['verdict']}: {info['feedback'][:400]}")
    except Exception as exc:
        problems.append(f"the next (reference) step raised {type(exc).__name__}: {str(exc)[:300]}")

    if believed is not None:
        gain = baseline.beaten_by(e.task, believed)
        if gain:
            problems.append(f"speed gained: {gain}")
    assert not problems, "\n".join(problems)


# -- helpers ---------------------------------------------------------------------------------------------

def _marker_processes(marker: str | None) -> list[psutil.Process]:
    if not marker:
        return []
    me = os.getpid()
    return [p for p in psutil.process_iter(["cmdline"])
            if p.pid != me and marker in " ".join(p.info["cmdline"] or [])]


def _strays_under(judge, directory: str) -> list[psutil.Process]:
    """Live processes working in the judge's directory that the judge does not own."""
    owned = set(judge.run(lambda service: service.process_ids()))
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if p.pid in owned:
            continue
        try:
            if p.cwd().startswith(directory) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def _kill(processes: list[psutil.Process], root: str) -> None:
    """Kill, by pid, the processes among `processes` that run in the judge's directory (ours only)."""
    ours = []
    for p in processes:
        try:
            if p.cwd().startswith(root):
                p.kill()
                ours.append(p)
        except psutil.Error:
            pass
    psutil.wait_procs(ours, timeout=2)


def _remove(paths) -> None:
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


# -- the table -------------------------------------------------------------------------------------------

GENERATED_BELOW = "<!-- Generated below this line by tests/adversarial with PKB_ADVERSARIAL_TABLE set; edit above it. -->"


@pytest.fixture(scope="module", autouse=True)
def _write_table():
    yield
    path = os.environ.get("PKB_ADVERSARIAL_TABLE")
    if path:
        try:  # keep what was written by hand above the marker
            with open(path) as f:
                text = f.read()
            head = text.partition(GENERATED_BELOW)[0] if GENERATED_BELOW in text else ""
        except FileNotFoundError:
            head = ""
        with open(path, "w") as f:
            f.write(head + GENERATED_BELOW + "\n\n" + markdown_table())


def _num(x, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def markdown_table() -> str:
    """What happened to every candidate run in this module, as Markdown (for docs/)."""
    exposed = uncontained()
    where = ("rank sets without namespaces, ranks with the judge's uid" if exposed
             else "each rank set in its own PID, mount and network namespaces")
    lines = [f"Exploits (CPU executor, world size {WORLD_SIZE}, {ADVERSARIAL.trials} trials; {where}). "
             f"Hole = the judge does not stop it today (test is xfail).", "",
             "| Exploit | Family | Seen | Task | Expected | Verdict | Reward | Speedup | Hole |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in EXPLOITS:
        r = RESULTS["exploits"].get(e.name)
        if r is None:
            continue
        hole = "yes" if e.hole and (e.hole_if == "always" or exposed) else ""
        lines.append(f"| `{e.name}` | {e.family} | {e.seen} | {e.task} | {e.expected} | {r['verdict']} | "
                     f"{_num(r['reward'], '+.3f')} | {_num(r['speedup'], '.2f')} | {hole} |")
    lines += ["", "Legitimate candidates (must be correct, no EXPLOIT flag):", "",
              "| Candidate | Task | What it does | Verdict | Reward | INFO flags |", "|---|---|---|---|---|---|"]
    for c in LEGIT:
        r = RESULTS["legit"].get(c.name)
        if r is None:
            continue
        flags = ", ".join(sorted(set(r["flags"]))) or "—"
        lines.append(f"| `{c.name}` | {c.task} | {c.why} | {r['verdict']} | {_num(r['reward'], '+.3f')} | {flags} |")
    return "\n".join(lines) + "\n"
