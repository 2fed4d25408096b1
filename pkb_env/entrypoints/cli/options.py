"""The command line's parser. The judge options and --config files (a YAML mapping of a command's options and of
judge settings, which become the command's JudgeConfig) are pkb_env/settings.py's, shared with `pkb-env serve`."""
from __future__ import annotations

import argparse
from pathlib import Path

from pkb_env import __version__
from pkb_env.config import EXECUTORS
from pkb_env.entrypoints.cli.commands import (cmd_calibrate, cmd_demo, cmd_eval, cmd_evaluate, cmd_show, cmd_tasks,
                                              cmd_topology)
from pkb_env.entrypoints.cli.data import add_data_command
from pkb_env.entrypoints.cli.exits import EVALUATE_EXIT_HELP, EXIT_CODES_HELP
from pkb_env.settings import CONFIG_HELP, add_judging, add_placement
from pkb_env.topology import topology_names

SERVE_HELP = ("serve the judge as an OpenEnv environment: each session holds an episode, all share one judge "
              "(`pkb-env serve --help` for its options; pip install 'pkb-env[openenv]')")

DESCRIPTION = ("list tasks, show a prompt, judge files, evaluate an agent, run the demo episode, calibrate, "
               "turn recorded episodes into training data, serve the judge as an OpenEnv environment")

def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pkb-env", description=DESCRIPTION,
                                     epilog="`pkb-env COMMAND --help` describes each command and its options.")
    parser.add_argument("--version", action="version", version=f"pkb-env {__version__}")
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, help: str, run, epilog: str | None = None, judges: bool = False):
        """`judges`: the command starts a judge (its world size is checked against the machine before
        anything starts, and its --config file may hold judge settings)."""
        p = sub.add_parser(name, help=help, description=help, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(run=run, limits_world_size=judges, subparser=p)
        return p

    p = command("tasks", "list the task suite, grouped by family", cmd_tasks)

    p = command("show", "print the prompt a model sees for a task", cmd_show)
    p.add_argument("task", help="task name (see `pkb-env tasks`)")
    add_placement(p)
    p.add_argument("--topology", default=None, choices=topology_names(), metavar="NAME",
                   help="print the prompt a machine with this board would give (its GPUs and links, --executor auto "
                        "resolved for its GPU count), on any machine, GPUs or not: " + " | ".join(topology_names()))

    p = command("eval", "judge a candidate file (or each .py file of a folder) on a task: per-stage table, "
                        "verdict, reward, feedback", cmd_eval, epilog=EXIT_CODES_HELP + "\n\n" + CONFIG_HELP, judges=True)
    p.add_argument("task", help="task name (see `pkb-env tasks`)")
    p.add_argument("path", type=Path, help="a .py file holding the candidate module (or a model's raw completion "
                                           "with a ```python block), or a folder: each of its .py files in turn")
    p.add_argument("--json", action="store_true", help="print one JSON line per file (the full evaluation record) "
                                                       "instead of the tables")
    p.add_argument("--pkb", action="store_true",
                   help="the file is in ParallelKernelBench's format (its signature, outputs and utils.* helpers): "
                        "judged unchanged through the task's PKB mapping, on PKB's own statement of the problem "
                        "where the task has one (docs/pkb_compat.md)")
    add_placement(p)
    add_judging(p)

    p = command("evaluate", "run an agent over the suite: pass@k, fast_p, roofline; writes JSON, Markdown and a PNG",
                cmd_evaluate, epilog=EVALUATE_EXIT_HELP + "\n\n" + CONFIG_HELP, judges=True)
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: all; with --agent files:DIR, "
                                                 "the tasks DIR has files for)")
    p.add_argument("--agent", default="reference",
                   help="reference (the task's own reference: the speedup-1 baseline) | files:DIR (DIR holds one "
                        "<task>.py per task) | pkb:DIR (DIR holds PKB-format files, <N>_<problem>_<backend>.py, "
                        "judged as with eval --pkb) | openai:MODEL (MODEL on an OpenAI-compatible server such as vLLM: "
                        "--base-url or OPENAI_BASE_URL, key from OPENAI_API_KEY) | hf:PATH (a transformers causal LM "
                        "from a folder or a hub name, generating here; pip install 'pkb-env[llm]') (default reference)")
    p.add_argument("--base-url", default=None, metavar="URL",
                   help="with --agent openai: the server's API root, e.g. http://localhost:8000/v1 (default: "
                        "OPENAI_BASE_URL)")
    p.add_argument("--temperature", type=float, default=None,
                   help="with a model agent: sampling temperature, 0 for greedy (default: the agent's, 0.8)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="with a model agent: the most tokens a completion may have (default: 4096 for openai, "
                        "1024 for hf)")
    p.add_argument("--concurrency", type=int, default=None,
                   help="with --agent openai: requests in flight at once, one per task with --samples completions "
                        "each (default 8)")
    p.add_argument("--samples", type=int, default=1, help="samples per task (default 1)")
    p.add_argument("--k", default="1", help="comma-separated k of pass@k, each <= --samples (default 1)")
    p.add_argument("--out", type=Path, default=Path("pkb-eval"), help="output folder (default ./pkb-eval)")
    p.add_argument("--dataset", type=Path, default=None, metavar="DIR",
                   help="also record every judged sample as a row of the episode dataset DIR (docs/data.md)")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="judge on a Ray pool of judges: 'local' starts a cluster for the run, 'auto' joins the one "
                        "`ray start --head` started here, ray://HOST:PORT a remote one (pip install 'pkb-env[ray]'; "
                        "docs/scale_out.md)")
    p.add_argument("--actors", type=int, default=None,
                   help="with --ray: judge actors (default: as many as the cluster holds)")
    p.add_argument("--cpus-per-actor", type=float, default=None,
                   help="with --ray: CPUs each actor claims (default: the world size for cpu, 1 for GPU executors)")
    add_placement(p)
    add_judging(p)

    p = command("demo", "an evaluation episode on all_reduce: the reference, a ring of send/recv, a wrong candidate "
                        "(exit 0 when the three verdicts are the expected ones)", cmd_demo, judges=True)
    add_placement(p)
    add_judging(p)

    add_data_command(command)

    command("serve", SERVE_HELP, None)   # handed to its own program before parsing (cli/__init__.py's main)

    p = command("topology", "show the GPUs, their links, the topology config that applies, the executor and "
                            "calibration a prompt gets here, and the containment candidates get here", cmd_topology)
    p.add_argument("--world-size", type=int, default=None,
                   help="the world size whose executor and cached calibration to show (default: the GPUs here, "
                        "else 4)")
    p.add_argument("--executor", default="auto", choices=EXECUTORS, help="the executor to resolve (default auto)")

    p = command("calibrate", "measure interconnect latency and bandwidth for the roofline (cached per machine and "
                             "world size)", cmd_calibrate, judges=True)
    p.add_argument("--world-size", type=int, default=4, help="ranks to calibrate with (default 4)")
    p.add_argument("--executor", default="auto", choices=EXECUTORS,
                   help="where ranks run: auto (cuda with enough GPUs, cuda-emulated with fewer, cpu without any) | "
                        "cpu | cuda | cuda-emulated (default auto)")
    return parser


