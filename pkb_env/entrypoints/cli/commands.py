"""The commands of `pkb-env`, each a thin client of one judge client (pkb_env/client.py), or for `tasks` and
`topology` of the catalogue and the machine."""
from __future__ import annotations

import json
import sys
import time

from tqdm import tqdm

from pkb_env.config import JudgeConfig
from pkb_env.entrypoints.cli.exits import EXIT_CODES, EXIT_USAGE
from pkb_env.errors import JudgeError
from pkb_env.settings import judge_config
from pkb_env.tables import table


def cmd_tasks(args) -> int:
    from pkb_env.catalog import listing

    print(listing())
    return 0


def cmd_show(args) -> int:
    """The prompt the env's first observation carries here (with the cached calibration, if any: `show`
    never measures; `pkb-env calibrate` does). Where none is cached the env measures one at its first open
    and its prompt gains the measured figures, so a note on stderr says that this prompt lacks them.
    With --topology, the prompt of a machine with that board instead (`show_imagined`)."""
    if args.topology is not None:
        return show_imagined(args)
    from pkb_env.client import LocalClient

    with LocalClient(judge_config(args).replace(calibration="cached")) as client:
        print(client.observation(args.task)["prompt"])
        if client.run(lambda service: service.measurable and service.calibration() is None):
            print(f"note: no calibration of this machine at world size {client.world_size} is cached, so this "
                  f"prompt has the datasheet's peaks only; the env measures one when it first opens a task and "
                  f"its prompt then adds 'Measured here: ...'. `pkb-env calibrate --world-size "
                  f"{client.world_size}` measures it now.", file=sys.stderr)
    return 0


def show_imagined(args) -> int:
    """The first observation's prompt on a machine with the board `--topology` names, built as a JudgeService there
    builds it (its executor planned as make_executor plans it there, the same TaskSession code), starting and
    detecting nothing: the GPU prompt can be read without a GPU. That machine would measure a calibration at its
    first open, adding 'Measured here: ...' to the prompt; a note on stderr says so."""
    from pkb_env import spaces
    from pkb_env.executors import imagined_executor
    from pkb_env.prompt import Hardware
    from pkb_env.service import TaskSession
    from pkb_env.task import load_task
    from pkb_env.topology import load_topology

    config = judge_config(args)
    board = load_topology(args.topology)
    plan = imagined_executor(config, board.name, board.devices_per_node)
    hardware = Hardware(plan.info.name, config.world_size, load_topology(plan.info.topology), plan.placement.gpu,
                        config.protocol_for(plan.placement.clock).statistic)
    session = TaskSession.preview(hardware, load_task(args.task), config.preset, config.dtype)
    print(spaces.observation(session)["prompt"])
    if plan.info.performance_available and config.world_size >= 2:
        print(f"note: the prompt of {hardware.executor} ranks on {board.name} at world size {config.world_size}, with "
              f"the board's datasheet peaks; such a machine measures its own at the env's first open (`pkb-env "
              f"calibrate`), and its prompt then adds 'Measured here: ...'", file=sys.stderr)
    return 0


class RankProgress:
    """One status line on stderr while ranks start and work ("reference start-up: 40/64 ranks"); off when
    stderr is not a terminal unless asked. Installed as the service's progress hook."""

    def __init__(self, world_size: int, enabled: bool | None = None):
        enabled = sys.stderr.isatty() if enabled is None else enabled
        self.bar = tqdm(total=world_size, file=sys.stderr, leave=False, disable=not enabled,
                        bar_format="{desc}: {n}/{total} ranks [{elapsed}]")

    def __call__(self, role: str, phase: str, done: int, total: int) -> None:
        if self.bar.disable:
            return
        self.bar.set_description_str(f"{role} {phase}", refresh=False)
        self.bar.total, self.bar.n = total, done
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def cmd_eval(args) -> int:
    from pkb_env.agents import FileAgent
    from pkb_env.client import LocalClient
    from pkb_env.record import Verdict
    from pkb_env.rewards import load_reward
    from pkb_env.task import load_task

    load_task(args.task)
    agent = FileAgent(args.path)
    reward_fn = load_reward(args.reward)
    progress = RankProgress(args.world_size)
    verdicts, summary = [], []
    try:
        with LocalClient(judge_config(args), progress=progress) as client:
            observation = client.observation(args.task)   # nothing starts yet: a file parse and screen decide
            # a bar for a folder, on a terminal only (tqdm's disable=None): none in logs
            for path in tqdm(agent.files, desc=f"judging on {args.task}", unit="file",
                             disable=True if len(agent.files) < 2 else None):
                action = agent.act(observation)            # each file is judged as turn 0 of its own episode
                record = client.submit(args.task, action).result()
                if record.verdict is Verdict.JUDGE_ERROR:  # the judge failed, not the file: exit 7, say why
                    raise JudgeError(f"{path}: {record.error}")
                reward = reward_fn(record).value
                verdicts.append(record.verdict)
                if args.json:
                    print(json.dumps({"file": str(path), "reward": reward, **record.to_dict()}))
                    continue
                print(f"\n== {path} ==")
                print(stage_table(record))
                print(f"\nverdict {record.verdict.value}   reward {reward:+.3f}\n\n{record.feedback}")
                summary.append([path.name, record.verdict.value, record.speedup, record.roofline_fraction, reward])
    finally:
        progress.close()
    if len(summary) > 1:
        print("\n" + table(["file", "verdict", "speedup", "roofline", "reward"], summary))
    worst = min(verdicts, key=lambda verdict: verdict.rank)  # Verdict's order: flagged worst, correct best
    return EXIT_CODES[worst.value]


def stage_table(record) -> str:
    """Per-stage rows: what each stage found and how long it took (the candidate's stages; the reference's
    part of the step is its own row)."""
    from pkb_env.judge.feedback import duration

    failed = record.failure.stage.value if record.failure else None
    found = {
        "parse": record.parse and (record.parse.error or ("fenced block" if record.parse.from_fence else "bare code")),
        "screen": record.screen and (record.screen.error or _screened(record.screen.flags)),
        "build": "imported on every rank" if record.build else None,
        "run": record.run and f"{record.run.trials} trials on {record.world_size} ranks",
        "verify": record.verify and "; ".join(_checked(what, check) for what, check in (
            ("trial outputs", record.verify), ("timed calls' outputs", record.timed_check)) if check),
        "time": record.timing and (f"time per call {duration(record.timing.time_s)}, speedup "
                                   f"{record.timing.speedup:.2f}x" if record.timing.speedup else "measured"),
        "roofline": record.roofline and f"{record.roofline.fraction:.1%} of bound",
    }
    if failed:
        found[failed] = record.failure.error
    rows = [[stage, round(record.stage_seconds[stage] * 1e3, 2), _short(found.get(stage))]
            for stage in found if stage in record.stage_seconds]
    work = record.reference
    if work is not None:
        cached = ", its time cached" if work.timing_cached else ""
        rows.append(["reference", round((work.trials_s + work.timing_s + work.replay_s) * 1e3, 2),
                     f"trials, timing and replay on the reference's ranks{cached}"])
    return table(["stage", "ms", "result"], rows)


def _screened(flags) -> str:
    """What the screen found, in words that keep notes (never penalised) apart from exploits."""
    from pkb_env.record import Severity

    exploits = sum(f.severity is Severity.EXPLOIT for f in flags)
    notes = len(flags) - exploits
    if exploits:
        return f"{exploits} exploit flag(s)" + (f" and {notes} note(s)" if notes else "")
    return f"{notes} note(s), none penalised" if notes else "nothing to note"


def _checked(what: str, check) -> str:
    """A verify result in words: how many rank outputs were checked and how many of them were wrong."""
    if check.correct:
        return f"all {check.checked} {what} match"
    wrong = len({(m.trial, m.rank) for m in check.mismatches})
    return f"{wrong} of {check.checked} {what} wrong ({len(check.mismatches)} problem(s))"


def _short(text, limit: int = 90) -> str:
    text = str(text or "").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cmd_evaluate(args) -> int:
    from pkb_env.agents.files import PkbFileAgent
    from pkb_env.agents.openai_agent import OpenAIAgentError
    from pkb_env.agents.specs import agent_from_spec
    from pkb_env.entrypoints.cli.data import open_recorder
    from pkb_env.evaluation import evaluate, resolve_tasks

    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise ValueError(f"--k {args.k!r}: pass comma-separated positive integers, e.g. --k 1,5")
    agent = agent_from_spec(args.agent, base_url=args.base_url, temperature=args.temperature,
                            max_tokens=args.max_tokens, concurrency=args.concurrency)
    tasks = resolve_tasks(args.tasks, agent)
    config = judge_config(args)
    if isinstance(agent, PkbFileAgent):   # PKB-format files: judged through each task's PKB mapping
        config = config.replace(pkb=True)
        for path, why in agent.skipped:
            print(f"pkb-env: skipped {path.name}: {why}", file=sys.stderr)
    recorder = open_recorder(args.dataset, agent)   # None without --dataset
    try:
        if args.ray is None:
            if args.actors is not None or args.cpus_per_actor is not None:
                raise ValueError("--actors and --cpus-per-actor size a Ray pool: add --ray local (or --ray auto)")
            from pkb_env.client import LocalClient

            client = LocalClient(config)
        else:
            from pkb_env.pool import JudgePool

            client = JudgePool(config, address=args.ray, actors=args.actors, cpus_per_actor=args.cpus_per_actor)
            print(f"pkb-env: judging on {client.size} Ray actor(s) of {client.shape.describe()}", file=sys.stderr)
        with client:
            report = evaluate(agent, tasks=tasks, client=client, samples=args.samples, ks=ks, reward=args.reward,
                              recorder=recorder)
    except OpenAIAgentError as exc:   # the server failed or answered nonsense: nothing to report
        print(f"pkb-env: error: the agent's server failed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if recorder is not None:
            recorder.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(report.to_json() + "\n")
    markdown = report.to_markdown()
    (args.out / "report.md").write_text(markdown)
    written = [args.out / "report.json", args.out / "report.md"]
    try:
        written.append(report.plot(args.out / "speedup_vs_roofline.png"))
    except ImportError as exc:
        print(f"pkb-env: warning: {exc}; skipped the plot", file=sys.stderr)
    if recorder is not None:
        written.append(f"{recorder.writer.rows} dataset rows ({recorder.writer.steps} judged samples) to "
                       f"{recorder.path}")
    print(markdown)
    print("wrote " + ", ".join(map(str, written)))
    return 0


DEMO_EXPECTED = {"reference": "correct", "ring send/recv": "correct", "wrong: no communication": "wrong"}


def cmd_demo(args) -> int:
    """Three single-turn episodes on all_reduce: the reference, a ring of send/recv, and a wrong candidate."""
    from pkb_env import solutions
    from pkb_env.agents import ReferenceAgent
    from pkb_env.client import LocalClient
    from pkb_env.rewards import load_reward

    ring = solutions.read("examples", "all_reduce_ring")
    wrong = "```python\nimport torch\n\ndef solution(tensor):\n    return tensor.clone()  # forgot the peers\n```"
    reward_fn = load_reward(args.reward)
    rows, reports, verdicts = [], [], {}
    with LocalClient(judge_config(args)) as client, \
            tqdm(total=4, desc="starting rank processes", unit="step", disable=None) as bar:  # terminals only
        observation = client.observation("all_reduce", ready=True)
        prompt = observation["prompt"]
        bar.update()
        for label, action in (("reference", ReferenceAgent().act(observation)),
                              ("ring send/recv", ring), ("wrong: no communication", wrong)):
            bar.set_description(f"judging: {label}")
            record = client.submit("all_reduce", action).result()   # each a single-turn episode of its own
            reward = reward_fn(record).value
            bar.update()
            verdicts[label] = record.verdict.value
            rows.append([label, record.verdict.value, record.speedup, record.roofline_fraction, reward,
                         round(record.wall_s, 3)])
            reports.append(f"--- {label}: reward {reward:+.3f}\n{record.feedback}")
        where = f"executor: {client.info.name}, world size {client.world_size}"
    print(f"{where}; the prompt of turn 0:\n")
    print(prompt)
    print("\n\n".join(reports))
    print("\n" + table(["candidate", "verdict", "speedup", "roofline", "reward", "step s"], rows))
    unexpected = {label: got for label, got in verdicts.items() if got != DEMO_EXPECTED[label]}
    if unexpected:
        print(f"pkb-env: the demo's verdicts are not the expected ones ({unexpected}; expected {DEMO_EXPECTED}): "
              f"the judge does not work on this machine; the feedback above says why", file=sys.stderr)
        return 1
    return 0


def cmd_topology(args) -> int:
    """The GPUs and links, then the hardware paragraph a prompt gets here: the executor --executor resolves to and
    the calibration cached for it at --world-size (or how to measure one)."""
    from pkb_env.executors import local_plan
    from pkb_env.hardware import detect
    from pkb_env.topology import calibration_path, load_calibration, load_topology

    machine = detect()
    print(machine.describe())
    world_size = args.world_size or len(machine.gpus) or JudgeConfig().world_size
    config = JudgeConfig(executor=args.executor, world_size=world_size)
    plan = local_plan(config)
    topology = load_topology(plan.info.topology)
    statistic = config.protocol_for(plan.placement.clock).statistic
    calibration = load_calibration(config.cache_dir, plan.info.hardware, world_size, statistic)
    resolved = plan.info.name
    if args.executor != plan.info.name:
        resolved += f" (--executor {args.executor}, resolved here)"
    print(f"\ntopology config: {topology.name}\n{topology.describe(world_size, resolved, calibration)}")
    where = calibration_path(config.cache_dir, plan.info.hardware, world_size, statistic)
    if calibration is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(calibration.measured_at))
        print(f"calibration: cached at {where} (measured {when})")
    elif not plan.info.performance_available or world_size < 2:
        print(f"calibration: none (nothing to measure with {plan.info.name} at world size {world_size})")
    else:
        print(f"calibration: none cached for {plan.info.hardware} at world size {world_size}; the env measures one at "
              f"its first open, `pkb-env calibrate --world-size {world_size} --executor {plan.info.name}` now")
    if topology.sources:
        print("sources:\n  " + "\n  ".join(topology.sources))
    print(f"\ncandidate containment here: {containment_summary()}")
    return 0


def containment_summary() -> str:
    """What a rank set would get on this machine under the default JudgeConfig, without starting one."""
    from pkb_env.sandbox.containment import Containment
    from pkb_env.sandbox.privileges import unprivileged_uid
    from pkb_env.sandbox.rootfs import plan

    config = JudgeConfig()
    wanted = Containment.of(config)
    missing = wanted.missing()
    if missing is None:
        shown = plan()
        namespaces = (f"own PID, mount and network namespaces per rank set and per build; an allowlisted root "
                      f"showing only these host paths, read-only: {', '.join(shown.paths)}")
    else:
        namespaces = f"no namespaces: {missing}; candidates see the host's filesystem"
    required = "; required (PKB_ENV_REQUIRE_CONTAINMENT=1)" if wanted.required else ""
    privileges = unprivileged_uid(allowlisted_root=missing is None, drop=config.drop_privileges)[1]
    return f"{namespaces}{required}; privileges: {privileges}"


def cmd_calibrate(args) -> int:
    from pkb_env.client import LocalClient

    progress = RankProgress(args.world_size)
    try:
        with LocalClient(JudgeConfig(executor=args.executor, world_size=args.world_size), progress=progress) as client:
            print(f"calibrating {client.info.hardware} at world size {args.world_size}...", file=sys.stderr)
            cal, where = client.run(lambda service: (service.calibrate(), service.calibration_path()))
    finally:
        progress.close()
    rows = [[size, bw] for size, bw in cal.busbw_by_size]
    print(table(["all_reduce bytes", "busbw GB/s"], rows))
    if cal.peer_copy_gbps:
        print("\n" + table(["src GPU", "dst GPU", "copy GB/s"], [list(p) for p in cal.peer_copy_gbps]))
    print("\n" + table(["probe", "value"], [[name, value] for name, value in cal.probes]))
    rates = ", ".join(f"{dtype} {tflops:.3g}" for dtype, tflops in cal.matmul_tflops)
    print(f"\nroofline peaks: latency {cal.alpha_s * 1e6:.1f} us, bandwidth {cal.bandwidth_gbps:.3f} GB/s (best of the "
          f"probes), matmul TFLOP/s {rates}, device copy {cal.copy_gbps:.4g} GB/s\nsaved to {where}")
    return 0
