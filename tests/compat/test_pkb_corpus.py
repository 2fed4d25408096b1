"""benchmarks/pkb_corpus.py's bookkeeping on CPU ranks (issue 44): a fake extracted corpus of tiny PKB-format files
read as a plain folder, the --json file read back by --resume, builds told apart by why they did not finish, and
the judging loop (each file timed right after it is judged correct, but only once the builds beside it are over;
a step the time limit stops left unjudged)
run with CPU judges in place of the GPU's (gpu_configs)."""
from __future__ import annotations

import concurrent.futures
import json
import sys
import textwrap
import threading
import time

import pytest

from conftest import FAST, ROOT
from pkb_env.compat.checkout import CORPUS, Checkout, CheckoutError

sys.path.insert(0, str(ROOT / "benchmarks"))
import pkb_corpus  # noqa: E402

GPT = CORPUS[0]   # solutions_cuda_bf16_h100_8_openai_gpt-5.5

BROADCAST = """
    import torch.distributed as dist

    def solution(tensor, src=0):
        out = tensor.clone()
        dist.broadcast(out, src=src)
        return out
"""
REDUCE_WRONG = """
    def solution(tensor, dst=0):
        return tensor.clone()          # never reduced: dst keeps its own
"""
ALLREDUCE_HANGS = """
    import time

    def solution(tensor):
        time.sleep(600)
        return tensor
"""
REFUSED_BUILD = '''
    from utils.cuda_helpers import compile_cuda_extension

    SOURCE = '#include "/etc/passwd"\\n'
    ext = compile_cuda_extension("sneaky", SOURCE)

    def solution(tensor, dst=0):
        return tensor
'''


def fake_corpus(root, files: dict[str, str]):
    """An extracted corpus (pkb_corpus.py --extract's layout): GPT-5.5's folder holding `files`."""
    folder = root / GPT.name
    folder.mkdir(parents=True)
    for name, code in files.items():
        (folder / name).write_text(textwrap.dedent(code))
    return pkb_corpus.corpus(Checkout(root), ["gpt"])


def test_a_plain_folder_of_the_extracted_corpus_is_read_mapped_and_ordered(tmp_path):
    entries = fake_corpus(tmp_path, {"4_reduce_cuda.py": REDUCE_WRONG, "47_fsdp_adamw_sharded_cuda.py": "x = 1\n",
                                     "3_broadcast_cuda.py": BROADCAST})
    assert [(e.file.path.name, e.file.task) for e in entries] == [
        ("3_broadcast_cuda.py", "broadcast"), ("4_reduce_cuda.py", "reduce"), ("47_fsdp_adamw_sharded_cuda.py", None)]
    assert entries[1].source == textwrap.dedent(REDUCE_WRONG)
    assert entries[1].key == f"{GPT.name}/4_reduce_cuda.py" and entries[1].folder == GPT
    with pytest.raises(CheckoutError, match="has no folder solutions_cuda_bf16_h100_8_anthropic"):
        pkb_corpus.corpus(Checkout(tmp_path), ["opus"])


def test_resume_reads_back_the_last_line_of_each_file_and_skips_a_line_cut_by_a_kill(tmp_path):
    entries = fake_corpus(tmp_path / "corpus", {"4_reduce_cuda.py": REDUCE_WRONG, "3_broadcast_cuda.py": BROADCAST})
    broadcast, reduce = entries
    path = tmp_path / "state" / "corpus.jsonl"
    results = pkb_corpus.Results(path, resume=False)
    reduce.verdict, reduce.pkb_rule, reduce.seconds = "correct", True, 2.0
    results.write(reduce)                                  # judged ...
    reduce.speedup, reduce.timed = 1.25, True
    results.write(reduce)                                  # ... then timed: the later line wins
    results.close()
    with path.open("a") as out:
        out.write('{"key": "' + broadcast.key + '", "verdict": "wro')   # killed mid-line

    again = fake_corpus(tmp_path / "corpus2", {"4_reduce_cuda.py": REDUCE_WRONG, "3_broadcast_cuda.py": BROADCAST})
    results = pkb_corpus.Results(path, resume=True)
    assert results.restore(again) == 1
    broadcast, reduce = again
    assert (reduce.verdict, reduce.pkb_rule, reduce.seconds, reduce.timed, reduce.speedup, reduce.restored) == (
        "correct", True, 2.0, True, 1.25, True)
    assert not broadcast.judged and not broadcast.restored    # judged again by this call
    results.write(broadcast)
    results.close()
    assert len(path.read_text().splitlines()) == 4            # appended, the earlier lines kept

    fixed = fake_corpus(tmp_path / "corpus3", {"4_reduce_cuda.py": REDUCE_WRONG})   # --again gpt:4: a fix to re-judge
    assert pkb_corpus.Results(path, resume=True).restore(fixed, again="opus:4,gpt:3") == 1 and fixed[0].restored
    assert pkb_corpus.Results(path, resume=True).restore(fixed, again="gpt:4") == 0


def test_a_build_stopped_by_the_deadline_is_not_counted_as_failed():
    assert pkb_corpus.build_outcome(None, until=100.0, now=99.9) == "built"
    assert pkb_corpus.build_outcome("the build took longer than 30 s and was stopped", 100.0, 99.5) == "stopped"
    assert pkb_corpus.build_outcome("error: expected ';'", 100.0, 50.0) == "failed: error: expected ';'"


def test_prebuild_counts_a_refused_build_as_failed_and_builds_nothing_past_the_deadline(tmp_path):
    entries = fake_corpus(tmp_path, {"4_reduce_cuda.py": REFUSED_BUILD})
    config = FAST.replace(executor="cpu", world_size=1, pkb=True)
    builds = pkb_corpus.prebuild(entries, 1, float("inf"), config)
    assert (builds.built, builds.failed, builds.stopped, builds.not_started) == (0, 1, 0, 0)
    assert builds.failures[0].startswith("sneaky: ") and "1 failed (build errors)" in str(builds)
    late = pkb_corpus.prebuild(entries, 1, time.monotonic(), config)
    assert (late.built, late.failed, late.stopped, late.not_started) == (0, 0, 0, 1)


class Rows:
    """A dataset recorder that keeps what it is given (pkb_env.data.EpisodeRecorder's `record`)."""

    def __init__(self):
        self.rows = []

    def record(self, record, completion, messages=None, **meta):
        self.rows.append((record.task, record.verdict.value, meta.get("agent")))


def cpu_configs():
    """gpu_configs' two judges on CPU ranks: correctness at world size 2, speed at 1."""
    return {"judge": FAST.replace(executor="cpu", world_size=2, pkb=True, calibration="cached"),
            "time": FAST.replace(executor="cpu", world_size=1, pkb=True, calibration="cached")}


def test_no_step_starts_with_less_than_the_minimum_left(tmp_path):
    entries = fake_corpus(tmp_path, {"3_broadcast_cuda.py": BROADCAST, "4_reduce_cuda.py": REDUCE_WRONG})
    entries[0].verdict = "correct"   # judged by an earlier call, not timed yet
    path = tmp_path / "corpus.jsonl"
    results = pkb_corpus.Results(path, resume=False)
    left = pkb_corpus.judge_all(entries, cpu_configs(), None, results, time.monotonic() + 10, min_left=15)
    results.close()
    assert left == {"to judge": 1, "to time": 1} and path.read_text() == ""


@pytest.mark.slow   # the judge starts, and closing waits for its start to end (about 12 s on the 2-core machine)
def test_a_step_running_at_the_time_limit_is_stopped_and_its_file_left_for_the_next_call(tmp_path):
    entries = fake_corpus(tmp_path, {"1_allreduce_cuda.py": ALLREDUCE_HANGS, "3_broadcast_cuda.py": BROADCAST})
    path = tmp_path / "corpus.jsonl"
    results, rows = pkb_corpus.Results(path, resume=False), Rows()
    recorder = pkb_corpus.ByModel(rows)
    left = pkb_corpus.judge_all(entries, cpu_configs(), recorder, results, time.monotonic() + 3, min_left=0)
    results.close()
    assert left == {"to judge": 2, "to time": 0}            # the hung one stopped, the next one never started
    assert path.read_text() == "" and rows.rows == [] and recorder.muted
    assert all(e.verdict is None and not e.judged for e in entries)


@pytest.mark.slow   # two CPU judges start (about 12 s on the shared 2-core machine)
def test_while_builds_run_only_ready_files_are_judged_then_each_correct_one_is_timed_at_once(tmp_path):
    entries = fake_corpus(tmp_path, {"3_broadcast_cuda.py": BROADCAST, "4_reduce_cuda.py": REFUSED_BUILD})
    broadcast, reduce = entries
    config = FAST.replace(executor="cpu", world_size=1, pkb=True)
    builds = pkb_corpus.Prebuild(entries, 1, float("inf"), config)   # not started: the test plays its builder
    assert list(builds.needs) == [broadcast.key, reduce.key] and builds.needs[broadcast.key] == []
    builder = concurrent.futures.Future()
    builds.futures = [builder]                                        # a build in flight: reduce's extension
    path = tmp_path / "corpus.jsonl"
    results, rows = pkb_corpus.Results(path, resume=False), Rows()
    judging = threading.Thread(target=pkb_corpus.judge_all,
                               args=(entries, cpu_configs(), pkb_corpus.ByModel(rows), results, float("inf")),
                               kwargs={"builds": builds})
    judging.start()
    try:
        deadline = time.monotonic() + 120
        while not path.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert [(r["file"], r["verdict"], r["timed"]) for r in lines] == [("3_broadcast_cuda.py", "correct", False)]
        assert not reduce.judged
    finally:
        with builds.changed:                                          # the build ends: refused by the compiler
            builds.outcomes[builds.needs[reduce.key][0]] = "failed: error: no such file"
            builds.changed.notify_all()
        builder.set_result(None)
        judging.join(timeout=180)
        results.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["file"], r["verdict"], r["timed"]) for r in lines] == [       # the builds over: each file in
        ("3_broadcast_cuda.py", "correct", False), ("3_broadcast_cuda.py", "correct", True),   # turn, timed at
        ("4_reduce_cuda.py", "build_error", False)]                                           # once if correct
    assert builds.result().failed == 1
    assert [(task, agent) for task, _, agent in rows.rows] == [("broadcast", "GPT-5.5 (cuda)")] * 2 + [
        ("reduce", "GPT-5.5 (cuda)")]                                        # every step a row, named by model


ZERO1_RAISES = """
    def solution(X_local, y_local, W1, b1, W2, b2, exp_avg_part, exp_avg_sq_part, lr, beta1, beta2, eps, step):
        raise RuntimeError("not written yet")
"""
RFFT_RAISES = """
    def solution(x, s, dim, norm="ortho", group=None):
        raise RuntimeError("not written yet")
"""


@pytest.mark.slow   # a CPU judge starts (about 8 s on the shared 2-core machine)
def test_a_file_the_correctness_run_cannot_size_is_judged_and_timed_in_one_step_by_the_timing_judge(tmp_path):
    entries = fake_corpus(tmp_path, {"42_zero1_optimizer_shard_cuda.py": ZERO1_RAISES,
                                     "60_physicsnemo_distributed_rfft_cuda.py": RFFT_RAISES})
    # W = 3: zero1's N = 32 and the FFT's X = 16 do not split over 3 ranks; the FFT takes no bfloat16
    configs = {"judge": FAST.replace(executor="cpu", world_size=3, pkb=True, calibration="cached", dtype="bfloat16"),
               "time": FAST.replace(executor="cpu", world_size=1, pkb=True, calibration="cached", dtype="bfloat16")}
    path = tmp_path / "corpus.jsonl"
    results = pkb_corpus.Results(path, resume=False)
    left = pkb_corpus.judge_all(entries, configs, None, results, float("inf"))
    results.close()
    assert left == {"to judge": 0, "to time": 0}
    zero1, rfft = [json.loads(line) for line in path.read_text().splitlines()]
    assert (zero1["screen"], zero1["pkb_verdict"], zero1["timed"], zero1["speedup"]) == ("", "runtime_error", True,
                                                                                          None)
    assert zero1["judged_at"].startswith("W=1 (cpu): ") and "world size 3" in zero1["judged_at"]
    assert "not written yet" in zero1["why"] and zero1["dtype"] == ""
    assert (rfft["screen"], rfft["verdict"], rfft["dtype"]) == ("", "runtime_error", "the task's own")


def test_a_lazy_build_the_compiler_refused_counts_as_a_build_error_in_the_table(tmp_path):
    [entry] = fake_corpus(tmp_path, {"4_reduce_cuda.py": REDUCE_WRONG})
    entry.verdict = "runtime_error"
    entry.why = "ranks 0, 1 raised during trials: CompileError: building extension 'ext' failed: error: ..."
    assert pkb_corpus.outcome(entry) == "build_error"
    entry.why = "rank 0 raised during trials: TypeError: launch(): incompatible function arguments"
    assert pkb_corpus.outcome(entry) == "runtime_error"
    entry.verdict, entry.why, entry.untimed = "correct", "", "wrong: ; WRONG: outputs of timed calls differ"
    assert pkb_corpus.outcome(entry) == "wrong"      # the trials passed, the timed calls did not


def test_files_judged_by_an_earlier_call_but_not_timed_are_built_too(tmp_path):
    """A fresh machine's cache is empty: a file a call judged correct and left untimed must be built ahead by the
    next one, or its timing step builds inside its first call (65-76 s each on one H100); a file timed, or not
    correct by any statement, needs nothing."""
    entries = fake_corpus(tmp_path, {"2_reduce_cuda.py": REFUSED_BUILD, "3_broadcast_cuda.py": REFUSED_BUILD,
                                     "4_reduce_cuda.py": REFUSED_BUILD, "5_all_gather_cuda.py": REFUSED_BUILD})
    untimed, timed, wrong, unjudged = entries
    untimed.verdict = timed.verdict = "correct"
    wrong.verdict, wrong.pkb_verdict = "wrong", None
    timed.timed = True
    builds = pkb_corpus.Prebuild(entries, 1, float("inf"))
    assert list(builds.needs) == [unjudged.key, untimed.key]     # those to judge first
    assert builds.needs[untimed.key] and builds.requests == builds.needs[unjudged.key]   # one extension, asked twice
