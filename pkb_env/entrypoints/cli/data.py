"""`pkb-env data ...` (summary, sft, pairs, export) and `evaluate --dataset`: episode datasets from the command
line (docs/data.md). The work is pkb_env.data's; these parse, print and write."""
from __future__ import annotations

import argparse
from pathlib import Path

DATA_HELP = "episode datasets (pkb-env evaluate --dataset DIR): summary, SFT and DPO data, verl export"


def add_data_command(command) -> None:
    """The `data` command and its subcommands; `command` is options.parser()'s helper that makes one."""
    p = command("data", DATA_HELP, cmd_data)
    sub = p.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")

    def subcommand(name: str, help: str, out: bool = True) -> argparse.ArgumentParser:
        s = sub.add_parser(name, help=help, description=help)
        s.add_argument("dataset", type=Path, metavar="DIR", help="the dataset folder")
        if out:
            s.add_argument("--out", type=Path, required=True,
                           help="a folder (OUT/train.parquet is written) or a .parquet path")
        return s

    s = subcommand("summary", "counts per task and verdict, best speedup per task, a speedup-vs-roofline plot", out=False)
    s.add_argument("--plot", type=Path, default=None, help="where the PNG goes (default DIR/speedup_vs_roofline.png)")
    s = subcommand("sft", "the best correct solutions per prompt as chat `messages` rows (TRL's SFTTrainer)")
    s.add_argument("--min-speedup", type=float, default=0.0,
                   help="keep solutions at least this fast (default 0: any correct one, unmeasured speed included)")
    s.add_argument("--top", type=int, default=1, help="solutions kept per prompt, best first (default 1)")
    s = subcommand("pairs", "chosen/rejected pairs of one prompt for DPO (TRL's DPOTrainer, conversational): correct "
                            "over wrong or failed, or over correct and slower by more than --margin")
    s.add_argument("--margin", type=float, default=0.05,
                   help="a correct solution beats a correct one only when faster by more than this fraction (default 0.05)")
    s.add_argument("--max-per-prompt", type=int, default=8, help="pairs kept per prompt (default 8)")
    s = subcommand("export", "the prompts in another trainer's format (verl's RL parquet)")
    s.add_argument("--format", default="verl", help="the trainer's format: verl (default verl, the only one so far; "
                                                    "TRL reads `data sft` and `data pairs`)")


def cmd_data(args: argparse.Namespace) -> int:
    _require_data()
    from pkb_env.data import read_rows
    from pkb_env.data import recipes

    if args.data_command == "export":
        if args.format not in recipes.FORMATS:   # refused before the dataset is read
            recipes.export_rows([], args.format)
    rows = read_rows(args.dataset)   # DatasetError (a ValueError: exit 2) naming the fix
    if args.data_command == "summary":
        from pkb_env.data.summary import plot, summary_tables

        print(summary_tables(rows))
        try:
            path = plot(rows, args.plot or args.dataset / "speedup_vs_roofline.png", f"dataset {args.dataset}")
            print(f"\nwrote {path}")
        except ImportError as exc:
            print(f"\npkb-env: warning: {exc}; skipped the plot")
        return 0
    if args.data_command == "sft":
        out, schema, what = recipes.sft_rows(rows, args.min_speedup, args.top), recipes.SFT_SCHEMA, "SFT rows"
        if not out:
            raise recipes.DatasetError(f"{args.dataset}: no correct solution at speedup >= {args.min_speedup}; "
                                       f"lower --min-speedup or record more steps")
    elif args.data_command == "pairs":
        out, schema, what = (recipes.preference_pairs(rows, args.margin, args.max_per_prompt), recipes.PAIR_SCHEMA,
                             "chosen/rejected pairs")
        if not out:
            raise recipes.DatasetError(f"{args.dataset}: no prompt has both a correct solution and a worse one "
                                       f"(wrong, failed, or slower by more than --margin {args.margin}); record "
                                       f"more varied steps (several samples per task)")
    else:
        (out, schema), what = recipes.export_rows(rows, args.format), f"{args.format} prompts"
    path = recipes.write_parquet(out, schema, args.out)
    print(f"wrote {len(out)} {what} from {len(rows)} rows to {path}")
    return 0


def open_recorder(folder: Path | None, agent):
    """The EpisodeRecorder of `evaluate --dataset DIR` (None without the option)."""
    if folder is None:
        return None
    _require_data()
    from pkb_env.data import EpisodeRecorder

    return EpisodeRecorder(folder, agent=getattr(agent, "name", None))


def _require_data() -> None:
    """The `data` extra, or a usage error (exit 2) naming it, before anything starts."""
    from pkb_env.extras import MissingExtra, require

    try:
        require("pyarrow", "data", "episode datasets (pkb-env data, --dataset)")
    except MissingExtra as exc:
        raise ValueError(str(exc)) from None
