"""Episode datasets (pkb_env.data, docs/data.md): `evaluate --dataset`, the JudgeService hook, the Gymnasium
wrapper, rows read back through `datasets`, safe appends from several processes, secrets, dedupe, the
`pkb-env data` commands and their outputs in TRL's trainers, and the expert-iteration recipe's toy run.

One dataset is recorded per module (the reference and a folder of mixed candidates through the real CLI,
real rank processes over gloo) and shared by the tests that read it."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import FAST, make_env
from pkb_env.entrypoints.cli import main
import pkb_env
from pkb_env.data import EpisodeRecorder, SCHEMA, DatasetWriter, read_rows
from pkb_env.entrypoints.gym import RecordEpisodes
from pkb_env.data.schema import schema_table
from pkb_env.record import EvaluationRecord
from pkb_env.rewards import load_reward
from pkb_env.service import JudgeService

CANDIDATES = resources.files("pkb_env.solutions").joinpath("examples")
ROOT = Path(__file__).resolve().parents[2]


def candidate(name: str) -> str:
    return CANDIDATES.joinpath(name).read_text()


def fast_config_file(folder: Path) -> Path:
    """conftest's FAST judge settings as an --config file, so the CLI judges as quickly as the other tests."""
    settings = {"trials": FAST.trials, "trial_timeout_s": FAST.trial_timeout_s, "build_timeout_s": FAST.build_timeout_s,
                "timing_timeout_s": FAST.timing_timeout_s, "protocol": dataclasses.asdict(FAST.protocol)}
    path = folder / "fast.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """`evaluate --dataset` twice into one folder: the reference on two tasks (2 samples each), then a file
    agent over mixed candidates (all_reduce wrong, all_gather correct but another code), 2 samples each."""
    root = tmp_path_factory.mktemp("recorded")
    dataset, config = root / "episodes", fast_config_file(root)
    common = ["--tasks", "all_reduce,all_gather", "--samples", "2", "--executor", "cpu", "--world-size", "2",
              "--config", str(config), "--dataset", str(dataset)]
    assert main(["evaluate", "--agent", "reference", "--out", str(root / "ref"), *common]) == 0
    mixed = root / "mixed"
    mixed.mkdir()
    (mixed / "all_reduce.py").write_text(candidate("all_reduce_double.py"))
    (mixed / "all_gather.py").write_text(candidate("all_gather_broadcasts.py"))
    assert main(["evaluate", "--agent", f"files:{mixed}", "--out", str(root / "files"), *common]) == 0
    return dataset


# Sequences cut to their last tokens for the trainers' two steps: a prompt (statement, reference, topology) is
# thousands of the tiny tokenizer's tokens, and the tiny model's attention over whole rows cost ~50 s a test on
# CPU; the answer, at the end, is what is trained.
TRAIN_TOKENS = 768


@pytest.fixture(scope="module")
def tiny():
    from pkb_env.agents.train_grpo import make_tiny_model, make_tiny_tokenizer

    tokenizer = make_tiny_tokenizer()
    return tokenizer, lambda: make_tiny_model(tokenizer, seed=0)


# -- recording and reading back ------------------------------------------------------------------------------
def test_evaluate_dataset_rows_round_trip_through_load_dataset(recorded):
    import datasets

    files = sorted(str(p) for p in (recorded / "data").glob("*.parquet"))
    assert len(files) == 2   # one shard per run
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert ds.features == datasets.Features.from_arrow_schema(SCHEMA)
    assert ds.num_rows == 4 and sum(ds["count"]) == 8   # 2 runs x 2 tasks; each code's 2 samples are one row
    rows = {(r["agent"], r["task"]): r for r in ds}
    assert set(rows) == {("reference", "all_reduce"), ("reference", "all_gather"),
                         (f"files:{recorded.parent / 'mixed'}", "all_reduce"),
                         (f"files:{recorded.parent / 'mixed'}", "all_gather")}
    ref, wrong = rows["reference", "all_reduce"], rows[f"files:{recorded.parent / 'mixed'}", "all_reduce"]
    assert ref["verdict"] == "correct" and ref["correct"] and ref["count"] == 2
    assert wrong["verdict"] == "wrong" and not wrong["correct"] and wrong["speedup"] is None
    assert "outputs differ from the reference" in wrong["feedback"]
    assert ref["pkb_id"] is not None and ref["family"] and ref["world_size"] == 2 and ref["executor"] == "cpu"
    assert ref["topology"] == "cpu" and ref["package_version"] == pkb_env.__version__ and ref["turn"] == 0
    assert [m["role"] for m in ref["prompt"]] == ["system", "user"] and "all_reduce" in ref["prompt"][1]["content"]
    assert ref["code"].strip() == ref["completion"].strip()   # the reference agent submits bare code
    assert ref["speedup"] > 0 and 0 < ref["roofline_fraction"] and ref["stage_seconds"]["verify"] > 0
    assert len({r["config_hash"] for r in ds}) == 1 and json.loads(ref["judge_config"])["trials"] == FAST.trials
    # the record column is the whole EvaluationRecord
    record = EvaluationRecord.from_dict(json.loads(ref["record"]))
    assert record.correct and record.task == "all_reduce" and record.feedback == ref["feedback"]
    # the reward and its terms are the ones evaluate's reward gave that record
    reward = load_reward("default")(record)
    assert ref["reward"] == pytest.approx(reward.value)
    assert {t["name"]: t["value"] if t["text"] is None else t["text"] for t in ref["reward_terms"]} == \
        pytest.approx(dict(reward.terms))


def test_the_card_and_the_docs_hold_the_schema_table(recorded):
    table = schema_table()
    assert table.count("\n") + 1 == len(SCHEMA) + 2   # header, rule, one line a column
    for name in SCHEMA.names:
        assert f"| {name} " in table, name
    assert table in (recorded / "README.md").read_text()
    assert table in (ROOT / "docs" / "data.md").read_text()


def test_service_hook_dedupes_and_a_driver_records_the_same_row(tmp_path):
    """JudgeService(recorder=) records every step (screened ones too); the same code twice is one row with
    count 2; a driver holding only the record's JSON (a pool's) builds the same row."""
    hook = EpisodeRecorder(tmp_path / "hook", agent="hooked")
    reference = candidate("all_reduce_ring.py")
    with JudgeService(FAST.replace(world_size=2, executor="cpu"), recorder=hook) as judge:
        first = judge.judge("all_reduce", reference)
        judge.judge("all_reduce", reference)
        session = judge.open("all_reduce", prestart=False)
        assert judge.screen(session, "no code here") is not None   # unparsable: decided by the screen
        topology = judge.info.topology
    hook.close()
    rows = read_rows(tmp_path / "hook")
    assert [(r["verdict"], r["count"]) for r in rows] == [("correct", 2), ("unparsable", 1)]
    assert rows[0]["prompt"][0]["role"] == "user" and rows[0]["agent"] == "hooked"

    driver = EpisodeRecorder(tmp_path / "driver", agent="hooked")
    sent = EvaluationRecord.from_dict(json.loads(json.dumps(first.to_dict())))   # as it crosses processes
    driver.record(sent, reference, rows[0]["prompt"], config=FAST.replace(world_size=2, executor="cpu"),
                  topology=topology)
    driver.close()
    (again,) = read_rows(tmp_path / "driver")
    differ = {"run_id", "episode_id", "recorded_at", "count"}
    assert {k: v for k, v in again.items() if k not in differ} == {k: v for k, v in rows[0].items() if k not in differ}


def test_writer_dedupes_across_shards_and_counts(recorded, tmp_path):
    row = read_rows(recorded)[0]
    with DatasetWriter(tmp_path / "d", shard_rows=1) as writer:
        for code in ("a", "b", "a", "a", "c", "b"):
            writer.add(dict(row, code_hash=code))
    rows = read_rows(tmp_path / "d")
    assert {r["code_hash"]: r["count"] for r in rows} == {"a": 3, "b": 2, "c": 1}
    assert len(list((tmp_path / "d" / "data").glob("*.parquet"))) == 3 and writer.steps == 6 and writer.rows == 3
    # another run is another count
    with DatasetWriter(tmp_path / "d") as other:
        other.add(dict(row, code_hash="a"))
    assert sorted(r["count"] for r in read_rows(tmp_path / "d") if r["code_hash"] == "a") == [1, 3]


WRITER_SCRIPT = """
import json, os, sys
from pkb_env.data.writer import DatasetWriter
template, name, n, pad, folder, shard_rows = sys.argv[1:]
row = json.load(open(template))
writer = DatasetWriter(folder, shard_rows=int(shard_rows))
for i in range(int(n)):
    writer.add(dict(row, code_hash=f"{name}-{i}", episode_id=f"{name}-{i}", completion=os.urandom(int(pad)).hex()))
    print(f"{name}-{i}", flush=True)   # on disk before add() returned
writer.close()
"""


def test_two_processes_append_and_one_killed_mid_write_loses_nothing(recorded, tmp_path):
    import datasets

    template, script, folder = tmp_path / "row.json", tmp_path / "writer.py", tmp_path / "shared"
    template.write_text(json.dumps(read_rows(recorded)[0]))
    script.write_text(WRITER_SCRIPT)
    # the victim writes big incompressible rows (most of its time is in writes) until it is killed
    victim = subprocess.Popen([sys.executable, str(script), str(template), "victim", "100000", "300000", str(folder), "6"],
                              stdout=subprocess.PIPE, text=True)
    steady = subprocess.Popen([sys.executable, str(script), str(template), "steady", "40", "100", str(folder), "16"],
                              stdout=subprocess.PIPE, text=True)
    confirmed = []
    while len(confirmed) < 15:
        confirmed.append(victim.stdout.readline().strip())
    # then kill it while it writes: as soon as its temporary shard exists (between its open and its rename)
    temporary = f".{victim.pid}.tmp"
    deadline = time.monotonic() + 30
    while not any(e.name.endswith(temporary) for e in os.scandir(folder / "data")) and time.monotonic() < deadline:
        pass
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    left = [p.name for p in (folder / "data").iterdir() if p.name.endswith(temporary)]
    assert left, "the kill did not land inside a write"
    steady_out, _ = steady.communicate(timeout=120)
    assert steady.returncode == 0 and len(steady_out.split()) == 40
    confirmed += victim.stdout.read().split()   # printed before the kill, read after
    victim.stdout.close()

    files = sorted(str(p) for p in (folder / "data").glob("*.parquet"))
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    ids = ds["episode_id"]
    assert len(ids) == len(set(ids)), "a row was written twice"
    steady_ids = {i for i in ids if i.startswith("steady-")}
    victim_ids = {i for i in ids if i.startswith("victim-")}
    assert steady_ids == {f"steady-{i}" for i in range(40)}
    assert set(confirmed) <= victim_ids, "a row confirmed on disk was lost"
    in_flight = {f"victim-{len(confirmed)}"}   # the one being added when the kill came, if it was written whole
    assert victim_ids <= set(confirmed) | in_flight
    print(f"victim killed mid-write ({left[0]}, {os.path.getsize(folder / 'data' / left[0])} bytes): {len(confirmed)} "
          f"rows confirmed, {len(victim_ids)} on disk; steady: {len(steady_ids)} of 40")
    # the dead writer's half-written temporary is not read, and the next writer in the folder removes it
    assert len(read_rows(folder)) == len(ids)
    DatasetWriter(folder).close()
    assert not [p for p in (folder / "data").iterdir() if p.name.endswith(temporary)]


def test_a_secret_echoed_by_a_candidate_is_not_in_the_dataset(tmp_path, monkeypatch):
    """RecordEpisodes over the env: a candidate that carries the judge's secret, prints it and raises with it;
    then the reference. Two turns of one episode, and the secret nowhere in the dataset."""
    secret = "pkb-test-secret-4f9c2e71d8a3"
    monkeypatch.setenv("PKB_DATA_TEST_API_KEY", secret)   # before the judge and the recorder collect secrets
    echo = (f"import torch\n\nLEAK = {secret!r}\n\n\ndef solution(tensor):\n    print('leaking', LEAK)\n"
            f"    raise RuntimeError('the key is ' + LEAK)\n")
    env = RecordEpisodes(make_env(world_size=2, max_turns=4), tmp_path / "ds", agent="leaker")
    try:
        obs, _ = env.reset(seed=7)
        _, _, _, _, info = env.step(echo)
        assert info["verdict"] == "runtime_error"
        env.step(obs["reference"])
    finally:
        env.close()
    table = pq.read_table(sorted((tmp_path / "ds" / "data").glob("*.parquet"))[0])
    text = json.dumps(table.to_pylist())
    assert secret not in text
    rows = table.to_pylist()
    assert "[redacted]" in rows[0]["completion"] and "[redacted]" in rows[0]["code"]
    assert [r["turn"] for r in rows] == [0, 1] and len({r["episode_id"] for r in rows}) == 1
    assert [r["verdict"] for r in rows] == ["runtime_error", "correct"] and rows[0]["seed"] == 7
    assert "[redacted]" in rows[1]["prompt"][1]["content"]   # turn 1's prompt carries turn 0's feedback


# -- the commands ----------------------------------------------------------------------------------------------
def test_data_summary_counts_and_plot(recorded, capsys, tmp_path):
    assert main(["data", "summary", str(recorded), "--plot", str(tmp_path / "plot.png")]) == 0
    out = capsys.readouterr().out
    assert "4 rows (8 judged steps) from 2 run(s), 2 task(s)" in out
    verdicts, best = out.split("verdicts per task")[1].split("best correct per task")
    assert verdicts.splitlines()[1].split() == ["task", "steps", "correct", "wrong"]
    counts = {line.split()[0]: line.split()[1:] for line in verdicts.splitlines() if line.startswith("all_")}
    assert counts == {"all_reduce": ["4", "2", "2"], "all_gather": ["4", "4", "0"]}
    codes = {line.split()[0]: line.split()[1] for line in best.splitlines() if line.startswith("all_")}
    assert codes == {"all_reduce": "1", "all_gather": "2"}   # distinct correct codes
    assert f"wrote {tmp_path / 'plot.png'}" in out
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sft_rows_load_in_trl_sft_trainer(recorded, tmp_path, tiny, capsys):
    import datasets
    import trl

    assert main(["data", "sft", str(recorded), "--out", str(tmp_path / "sft")]) == 0
    assert "wrote 2 SFT rows from 4 rows" in capsys.readouterr().out
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "sft" / "train.parquet"), split="train")
    assert ds.column_names[0] == "messages" and sorted(ds["task"]) == ["all_gather", "all_reduce"]
    for row in ds:
        assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
        assert "def solution" in row["messages"][-1]["content"]
    # a threshold no solution meets: a clear error
    assert main(["data", "sft", str(recorded), "--out", str(tmp_path / "none"), "--min-speedup", "1000"]) == 2
    assert "no correct solution at speedup >= 1000" in capsys.readouterr().err
    tokenizer, model = tiny
    config = trl.SFTConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, use_cpu=True,
                           report_to=[], logging_steps=1, save_strategy="no", seed=0, max_length=TRAIN_TOKENS,
                           truncation_mode="keep_end")
    trainer = trl.SFTTrainer(model=model(), processing_class=tokenizer, train_dataset=ds, args=config)
    assert trainer.train().global_step == 2


def test_pairs_load_in_trl_dpo_trainer(recorded, tmp_path, tiny, capsys):
    import copy

    import datasets
    import trl

    assert main(["data", "pairs", str(recorded), "--out", str(tmp_path / "pairs.parquet")]) == 0
    assert "chosen/rejected pairs" in capsys.readouterr().out
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "pairs.parquet"), split="train")
    assert {"prompt", "chosen", "rejected"} <= set(ds.column_names)
    by_task = {}
    for row in ds:
        by_task.setdefault(row["task"], []).append(row)
        assert row["chosen_verdict"] == "correct" and row["chosen"][0]["role"] == "assistant"
        assert row["chosen"][0]["content"] != row["rejected"][0]["content"]
    # all_reduce: the reference over the doubled sum (wrong), with the same prompt
    assert [(r["rejected_verdict"]) for r in by_task["all_reduce"]] == ["wrong"]
    assert "* 2" in by_task["all_reduce"][0]["rejected"][0]["content"]
    tokenizer, model = tiny
    policy = model()
    config = trl.DPOConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, use_cpu=True,
                           report_to=[], logging_steps=1, save_strategy="no", seed=0, max_length=TRAIN_TOKENS,
                           truncation_mode="keep_end")
    trainer = trl.DPOTrainer(model=policy, ref_model=copy.deepcopy(policy), processing_class=tokenizer,
                             train_dataset=ds, args=config)
    assert trainer.train().global_step == 2


def test_verl_export_has_verls_columns(recorded, tmp_path, capsys):
    assert main(["data", "export", str(recorded), "--format", "verl", "--out", str(tmp_path / "verl")]) == 0
    table = pq.read_table(tmp_path / "verl" / "train.parquet")
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    rows = table.to_pylist()
    assert len(rows) == 2 and {r["extra_info"]["task"] for r in rows} == {"all_reduce", "all_gather"}
    for row in rows:
        assert row["reward_model"]["style"] == "rule" and row["data_source"] == "pkb_env"
        target = json.loads(row["reward_model"]["ground_truth"])
        assert target == {"task": row["extra_info"]["task"], "preset": "tiny", "dtype": "float32", "world_size": 2}
        assert row["prompt"][-1]["role"] == "user" and row["extra_info"]["steps"] == 4
    assert [r["extra_info"]["index"] for r in rows] == [0, 1]


@pytest.mark.parametrize("argv, message", [
    (["data", "summary", "{missing}"], "no such dataset folder"),
    (["data", "sft", "{empty}", "--out", "{tmp}/o"], "holds no rows"),
    (["data", "pairs", "{file}", "--out", "{tmp}/o"], "is a file, not a dataset folder"),
    (["data", "export", "{empty}", "--format", "trl", "--out", "{tmp}/o"], "unknown export format 'trl'; choose one of verl"),
])
def test_bad_input_names_the_problem_and_the_fix(tmp_path, capsys, argv, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a_file").write_text("x")
    where = {"missing": tmp_path / "nope", "empty": tmp_path / "empty", "file": tmp_path / "a_file", "tmp": tmp_path}
    assert main([a.format(**where) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and ("pkb-env evaluate" in err or "choose one of" in err), err


def test_data_commands_without_the_extra_name_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)   # how Python spells "not installed" for an import
    assert main(["data", "summary", str(tmp_path)]) == 2
    assert "pip install 'pkb-env[data]'" in capsys.readouterr().err


# -- the recipe ------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_expert_iteration_tiny_raises_the_fraction_correct(tmp_path):
    """In this process (TRL is imported once for the module): 2 rounds of 6 samples per task, one fine-tune."""
    from pkb_env.agents.expert_iteration import main as expert_iteration

    start = time.monotonic()
    history = expert_iteration(["--tiny", "--rounds", "2", "--k", "6", "--log-dir", str(tmp_path)])
    (run,) = tmp_path.iterdir()
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    assert rounds == json.loads(json.dumps(history))
    print(f"fraction correct {[r['frac_correct'] for r in rounds]} in {time.monotonic() - start:.0f}s")
    assert len(rounds) == 2 and rounds[0]["sft_rows"] == 2
    assert rounds[1]["frac_correct"] > rounds[0]["frac_correct"] and rounds[1]["frac_correct"] >= 0.9
    rows = read_rows(run / "episodes")
    assert sum(r["count"] for r in rows) == 24 and {r["completion"] for r in rows} <= set("ABCD")
