"""WandbLogger end to end: log an episode to an offline run, then read the run directory back.

wandb 0.31 has no Python reader for a run's `run-<id>.wandb` transaction log (wandb-core, in Go, writes and
reads it), so `read_transaction_log` below reads the framing itself: a 7-byte file header (":W&B", magic
0xBEE1, version 0), then LevelDB-log records (crc32 of type+data, uint16 length, type FULL/FIRST/MIDDLE/LAST)
in 32 KiB blocks, each payload a protobuf `wandb.proto.wandb_internal_pb2.Record`. When the installed
wandb ships `wandb leet inspect --json` (wandb-core's own reader), the history records are cross-checked
against it. Every test here is offline; no wandb server is contacted.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import gymnasium
import pytest
from wandb.proto import wandb_internal_pb2 as pb

import pkb_env  # noqa: F401  (registers the env)
from conftest import FAST
from pkb_env.record import Verdict
from pkb_env.entrypoints.gym.wandb import TABLE_COLUMNS, WandbLogger, resolve_mode

FAKE_KEY = "pkbtestfakekey_0123456789abcdef0123456789abcdef"

WRONG = '''import torch
import torch.distributed as dist


def solution(tensor: torch.Tensor) -> torch.Tensor:
    out = tensor.clone() * 2  # off by a factor of two: a WRONG verdict
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
'''
UNPARSABLE = "def solution(tensor:\n    return ((("

# Raises with what it sees of its environment, so the answer comes back in the feedback. PATH is allowlisted
# for rank processes: its presence shows that the probe reads the environment it was given.
ENV_PROBE = '''import os
import torch


def solution(tensor: torch.Tensor) -> torch.Tensor:
    names = sorted(k for k in os.environ if "WANDB" in k or "KEY" in k)
    raise RuntimeError(f"env-probe: PATH present={'PATH' in os.environ}; "
                       f"WANDB_API_KEY present={'WANDB_API_KEY' in os.environ}; names={names}")
'''


# -- reading an offline run back ---------------------------------------------------------------------
BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_transaction_log(path: Path) -> list[pb.Record]:
    """Every Record in a run's .wandb file, checksums verified."""
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), f"{path} is not a wandb transaction log"
    records, pending, pos = [], None, HEADER
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:   # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if kind == 0 and length == 0:      # zero fill after the last record
            break
        chunk = data[pos + HEADER:pos + HEADER + length]
        assert len(chunk) == length, f"{path}: truncated record at byte {pos}"
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"{path}: bad checksum at byte {pos}"
        pos += HEADER + length
        if kind == FULL:
            payloads = [chunk]
        elif kind == FIRST:
            pending, payloads = chunk, []
        elif kind == MIDDLE:
            pending, payloads = pending + chunk, []
        elif kind == LAST:
            payloads, pending = [pending + chunk], None
        else:
            raise AssertionError(f"{path}: unknown record type {kind} at byte {pos}")
        for payload in payloads:
            record = pb.Record()
            record.ParseFromString(payload)
            records.append(record)
    return records


def finished_log(run_dir: Path, timeout_s: float = 30.0) -> list[pb.Record]:
    """The run's records once its log is complete, i.e. holds the exit record.

    wandb-core writes the log in its own process through a buffer; run.finish() can return before the buffer
    reaches the file, so the reader waits for the exit record (a partly written record is read again).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        logs = list(run_dir.glob("run-*.wandb"))
        assert len(logs) <= 1, f"more than one transaction log in {run_dir}: {logs}"
        try:
            records = read_transaction_log(logs[0]) if logs else []
        except (AssertionError, struct.error):
            records = []
        if any(record.WhichOneof("record_type") == "exit" for record in records):
            return records
        assert time.monotonic() < deadline, f"{run_dir}: no complete transaction log after {timeout_s}s"
        time.sleep(0.05)


def _item_value(item):
    kind = item.WhichOneof("value")
    if kind is None or kind == "value_json":
        return json.loads(item.value_json)
    if kind == "json":
        return json.loads(item.json)
    return None if kind == "none" else getattr(item, kind)


def history(records: list[pb.Record]) -> list[dict]:
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            rows.append({item.key or ".".join(item.nested_key): _item_value(item) for item in record.history.item})
    return rows


def config(records: list[pb.Record]) -> dict:
    merged: dict = {}
    for record in records:
        kind = record.WhichOneof("record_type")
        updates = record.run.config.update if kind == "run" else record.config.update if kind == "config" else []
        for item in updates:
            merged[item.key or ".".join(item.nested_key)] = json.loads(item.value_json)
    return merged


def leet_history(run_dir: Path) -> list[dict] | None:
    """History records as wandb-core's own reader (`wandb leet inspect --json`) prints them; None if absent."""
    proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [line["history"] for line in lines if line.get("type") == "history"]


# -- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """Offline wandb with every directory it writes inside tmp_path; then a fake key in the environment."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_IDENTITY_TOKEN_FILE", raising=False)
    for var, sub in (("WANDB_DIR", "runs"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_DATA_DIR", "data"),
                     ("WANDB_CONFIG_DIR", "config"), ("WANDB_ARTIFACT_DIR", "artifacts")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)   # after offline mode is forced
    return tmp_path


def make_env(max_turns: int):
    # target_speedup out of reach: a correct first step must not end the episode
    return gymnasium.make("pkb_env/ParallelKernel-v0", task="all_reduce", world_size=2, executor="cpu",
                          max_turns=max_turns, target_speedup=1e9, config=FAST.replace(trials=1))


def run_directory(root: Path) -> Path:
    runs = list((root / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, f"expected one offline run under {root}, found {runs}"
    return runs[0]


# -- tests -------------------------------------------------------------------------------------------
def test_mode_resolution(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_IDENTITY_TOKEN_FILE", raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent/netrc")
    assert resolve_mode(None) == "offline"
    assert resolve_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_API_KEY", FAKE_KEY)
    assert resolve_mode(None) == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert resolve_mode(None) == "offline"


def test_episode_is_logged_and_read_back(offline_wandb):
    root = offline_wandb
    env = WandbLogger(make_env(max_turns=3), project="pkb-env-test", name="episode",
                      config={"model": "reference-and-friends", "seed": 7}, dir=root / "runs")
    assert env.run.settings.mode == "offline"
    obs, _ = env.reset(seed=0)
    actions = [obs["reference"], WRONG, UNPARSABLE]
    steps = []
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        steps.append((reward, info))
    env.close()
    assert (terminated, truncated) == (False, True)
    verdicts = [info["verdict"] for _, info in steps]
    assert verdicts == ["correct", "wrong", "unparsable"]

    run_dir = run_directory(root / "runs")
    records = finished_log(run_dir)
    rows = history(records)

    # per step: reward, terms, stage times, verdicts
    step_rows = [row for row in rows if "reward" in row]
    assert [row["global_step"] for row in step_rows] == [1, 2, 3]
    assert [row["turn"] for row in step_rows] == [1, 2, 3]
    assert [row["verdict"] for row in step_rows] == verdicts
    for row, (reward, info) in zip(step_rows, steps):
        assert row["reward"] == pytest.approx(reward)
        assert row["correct"] == int(info["correct"])
        assert row[f"verdict/{info['verdict']}"] == 1
        assert sum(row[f"verdict/{v.value}"] for v in Verdict) == 1
        for term, value in info["reward_terms"].items():
            if isinstance(value, (int, float)):
                assert row[f"reward/{term}"] == pytest.approx(value)
            else:
                assert f"reward/{term}" not in row
        for stage, seconds in info["stage_seconds"].items():
            assert row[f"time/{stage}"] == pytest.approx(seconds)
    assert step_rows[0]["speedup"] == pytest.approx(steps[0][1]["speedup"])
    assert step_rows[0]["roofline_fraction"] == pytest.approx(steps[0][1]["roofline_fraction"])
    assert "speedup" not in step_rows[1] and "time/time" not in step_rows[2]

    # per episode
    episode_rows = [row for row in rows if "episode/return" in row]
    assert len(episode_rows) == 1
    episode = episode_rows[0]
    assert episode["episode/return"] == pytest.approx(sum(r for r, _ in steps))
    assert episode["episode/length"] == 3
    assert episode["episode/best_reward"] == pytest.approx(max(r for r, _ in steps))
    assert episode["episode/best_speedup"] == pytest.approx(steps[0][1]["speedup"])
    assert (episode["episode/solved"], episode["episode/any_correct"], episode["episode/truncated"]) == (0, 1, 1)

    # the kernels table: found through the history row that logged it, read from files/media/table/
    table_rows = [row for row in rows if "kernels.path" in row or isinstance(row.get("kernels"), dict)]
    assert len(table_rows) == 1
    ref = table_rows[0].get("kernels") or {"path": table_rows[0]["kernels.path"]}
    table_path = run_dir / "files" / ref["path"]
    assert table_path.parent == run_dir / "files" / "media" / "table" and table_path.is_file()
    table = json.loads(table_path.read_text())
    assert table["columns"] == list(TABLE_COLUMNS)
    assert len(table["data"]) == 3
    cells = [dict(zip(table["columns"], row)) for row in table["data"]]
    assert [c["verdict"] for c in cells] == verdicts
    assert [c["code"] for c in cells] == actions
    assert [c["global_step"] for c in cells] == [1, 2, 3] and {c["task"] for c in cells} == {"all_reduce"}
    assert [c["reward"] for c in cells] == pytest.approx([r for r, _ in steps])
    assert cells[1]["speedup"] is None and cells[0]["speedup"] == pytest.approx(steps[0][1]["speedup"])
    assert "WRONG" in cells[1]["feedback"]

    # config: env, reward config, judge settings, package versions, the user's keys
    cfg = config(records)
    assert cfg["model"] == "reference-and-friends" and cfg["seed"] == 7
    assert cfg["env"]["task_pool"] == ["all_reduce"] and cfg["env"]["world_size"] == 2
    assert cfg["env"]["executor"] == "cpu" and cfg["env"]["topology"] == "cpu"
    reward_fn = env.unwrapped.reward_fn
    assert cfg["reward"]["name"] == reward_fn.name == "default"
    assert cfg["reward"]["config"] == pytest.approx(reward_fn.config)
    assert cfg["judge"]["config"]["trials"] == 1
    versions = cfg["versions"]
    for package in ("pkb-env", "torch", "gymnasium", "numpy", "python"):
        assert versions[package], package
    assert versions["pkb-env"] == pkb_env.__version__

    # wandb-core's own reader sees the same history
    leet = leet_history(run_dir)
    if leet is not None:
        assert len(leet) == len(rows)
        assert [h["item"].get("reward") for h in leet] == pytest.approx([row.get("reward") for row in rows])
        assert [h["item"].get("verdict") for h in leet] == [row.get("verdict") for row in rows]

    # the fake key appears nowhere in what the run wrote
    leaks = [p for p in root.rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert not leaks, f"WANDB_API_KEY value found in {leaks}"


def test_api_key_never_reaches_candidates(offline_wandb):
    """Also: a run passed in gets the env's config, is left running at close(); table_every=1 logs per step."""
    import wandb

    assert os.environ["WANDB_API_KEY"] == FAKE_KEY
    run = wandb.init(project="pkb-env-test", name="env-probe", config={"owner": "test"}, mode="offline",
                     dir=str(offline_wandb / "runs"), reinit="create_new")
    env = WandbLogger(make_env(max_turns=1), run=run, table_every=1)
    try:
        env.reset(seed=0)
        _, _, _, truncated, info = env.step(ENV_PROBE)
    finally:
        env.close()
    assert truncated and info["verdict"] == "runtime_error"
    feedback = info["feedback"]
    assert "env-probe: PATH present=True" in feedback
    assert "WANDB_API_KEY present=False; names=[]" in feedback
    assert "WANDB_API_KEY present=True" not in feedback and FAKE_KEY not in feedback
    assert any(flag.startswith("reads_environment") for flag in info["flags"])  # INFO only, not an exploit

    run.log({"after_close": 1})   # the caller's run is still open after env.close()
    run.finish()
    records = finished_log(run_directory(offline_wandb / "runs"))
    rows = history(records)
    assert [row["verdict"] for row in rows if "reward" in row] == ["runtime_error"]
    assert len([row for row in rows if "kernels.path" in row]) == 1   # after the step; not again at close
    assert rows[-1].get("after_close") == 1
    cfg = config(records)
    assert cfg["owner"] == "test" and cfg["reward"]["name"] == "default" and cfg["versions"]["torch"]
    leaks = [p for p in offline_wandb.rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert not leaks, f"WANDB_API_KEY value found in {leaks}"
