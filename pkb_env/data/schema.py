"""The schema of an episode dataset: one row per judged step, in one place (docs/data.md, "Schema").

| column              | type                              | what                                                          |
|---------------------|-----------------------------------|---------------------------------------------------------------|
| run_id              | string                            | the writer that recorded the row (one per process and run)    |
| episode_id          | string                            | the episode (a sample of `evaluate` is an episode of one turn)  |
| turn                | int32                             | 0-based turn within the episode                               |
| recorded_at         | string                            | UTC time the step was recorded, ISO 8601                      |
| task                | string                            | the task's name, e.g. "all_reduce"                            |
| pkb_id              | int32, null                       | its ParallelKernelBench problem number, where it has one      |
| family              | string                            | the task's family (contract/families.py)                      |
| preset              | string                            | problem size: tiny, bench, large                              |
| dtype               | string                            | element type judged                                           |
| world_size          | int32                             | ranks the candidate ran on                                    |
| executor            | string                            | cpu, cuda, cuda-emulated                                      |
| hardware            | string                            | the executor's hardware fingerprint                           |
| topology            | string                            | the topology config in force (configs/topologies/)            |
| performance_available | bool                            | whether times mean anything on that executor                  |
| prompt              | list<struct<role, content>>       | the chat messages the completion answered                     |
| completion          | string                            | the raw completion (the action), secrets redacted             |
| code                | string, null                      | the module the parser extracted (null: none was found)        |
| code_hash           | string                            | sha256 (32 hex) of `code`, else of `completion`               |
| verdict             | string                            | flagged, unparsable, build_error, runtime_error, wrong, correct |
| stage               | string                            | the last stage reached                                        |
| correct             | bool                              | verdict is correct and no exploit flag                        |
| exploit             | bool                              | an exploit flag was raised                                    |
| error               | string, null                      | the one-line error of a failed step                           |
| flags               | list<string>                      | every flag as "code: message"                                 |
| speedup             | float64, null                     | reference time / candidate time (null: not measured, trusted or correct) |
| roofline_fraction   | float64, null                     | cost-model bound / measured time                              |
| time_s              | float64, null                     | the candidate's time per call                                 |
| reference_s         | float64, null                     | the reference's time per call, same protocol                  |
| reward              | float64                           | the reward the step got                                       |
| reward_terms        | list<struct<name, value, text>>   | every term of it (numbers in `value`, words in `text`)        |
| feedback            | string                            | the judge's feedback to the agent                             |
| stage_seconds       | struct<parse, ..., roofline>      | the candidate's seconds per stage (null where not reached)    |
| wall_s              | float64                           | the whole step, the reference's part included                 |
| agent               | string, null                      | the agent or model that wrote the completion                  |
| seed                | int64, null                       | the seed of the episode or run, where one was given           |
| package_version     | string                            | pkb-env's version                                             |
| config_hash         | string                            | sha256 (16 hex) of the judge config (JudgeConfig), cache_dir left out |
| judge_config        | string                            | that config as JSON                                           |
| count               | int64                             | times this (task, preset, dtype, code, config) was judged in the run |
| record              | string                            | the full EvaluationRecord as JSON (`EvaluationRecord.from_dict`) |

Maps are not used: Hugging Face `datasets` has no type for Arrow maps, so the reward's terms are a list of
named values and the stage times a struct with one field per stage.
"""
from __future__ import annotations

import pyarrow as pa

from pkb_env.record import Stage

STAGES = tuple(s.value for s in Stage if s is not Stage.DONE)
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
TERM = pa.struct([("name", pa.string()), ("value", pa.float64()), ("text", pa.string())])

SCHEMA = pa.schema([
    ("run_id", pa.string()),
    ("episode_id", pa.string()),
    ("turn", pa.int32()),
    ("recorded_at", pa.string()),
    ("task", pa.string()),
    ("pkb_id", pa.int32()),
    ("family", pa.string()),
    ("preset", pa.string()),
    ("dtype", pa.string()),
    ("world_size", pa.int32()),
    ("executor", pa.string()),
    ("hardware", pa.string()),
    ("topology", pa.string()),
    ("performance_available", pa.bool_()),
    ("prompt", pa.list_(MESSAGE)),
    ("completion", pa.string()),
    ("code", pa.string()),
    ("code_hash", pa.string()),
    ("verdict", pa.string()),
    ("stage", pa.string()),
    ("correct", pa.bool_()),
    ("exploit", pa.bool_()),
    ("error", pa.string()),
    ("flags", pa.list_(pa.string())),
    ("speedup", pa.float64()),
    ("roofline_fraction", pa.float64()),
    ("time_s", pa.float64()),
    ("reference_s", pa.float64()),
    ("reward", pa.float64()),
    ("reward_terms", pa.list_(TERM)),
    ("feedback", pa.string()),
    ("stage_seconds", pa.struct([(name, pa.float64()) for name in STAGES])),
    ("wall_s", pa.float64()),
    ("agent", pa.string()),
    ("seed", pa.int64()),
    ("package_version", pa.string()),
    ("config_hash", pa.string()),
    ("judge_config", pa.string()),
    ("count", pa.int64()),
    ("record", pa.string()),
])

COLUMNS = tuple(SCHEMA.names)
# what makes two steps of one run the same step (recorded once, with a count)
DEDUPE_KEY = ("task", "preset", "dtype", "code_hash", "config_hash")


def schema_table() -> str:
    """The docstring's table (docs/data.md holds the same; tests/doors/test_data.py keeps the three in step)."""
    return __doc__.split("\n\n")[1]
