"""The suite's catalogue, generated from the specs: `docs/tasks.md` and the `pkb-env tasks` listing.

    python -m pkb_env.catalog --write    # regenerate docs/tasks.md
    python -m pkb_env.catalog --check    # exit 1 if docs/tasks.md is stale (tests/tasks/test_catalog.py)

The dominant cost term is the cost model's at the `bench` preset and the H200 board's datasheet peaks,
at each GPU world size (2, 4, 8) the task takes.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from pkb_env.contract.cost import bound
from pkb_env.contract.families import FAMILIES
from pkb_env.contract.spec import TaskSpec
from pkb_env.task import load_task, task_names
from pkb_env.topology import load_topology

BOARD = "h200_8gpu"
GPU_WORLD_SIZES = (2, 4, 8)
DOC = Path(__file__).resolve().parents[1] / "docs" / "tasks.md"


@dataclass(frozen=True)
class Row:
    name: str
    family: str
    pkb_id: int | None
    title: str
    computes: str
    dominant: str            # "communication (W=2, 4, 8)" or per world size
    world_sizes: str         # at bench, among 1..8
    tiny_world_sizes: str    # at tiny (the default preset), among 1..8
    dtypes: str
    departures: str


def rows() -> list[Row]:
    """One row per task, grouped by family in FAMILIES order, then by PKB id."""
    peaks = load_topology(BOARD).datasheet_peaks()
    out = []
    for name in task_names():
        spec = load_task(name)
        out.append(Row(spec.name, spec.family, spec.pkb_id, spec.title, spec.description,
                       _dominant(spec, peaks), _ranges(spec.allowed_world_sizes("bench")),
                       _ranges(spec.allowed_world_sizes("tiny")), ", ".join(spec.dtypes),
                       "; ".join(spec.departures) or "none"))
    order = list(FAMILIES)
    return sorted(out, key=lambda r: (order.index(r.family), r.pkb_id or 10 ** 6, r.name))


def _dominant(spec: TaskSpec, peaks) -> str:
    by_world = {}
    for w in GPU_WORLD_SIZES:
        if spec.world_size_problem(w, "bench") is None:
            dtype = spec.presets["bench"].dtype
            by_world[w] = bound(spec.cost_model(spec.presets["bench"].dims, w, dtype), peaks).dominant
    if not by_world:
        return "-"
    if len(set(by_world.values())) == 1:
        return f"{next(iter(by_world.values()))} (W={', '.join(map(str, by_world))})"
    return ", ".join(f"W={w}: {d}" for w, d in by_world.items())


def _ranges(values: list[int]) -> str:
    """1, 2, 3, 4 -> '1-4'; 2, 4, 6, 8 -> '2, 4, 6, 8'."""
    if values and values == list(range(values[0], values[-1] + 1)) and len(values) > 2:
        return f"{values[0]}-{values[-1]}"
    return ", ".join(map(str, values)) or "none"


def markdown() -> str:
    lines = ["# Tasks", "",
             "Generated from the task specs by `python -m pkb_env.catalog --write`; "
             "`tests/tasks/test_catalog.py` fails when this file is stale. The dominant term is the cost model's at "
             f"the `bench` preset and the datasheet peaks of `{BOARD}`; world sizes are those the `bench` "
             "shapes and mesh allow among 1-8. How to add a task: docs/task_contract.md.", ""]
    by_family: dict[str, list[Row]] = {}
    for row in rows():
        by_family.setdefault(row.family, []).append(row)
    lines += [f"{sum(len(v) for v in by_family.values())} tasks in {len(by_family)} families.", ""]
    for family, members in by_family.items():
        lines += [f"## {FAMILIES[family].title} (`{family}`)", "",
                  "| task | PKB | what it computes | dominant at bench | world sizes | departures from PKB |",
                  "|---|---|---|---|---|---|"]
        for r in members:
            lines.append(f"| `{r.name}` | {r.pkb_id or '-'} | {_cell(r.computes)} | {r.dominant} | {r.world_sizes} | "
                         f"{_cell(r.departures)} |")
        lines.append("")
    return "\n".join(lines)


def listing() -> str:
    """The `pkb-env tasks` text: one table per family, with the world sizes (among 1-8) each preset's shapes
    allow: `tiny` (the default preset) and `bench`."""
    from pkb_env.tables import table

    blocks = []
    current, members = None, []
    for row in rows() + [None]:
        if row is None or row.family != current:
            if members:
                blocks.append(f"{FAMILIES[current].title} ({current})\n" + table(
                    ["task", "PKB id", "world sizes: tiny", "bench", "dtypes", f"dominant at bench ({BOARD})", "title"],
                    [[r.name, r.pkb_id, r.tiny_world_sizes, r.world_sizes, r.dtypes, r.dominant, r.title]
                     for r in members]))
            if row is None:
                break
            current, members = row.family, []
        members.append(row)
    return "\n\n".join(blocks)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="generate docs/tasks.md from the task specs")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="rewrite docs/tasks.md")
    group.add_argument("--check", action="store_true", help="exit 1 if docs/tasks.md is stale")
    args = parser.parse_args(argv)
    text = markdown()
    if args.write:
        DOC.write_text(text)
        return 0
    if not DOC.is_file() or DOC.read_text() != text:
        print(f"{DOC} is stale: run `python -m pkb_env.catalog --write`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
