"""The dataset card (README.md) of an episode dataset folder: what it is, how to load it, its schema."""
from __future__ import annotations

from pkb_env.data.schema import schema_table

CARD = """---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/*.parquet
tags:
- pkb-env
- code
- gpu-kernels
---
# pkb-env episodes

Judged steps of pkb-env (a Gymnasium environment for multi-GPU kernels): one row
per step, written by `pkb_env.data` (`pkb-env evaluate --dataset DIR`, the `RecordEpisodes` wrapper,
`JudgeService(recorder=...)`, or a driver's `EpisodeRecorder`). The judge user's secrets are redacted.

    import datasets
    rows = datasets.load_dataset("parquet", data_files="DIR/data/*.parquet", split="train")

`pkb-env data summary DIR` counts them; `pkb-env data sft|pairs|export` turns them into SFT, DPO and verl
data (docs/data.md in the pkb-env repository).

## Schema

{table}
"""


def card_text() -> str:
    return CARD.replace("{table}", schema_table())
