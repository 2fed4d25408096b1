"""`pkb-env`: list tasks, show a prompt, judge files, evaluate an agent, run the demo episode, calibrate.

Exit codes are part of the interface (CI jobs gate on them); see `pkb-env eval --help` and EXIT_CODES.
Ctrl-C and SIGTERM end a command cleanly: the rank processes are stopped and the executor's temporary
directory removed before the exit (130 for Ctrl-C, 143 for SIGTERM), with one line instead of a traceback.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from tqdm import tqdm

from pkb_env import __version__
from pkb_env.report import table

# Exit codes of `pkb-env eval`: the worst verdict over the files judged. The verdict codes are fixed
# (scripts depend on them); 2 is argparse's own code for bad usage, kept for every usage error.
EXIT_CODES = {"correct": 0, "wrong": 1, "runtime_error": 3, "build_error": 4, "unparsable": 5, "flagged": 6}
EXIT_USAGE = 2
EXIT_JUDGE_FAILURE = 7
EXIT_INTERRUPTED = 130   # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED = 143    # 128 + SIGTERM

EXIT_CODES_HELP = f"""exit codes (the worst verdict over the files judged):
  {EXIT_CODES['correct']}    correct        every file is correct
  {EXIT_CODES['wrong']}    wrong          it ran, but some rank's output differs from the reference
  {EXIT_USAGE}    usage error    bad arguments or config file, unknown task, missing file, world size
                      over this machine's limit (the message says which and the fix)
  {EXIT_CODES['runtime_error']}    runtime_error  a rank raised, crashed, hung or deadlocked
  {EXIT_CODES['build_error']}    build_error    importing the module or compiling its kernels failed
  {EXIT_CODES['unparsable']}    unparsable     no module defining solution(...) with the reference's parameters
  {EXIT_CODES['flagged']}    flagged        the code does something the judge does not allow
  {EXIT_JUDGE_FAILURE}    judge failure  the judge itself failed (reference, containment): not the candidate's fault
  {EXIT_INTERRUPTED}  interrupted    Ctrl-C; no process or temporary file is left behind
  {EXIT_TERMINATED}  terminated     SIGTERM; likewise"""

EVALUATE_EXIT_HELP = f"""exit codes:
  0    the report was written (whatever the scores: gate on report.json)
  {EXIT_USAGE}    usage error (bad arguments or config file, unknown task or agent, world size over the limit)
  {EXIT_JUDGE_FAILURE}    judge failure (the reference or containment failed)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C), {EXIT_TERMINATED} terminated (SIGTERM); nothing is left behind"""

CONFIG_HELP = """config file (--config FILE): a YAML mapping of this command's options, by their long names
(dashes or underscores), e.g.
  world_size: 2
  executor: cpu
  reward: fast_1
Options given on the command line win over the file."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that `finally` blocks (env.close) run before the exit.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)  # argparse's own usage errors exit here with code 2
    with _sigterm_raises():
        try:
            args = _with_config(parser, args, argv)
            if getattr(args, "limits_world_size", False):
                from pkb_env.executors import check_world_size

                check_world_size(args.executor, args.world_size)  # before torch is imported or anything starts
            return args.run(args)
        except KeyboardInterrupt:
            print("pkb-env: interrupted (Ctrl-C); rank processes stopped, temporary files removed", file=sys.stderr)
            return EXIT_INTERRUPTED
        except Terminated:
            print("pkb-env: terminated (SIGTERM); rank processes stopped, temporary files removed", file=sys.stderr)
            return EXIT_TERMINATED
        except (ValueError, FileNotFoundError) as exc:  # TaskError, ExecutorError and bad configs are ValueErrors
            print(f"pkb-env: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except RuntimeError as exc:
            if not _is_judge_failure(exc):
                raise
            print(f"pkb-env: judge failure ({type(exc).__name__}): {exc}", file=sys.stderr)
            return EXIT_JUDGE_FAILURE


def _is_judge_failure(exc: BaseException) -> bool:
    from pkb_env.executors.zygote import ContainmentError
    from pkb_env.judge.pipeline import JudgeError

    return isinstance(exc, (JudgeError, ContainmentError))


@contextmanager
def _sigterm_raises():
    """SIGTERM raises Terminated for the block (main thread, and only where nobody else set a handler)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        raise Terminated()

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# -- arguments -----------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pkb-env", description=__doc__.split("\n")[0],
                                     epilog="`pkb-env COMMAND --help` describes each command and its options.")
    parser.add_argument("--version", action="version", version=f"pkb-env {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, help: str, run, epilog: str | None = None, env: bool = False):
        p = sub.add_parser(name, help=help, description=help, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(run=run, limits_world_size=env, subparser=p)
        return p

    p = command("tasks", "list the task suite, grouped by family", cmd_tasks)

    p = command("show", "print the prompt a model sees for a task", cmd_show)
    p.add_argument("task", help="task name (see `pkb-env tasks`)")
    _placement(p)

    p = command("eval", "judge a candidate file (or each .py file of a folder) on a task: per-stage table, "
                        "verdict, reward, feedback", cmd_eval, epilog=EXIT_CODES_HELP + "\n\n" + CONFIG_HELP, env=True)
    p.add_argument("task", help="task name (see `pkb-env tasks`)")
    p.add_argument("path", type=Path, help="a .py file holding the candidate module (or a model's raw completion "
                                           "with a ```python block), or a folder: each of its .py files in turn")
    p.add_argument("--json", action="store_true", help="print one JSON line per file (the full evaluation record) "
                                                       "instead of the tables")
    _placement(p)
    _judging(p)

    p = command("evaluate", "run an agent over the suite: pass@k, fast_p, roofline; writes JSON, Markdown and a PNG",
                cmd_evaluate, epilog=EVALUATE_EXIT_HELP + "\n\n" + CONFIG_HELP, env=True)
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: all; with --agent files:DIR, "
                                                 "the tasks DIR has files for)")
    p.add_argument("--agent", default="reference", help="reference (the task's own reference: the speedup-1 "
                                                        "baseline) | files:DIR (DIR holds one <task>.py per task)")
    p.add_argument("--samples", type=int, default=1, help="samples per task (default 1)")
    p.add_argument("--k", default="1", help="comma-separated k of pass@k, each <= --samples (default 1)")
    p.add_argument("--out", type=Path, default=Path("pkb-eval"), help="output folder (default ./pkb-eval)")
    _placement(p)
    _judging(p)

    p = command("demo", "an evaluation episode on all_reduce: the reference, a ring of send/recv, a wrong candidate "
                        "(exit 0 when the three verdicts are the expected ones)", cmd_demo, env=True)
    _placement(p)
    _judging(p)

    command("topology", "show the GPUs, their links, the topology config that applies, and the containment "
                        "candidates get here", cmd_topology)

    p = command("calibrate", "measure interconnect latency and bandwidth for the roofline (cached per machine and "
                             "world size)", cmd_calibrate, env=True)
    p.add_argument("--world-size", type=int, default=4, help="ranks to calibrate with (default 4)")
    p.add_argument("--executor", default="auto", choices=_executors(),
                   help="where ranks run: auto (cuda with enough GPUs, cuda-emulated with fewer, cpu without any) | "
                        "cpu | cuda | cuda-emulated (default auto)")
    return parser


def _executors() -> tuple[str, ...]:
    from pkb_env.executors import EXECUTORS

    return EXECUTORS


def _placement(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world-size", type=int, default=4,
                   help="ranks the candidate runs on (default 4); limited by this machine: CPU cores x 32 for cpu, "
                        "GPUs for cuda")
    p.add_argument("--executor", default="auto", choices=_executors(),
                   help="where ranks run: auto (cuda with enough GPUs, cuda-emulated with fewer, cpu without any) | "
                        "cpu (processes over gloo) | cuda (one process per GPU, NCCL) | cuda-emulated (several "
                        "ranks per GPU: correctness only) (default auto)")
    p.add_argument("--preset", default="tiny", help="problem size: tiny (CPU-sized, milliseconds) | bench (PKB's "
                                                    "size) | large, where the task has it (default tiny)")
    p.add_argument("--dtype", default=None, help="element type, e.g. float32, bfloat16 (default: the preset's)")


def _judging(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reward", default="default",
                   help="the env's reward: the name of a config in configs/rewards/ (`default`: the shaped reward; "
                        "`fast_1`: 1 for correct and faster, else 0) or the path of a reward YAML file "
                        "(default: default)")
    p.add_argument("--config", type=Path, default=None, metavar="FILE",
                   help="a YAML file of this command's options (see below); the command line wins over it")


def _with_config(parser: argparse.ArgumentParser, args: argparse.Namespace, argv) -> argparse.Namespace:
    """Options from --config FILE become the subcommand's defaults; the command line is parsed again over them."""
    path = getattr(args, "config", None)
    if path is None:
        return args
    args.subparser.set_defaults(**config_defaults(args.subparser, path))
    return parser.parse_args(argv)


def config_defaults(subparser: argparse.ArgumentParser, path: Path) -> dict[str, Any]:
    """The options a YAML config file sets, checked and converted like command-line values."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"--config {path}: cannot read it ({exc.strerror}); pass the path of a YAML file") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"--config {path} is not valid YAML ({exc}); fix the file") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ValueError(f"--config {path} must be a YAML mapping of option: value (e.g. `world_size: 2`), "
                         f"got {type(data).__name__}")
    actions = {a.dest: a for a in subparser._actions if a.option_strings and a.dest not in ("help", "config")}
    values = {}
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        action = actions.get(dest)
        if action is None:
            raise ValueError(f"--config {path}: unknown option {key!r}; this command takes "
                             f"{', '.join(sorted(actions))}")
        values[dest] = _config_value(path, key, action, value)
    return values


def _config_value(path: Path, key: str, action: argparse.Action, value: Any) -> Any:
    if action.nargs == 0:  # a flag such as --json
        if not isinstance(value, bool):
            raise ValueError(f"--config {path}: {key} must be true or false, got {value!r}")
        return value
    if value is None:
        return None
    if isinstance(value, (list, tuple)):  # `k: [1, 4]` and `tasks: [a, b]` for the comma-separated options
        value = ",".join(str(v) for v in value)
    try:
        value = action.type(value if isinstance(value, str) else str(value)) if action.type else str(value)
    except (TypeError, ValueError):
        raise ValueError(f"--config {path}: {key}: {value!r} is not a valid value ({action.help})") from None
    if action.choices is not None and value not in action.choices:
        raise ValueError(f"--config {path}: {key}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return value


# -- commands ------------------------------------------------------------------------------------------
def cmd_tasks(args) -> int:
    from pkb_env.catalog import listing

    print(listing())
    return 0


def cmd_show(args) -> int:
    from pkb_env.executors import resolve_executor
    from pkb_env.hardware import detect
    from pkb_env.prompt import build_prompt
    from pkb_env.task import load_task
    from pkb_env.topology import load_topology

    task = load_task(args.task)
    task.check_world_size(args.world_size, args.preset)
    executor = resolve_executor(args.executor, args.world_size)
    topology = load_topology("cpu" if executor == "cpu" else detect().topology_name)
    print(build_prompt(task, args.preset, task.resolve_dtype(args.preset, args.dtype), args.world_size,
                       topology.describe(args.world_size, executor, None), gpu=executor != "cpu"))
    return 0


def _make_env(args, task: str):
    import gymnasium

    return gymnasium.make("pkb_env/ParallelKernel-v0", task=task, world_size=args.world_size, executor=args.executor,
                          preset=args.preset, dtype=args.dtype, reward=args.reward, max_turns=1)


class RankProgress:
    """One status line on stderr while ranks start and work ("reference start-up: 40/64 ranks"); off when
    stderr is not a terminal unless asked. Installed as the executor's progress hook."""

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
    from pkb_env.task import load_task

    load_task(args.task)
    agent = FileAgent(args.path)
    progress = RankProgress(args.world_size)
    env = _make_env(args, args.task)
    verdicts = []
    try:
        env.unwrapped.executor.progress = progress
        summary = []
        for path in tqdm(agent.files, desc=f"judging on {args.task}", unit="file", disable=len(agent.files) < 2):
            obs, _ = env.reset(options={"task": args.task})  # each file is judged as turn 0 of its own episode
            obs, reward, _, _, info = env.step(agent.act(obs))
            record = info["record"]
            verdicts.append(record.verdict)
            if args.json:
                print(json.dumps({"file": str(path), "reward": reward, **record.to_dict()}))
                continue
            print(f"\n== {path} ==")
            print(stage_table(record))
            print(f"\nverdict {record.verdict.value}   reward {reward:+.3f}\n\n{record.feedback}")
            summary.append([path.name, record.verdict.value, info["speedup"], info["roofline_fraction"], reward])
        if len(summary) > 1 and not args.json:
            print("\n" + table(["file", "verdict", "speedup", "roofline", "reward"], summary))
    finally:
        progress.close()
        env.close()
    worst = min(verdicts, key=lambda verdict: verdict.rank)  # Verdict's order: flagged worst, correct best
    return EXIT_CODES[worst.value]


def stage_table(record) -> str:
    """Per-stage rows: what each stage found and how long it took."""
    found = {
        "parse": record.parse and (record.parse.error or ("fenced block" if record.parse.from_fence else "bare code")),
        "screen": record.screen and (record.screen.error or f"{len(record.screen.flags)} flag(s)"),
        "build": record.build and (record.build.error or "imported on every rank"),
        "run": record.run and (record.run.error or f"{record.run.trials} trials on {record.world_size} ranks"),
        "verify": record.verify and ("all outputs match" if record.verify.correct else
                                     f"{len(record.verify.mismatches)} mismatch(es)") + f" ({record.verify.checked} checked)",
        "time": record.timing and (f"{record.timing.statistic} {record.timing.time_s * 1e3:.3f} ms, speedup "
                                   f"{record.timing.speedup:.2f}x" if record.timing.speedup else "measured"),
        "roofline": record.roofline and f"{record.roofline.fraction:.1%} of bound",
    }
    rows = [[stage, round(record.stage_seconds[stage] * 1e3, 2), _short(found.get(stage))]
            for stage in found if stage in record.stage_seconds]
    return table(["stage", "ms", "result"], rows)


def _short(text, limit: int = 90) -> str:
    text = str(text or "").replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def cmd_evaluate(args) -> int:
    from pkb_env.evaluate import agent_from_spec, evaluate, resolve_tasks

    try:
        ks = [int(k) for k in args.k.split(",") if k.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise ValueError(f"--k {args.k!r}: pass comma-separated positive integers, e.g. --k 1,5")
    agent = agent_from_spec(args.agent)
    tasks = resolve_tasks(args.tasks, agent)
    report = evaluate(agent, tasks=tasks, world_size=args.world_size, executor=args.executor, preset=args.preset,
                      dtype=args.dtype, samples=args.samples, ks=ks, reward=args.reward)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(report.to_json() + "\n")
    markdown = report.to_markdown()
    (args.out / "report.md").write_text(markdown)
    written = [args.out / "report.json", args.out / "report.md"]
    try:
        written.append(report.plot(args.out / "speedup_vs_roofline.png"))
    except ImportError as exc:
        print(f"pkb-env: warning: {exc}; skipped the plot", file=sys.stderr)
    print(markdown)
    print("wrote " + ", ".join(map(str, written)))
    return 0


DEMO_EXPECTED = {"reference": "correct", "ring send/recv": "correct", "wrong: no communication": "wrong"}


def cmd_demo(args) -> int:
    """Three single-turn episodes on all_reduce: the reference, a ring of send/recv, and a wrong candidate."""
    from pkb_env.agents import ReferenceAgent

    ring = resources.files("pkb_env.agents").joinpath("candidates/all_reduce_ring.py").read_text()
    wrong = "```python\nimport torch\n\ndef solution(tensor):\n    return tensor.clone()  # forgot the peers\n```"
    env = _make_env(args, "all_reduce")
    rows, reports, verdicts = [], [], {}
    try:
        with tqdm(total=4, desc="starting rank processes", unit="step") as bar:
            obs, info = env.reset(seed=0)
            prompt, start_info = obs["prompt"], info
            bar.update()
            for turn, (label, action) in enumerate((("reference", ReferenceAgent().act(obs)), ("ring send/recv", ring),
                                                    ("wrong: no communication", wrong))):
                bar.set_description(f"judging: {label}")
                if turn:
                    env.reset(options={"task": "all_reduce"})  # each candidate is a single-turn episode of its own
                obs, reward, _, _, info = env.step(action)
                bar.update()
                verdicts[label] = info["verdict"]
                rows.append([label, info["verdict"], info["speedup"], info["roofline_fraction"], reward,
                             round(sum(info["stage_seconds"].values()), 3)])
                reports.append(f"--- {label}: reward {reward:+.3f}\n{info['feedback']}")
    finally:
        env.close()
    print(f"executor: {start_info['executor']}, world size {start_info['world_size']}; the prompt of turn 0:\n")
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
    from pkb_env.hardware import detect
    from pkb_env.topology import load_topology

    machine = detect()
    print(machine.describe())
    topology = load_topology(machine.topology_name)
    print(f"\ntopology config: {topology.name}\n{topology.describe(len(machine.gpus) or 1, 'auto', None)}")
    if topology.sources:
        print("sources:\n  " + "\n  ".join(topology.sources))
    print(f"\ncandidate containment here: {containment_summary()}")
    return 0


def containment_summary() -> str:
    """What a generation would get on this machine, without starting one."""
    from pkb_env.executors.isolation import unprivileged_uid
    from pkb_env.executors.rootfs import plan
    from pkb_env.executors.zygote import Containment

    wanted = Containment.from_environment()
    missing = wanted.missing()
    if missing is None:
        shown = plan()
        namespaces = (f"own PID, mount and network namespaces per generation and per build; an allowlisted root "
                      f"showing only these host paths, read-only: {', '.join(shown.paths)}")
    else:
        namespaces = f"no namespaces: {missing}; candidates see the host's filesystem"
    required = "; required (PKB_ENV_REQUIRE_CONTAINMENT=1)" if wanted.required else ""
    return f"{namespaces}{required}; privileges: {unprivileged_uid(allowlisted_root=missing is None)[1]}"


def cmd_calibrate(args) -> int:
    from pkb_env.executors import make_executor
    from pkb_env.judge.pipeline import Judge
    from pkb_env.topology import calibration_path

    progress = RankProgress(args.world_size)
    try:
        with make_executor(args.executor, args.world_size) as executor:
            executor.progress = progress
            judge = Judge(executor)
            print(f"calibrating {executor.info.hardware} at world size {args.world_size}...", file=sys.stderr)
            cal = judge.calibrate()
    finally:
        progress.close()
    rows = [[size, bw] for size, bw in cal.busbw_by_size]
    print(table(["all_reduce bytes", "busbw GB/s"], rows))
    if cal.peer_copy_gbps:
        print("\n" + table(["src GPU", "dst GPU", "copy GB/s"], [list(p) for p in cal.peer_copy_gbps]))
    print("\n" + table(["probe", "value"], [[name, value] for name, value in cal.probes]))
    rates = ", ".join(f"{dtype} {tflops:.3g}" for dtype, tflops in cal.matmul_tflops)
    print(f"\nroofline peaks: latency {cal.alpha_s * 1e6:.1f} us, bandwidth {cal.bandwidth_gbps:.3f} GB/s (best of the "
          f"probes), matmul TFLOP/s {rates}, device copy {cal.copy_gbps:.4g} GB/s"
          f"\nsaved to {calibration_path(cal.hardware, cal.world_size, cal.statistic)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
