"""`pkb-env`: list tasks, show a prompt, judge files, run the demo episode, calibrate the interconnect."""
from __future__ import annotations

import argparse
import json
import sys
from importlib import resources
from pathlib import Path

from tqdm import tqdm

from pkb_env.report import table
from pkb_env.task import TaskError, load_task


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (TaskError, FileNotFoundError, ValueError) as exc:
        print(f"pkb-env: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pkb-env", description=__doc__)
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    p = sub.add_parser("tasks", help="list the task suite, grouped by family")
    p.set_defaults(run=cmd_tasks)

    p = sub.add_parser("show", help="print the prompt of a task")
    p.add_argument("task")
    _common(p)
    p.set_defaults(run=cmd_show)

    p = sub.add_parser("eval", help="judge a candidate file (or each .py file of a folder) on a task")
    p.add_argument("task")
    p.add_argument("path", type=Path)
    p.add_argument("--json", action="store_true", help="print the evaluation records as JSON lines")
    _common(p)
    p.set_defaults(run=cmd_eval)

    p = sub.add_parser("evaluate", help="run an agent over the suite: pass@k, fast_p, roofline; JSON, Markdown, PNG")
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: all; for files: the tasks "
                                                 "the folder has files for)")
    p.add_argument("--agent", default="reference", help="reference | files:DIR (DIR holds one <task>.py per task)")
    p.add_argument("--samples", type=int, default=1, help="samples per task (default 1)")
    p.add_argument("--k", default="1", help="comma-separated k of pass@k, each <= --samples (default 1)")
    p.add_argument("--out", type=Path, default=Path("pkb-eval"), help="output folder (default ./pkb-eval)")
    _common(p)
    p.set_defaults(run=cmd_evaluate)

    p = sub.add_parser("demo", help="an evaluation episode on the default executor (the README's main job)")
    _common(p)
    p.set_defaults(run=cmd_demo)

    p = sub.add_parser("topology", help="show the GPUs, their links, and the topology config that applies")
    p.set_defaults(run=cmd_topology)

    p = sub.add_parser("calibrate", help="measure interconnect latency and bandwidth for the roofline")
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--executor", default="auto")
    p.set_defaults(run=cmd_calibrate)
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world-size", type=int, default=4, help="ranks (default 4)")
    p.add_argument("--executor", default="auto", help="auto | cpu | cuda | cuda-emulated (default auto)")
    p.add_argument("--preset", default="tiny", help="tiny | bench (default tiny)")
    p.add_argument("--dtype", default=None, help="default: the preset's")


def cmd_tasks(args) -> int:
    from pkb_env.contract.catalog import listing

    print(listing())
    return 0


def cmd_show(args) -> int:
    from pkb_env.executors import resolve_executor
    from pkb_env.prompt import build_prompt
    from pkb_env.topology import load_topology

    task = load_task(args.task)
    task.check_world_size(args.world_size, args.preset)
    from pkb_env.hardware import detect

    executor = resolve_executor(args.executor, args.world_size)
    topology = load_topology("cpu" if executor == "cpu" else detect().topology_name)
    print(build_prompt(task, args.preset, task.resolve_dtype(args.preset, args.dtype), args.world_size,
                       topology.describe(args.world_size, executor, None), gpu=executor != "cpu"))
    return 0


def _make_env(args, task: str):
    import gymnasium

    import pkb_env  # noqa: F401  (registers the env)

    return gymnasium.make("pkb_env/ParallelKernel-v0", task=task, world_size=args.world_size,
                          executor=args.executor, preset=args.preset, dtype=args.dtype, max_turns=10_000)


def cmd_eval(args) -> int:
    from pkb_env.agents import FileAgent

    load_task(args.task)
    agent = FileAgent(args.path)
    env = _make_env(args, args.task)
    try:
        obs, _ = env.reset(options={"task": args.task})
        summary = []
        for path in tqdm(agent.files, desc=f"judging on {args.task}", unit="file", disable=len(agent.files) < 2):
            obs, reward, _, _, info = env.step(agent.act(obs))
            record = info["record"]
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
        env.close()
    return 0


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
                      dtype=args.dtype, samples=args.samples, ks=ks)
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


def cmd_demo(args) -> int:
    """Three turns on all_reduce: the reference, a ring of send/recv, and a wrong candidate."""
    from pkb_env.agents import ReferenceAgent

    ring = resources.files("pkb_env.agents").joinpath("candidates/all_reduce_ring.py").read_text()
    wrong = "```python\nimport torch\n\ndef solution(tensor):\n    return tensor.clone()  # forgot the peers\n```"
    env = _make_env(args, "all_reduce")
    rows, reports = [], []
    try:
        with tqdm(total=4, desc="starting rank processes", unit="step") as bar:
            obs, info = env.reset(seed=0)
            prompt, start_info = obs["prompt"], info
            bar.update()
            for label, action in (("reference", ReferenceAgent().act(obs)), ("ring send/recv", ring),
                                  ("wrong: no communication", wrong)):
                bar.set_description(f"judging: {label}")
                obs, reward, _, _, info = env.step(action)
                bar.update()
                rows.append([label, info["verdict"], info["speedup"], info["roofline_fraction"], reward,
                             round(sum(info["stage_seconds"].values()), 3)])
                reports.append(f"--- {label}: reward {reward:+.3f}\n{info['feedback']}")
    finally:
        env.close()
    print(f"executor: {start_info['executor']}, world size {start_info['world_size']}; the prompt of turn 0:\n")
    print(prompt)
    print("\n\n".join(reports))
    print("\n" + table(["candidate", "verdict", "speedup", "roofline", "reward", "step s"], rows))
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

    with make_executor(args.executor, args.world_size) as executor:
        judge = Judge(executor)
        with tqdm(total=1, desc=f"calibrating {executor.info.hardware} at world size {args.world_size}") as bar:
            cal = judge.calibrate()
            bar.update()
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
