"""Reading an episode dataset folder back: every shard, checked against the schema, with errors that name the fix."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pkb_env.data.schema import SCHEMA
from pkb_env.data.writer import DATA


class DatasetError(ValueError):
    """The folder is not an episode dataset, or holds no rows; the message says which and the fix."""


def shard_paths(path: str | os.PathLike) -> list[Path]:
    """The dataset's shards (temporary files of writers still at work, or killed, are not shards)."""
    root = Path(path)
    if not root.exists():
        raise DatasetError(f"no such dataset folder: {root}; record one first, e.g. "
                           f"`pkb-env evaluate --agent reference --dataset {root}`")
    if not root.is_dir():
        raise DatasetError(f"{root} is a file, not a dataset folder; pass the folder that "
                           f"`pkb-env evaluate --dataset DIR` wrote (it holds {DATA}/*.parquet)")
    shards = sorted((root / DATA).glob("*.parquet")) if (root / DATA).is_dir() else []
    if not shards:
        raise DatasetError(f"{root} holds no rows ({root / DATA}/*.parquet: none); record some with "
                           f"`pkb-env evaluate --dataset {root}` or pkb_env.data.RecordEpisodes")
    return shards


def read_table(path: str | os.PathLike) -> pa.Table:
    """Every row of the dataset at `path` as one Arrow table with the schema (DatasetError when there is none)."""
    tables = []
    for shard in shard_paths(path):
        try:
            table = pq.read_table(shard)
        except (pa.ArrowInvalid, OSError) as exc:
            raise DatasetError(f"{shard} is not a readable parquet shard ({exc}); move it out of the folder") from None
        missing = [name for name in SCHEMA.names if name not in table.column_names]
        if missing:
            raise DatasetError(f"{shard} lacks column(s) {missing} of pkb_env/data/schema.py; it was not written "
                               f"by pkb_env.data (or by an older version): move it out of the folder")
        tables.append(table.select(SCHEMA.names).cast(SCHEMA))
    table = pa.concat_tables(tables)
    if table.num_rows == 0:
        raise DatasetError(f"{path} holds no rows; record some with `pkb-env evaluate --dataset {path}`")
    return table


def read_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every row as a dict (the builders of sft/pairs/export and the summary read these)."""
    return read_table(path).to_pylist()


def load(path: str | os.PathLike, split: str = "train"):
    """The dataset as a Hugging Face `datasets.Dataset` (the `data` extra), read with load_dataset("parquet")."""
    from pkb_env.extras import require

    datasets = require("datasets", "data", "loading an episode dataset")
    files = [str(p) for p in shard_paths(path)]
    return datasets.load_dataset("parquet", data_files={split: files}, split=split)
