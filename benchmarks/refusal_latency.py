"""How long `pkb-env` takes to refuse bad input, beside `python -c 'import torch'` in the same run.

    python benchmarks/refusal_latency.py [--repeats 5] [--baseline /path/to/other/.venv/bin/pkb-env]

Each refusal (an unknown task, a missing file, an empty file, a world size the task cannot take, a bad option) is
run `--repeats` times, interleaved with a bare torch import and a bare interpreter, so that a machine whose load
moves during the run moves every column alike; medians and ranges are printed. With `--baseline`, the same
refusals by another install (e.g. the checkout before a change) are timed in the same rounds. docs/measurements/2026-12-05-refusal-latency-cpu.md
keeps measured results; the machine's load is part of every figure.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def refusals(folder: Path) -> dict[str, list[str]]:
    empty = folder / "empty.py"
    empty.write_text("")
    return {"unknown task": ["eval", "all_gahter", str(folder / "x.py")],
            "missing file": ["eval", "all_gather", str(folder / "nope.py")],
            "empty file": ["eval", "all_gather", str(empty)],
            "world size the task cannot take": ["show", "ulysses_attention", "--world-size", "3"],
            "bad option": ["eval", "all_gather", str(empty), "--bogus"]}


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pkb-env", default=shutil.which("pkb-env") or "pkb-env", help="the install measured")
    parser.add_argument("--baseline", default=None, help="another install's pkb-env, timed in the same rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cases = refusals(Path(tmp))
        columns = {"python -c pass": [sys.executable, "-c", "pass"],
                   "python -c 'import torch'": [sys.executable, "-c", "import torch"]}
        for label, argv in cases.items():
            columns[label] = [args.pkb_env, *argv]
            if args.baseline:
                columns[f"{label} (baseline)"] = [args.baseline, *argv]
        times: dict[str, list[float]] = {label: [] for label in columns}
        for _ in range(args.repeats):
            for label, command in columns.items():
                times[label].append(timed(command))
    torch_s = statistics.median(times["python -c 'import torch'"])
    width = max(map(len, times))
    print(f"{'':{width}}  median s  range s        x torch import")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"{label:{width}}  {median:8.3f}  {min(values):.3f}-{max(values):.3f}  {median / torch_s:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
