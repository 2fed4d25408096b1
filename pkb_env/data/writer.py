"""`DatasetWriter`: appends rows to an episode dataset folder as parquet shards (docs/data.md, "The folder").

    DIR/README.md                         the dataset card (schema, how to load it)
    DIR/data/part-<run>-<n>.parquet       the shards; each belongs to one writer (one run of one process)

Safe from several processes and runs at once: a writer only ever writes shards named after its own run id,
and each shard is written whole to a temporary file beside it (`.part-...parquet.<pid>.tmp`, a name no
`*.parquet` pattern matches), flushed to disk, then renamed over the shard (`os.replace`, atomic on POSIX).
A reader sees the previous version of a shard or the new one, never half of one; a process killed mid-write
leaves at most its temporary file, which readers ignore and the next writer in the folder removes once its
process is gone. By default every row is on disk before `add` returns (`flush_every=1`: a step takes a
second or more, a shard's rewrite milliseconds), so a killed run loses at most the row being added.

The same step judged again in one run (the same task, size, code and judge config: schema.DEDUPE_KEY) is not
a new row: the first row's `count` goes up. Counts are per run; two runs that judge the same code each
have a row.
"""
from __future__ import annotations

import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

from pkb_env.data.card import card_text
from pkb_env.data.schema import DEDUPE_KEY, SCHEMA

DATA = "data"
TMP = re.compile(r"^\.part-.*\.parquet\.(\d+)\.tmp$")


def new_run_id() -> str:
    """Sortable by time, unique across processes and machines: 20261202T135501-<pid>-<random>."""
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class DatasetWriter:
    """Append rows (dicts with the schema's columns) to the dataset folder `path` (made if missing).

    `shard_rows`: rows per shard before the next one starts (a shard is rewritten whole at each flush, so
    this bounds the bytes one flush writes). `flush_every`: rows buffered before a flush (1: every row).
    Thread-safe; one writer per process and run (`run_id`, made here unless given).
    """

    def __init__(self, path: str | os.PathLike, run_id: str | None = None, shard_rows: int = 64,
                 flush_every: int = 1):
        if not isinstance(shard_rows, int) or shard_rows < 1 or not isinstance(flush_every, int) or flush_every < 1:
            raise ValueError(f"shard_rows and flush_every must be positive integers, got {shard_rows!r}, "
                             f"{flush_every!r}")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"dataset folder {self.path} is a file; pass a folder (made if missing)")
        self.data = self.path / DATA
        self.data.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id or new_run_id()
        self.shard_rows, self.flush_every = shard_rows, flush_every
        self._lock = threading.Lock()
        self._shards: list[Path] = []          # this run's shards, in order
        self._current: list[dict[str, Any]] = []  # rows of the last shard
        self._index: dict[tuple, tuple[int, int]] = {}   # dedupe key -> (shard, row)
        self._pending = 0                      # rows added since the last flush
        self.rows = 0                          # distinct rows written by this writer
        self.steps = 0                         # steps added (duplicates included)
        self._closed = False
        remove_stale_temporaries(self.data)
        _write_atomic(self.path / "README.md", card_text().encode())

    def add(self, row: Mapping[str, Any]) -> None:
        """Add one row; a duplicate of an earlier row of this run raises that row's count instead."""
        missing = [name for name in SCHEMA.names if name not in row]
        if missing:
            raise ValueError(f"a dataset row needs every column of pkb_env/data/schema.py; missing {missing}")
        key = tuple(row[name] for name in DEDUPE_KEY)
        with self._lock:
            if self._closed:
                raise ValueError(f"the dataset writer of {self.path} is closed")
            self.steps += 1
            where = self._index.get(key)
            if where is not None and where[0] < len(self._shards) - 1:
                self._bump_closed_shard(*where)
                return
            if where is not None:
                self._current[where[1]]["count"] += 1
            else:
                if not self._shards or len(self._current) >= self.shard_rows:
                    if self._pending:
                        self._flush()
                    self._shards.append(self.data / f"part-{self.run_id}-{len(self._shards):05d}.parquet")
                    self._current = []
                self._index[key] = (len(self._shards) - 1, len(self._current))
                self._current.append({**row, "run_id": self.run_id, "count": 1})
                self.rows += 1
            self._pending += 1
            if self._pending >= self.flush_every:
                self._flush()

    def flush(self) -> None:
        with self._lock:
            if self._pending:
                self._flush()

    def close(self) -> None:
        with self._lock:
            if not self._closed and self._pending:
                self._flush()
            self._closed = True

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- under the lock ----------------------------------------------------------------------------------
    def _flush(self) -> None:
        write_table_atomic(self._shards[-1], pa.Table.from_pylist(self._current, schema=SCHEMA))
        self._pending = 0

    def _bump_closed_shard(self, shard: int, row: int) -> None:
        """A duplicate of a row in a shard this writer has finished: that shard is rewritten with the count."""
        path = self._shards[shard]
        rows = pq.read_table(path, schema=SCHEMA).to_pylist()
        rows[row]["count"] += 1
        write_table_atomic(path, pa.Table.from_pylist(rows, schema=SCHEMA))


def write_table_atomic(path: Path, table: pa.Table) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    _replace_durably(tmp, path)


def _write_atomic(path: Path, data: bytes) -> None:
    if path.exists() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
    tmp.write_bytes(data)
    _replace_durably(tmp, path)


def _replace_durably(tmp: Path, path: Path) -> None:
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)   # the rename itself survives a crash of the machine
    finally:
        os.close(fd)


def remove_stale_temporaries(folder: Path) -> int:
    """Remove the temporary shards of writers whose process is gone (a run killed mid-write); their count."""
    removed = 0
    for entry in folder.iterdir():
        match = TMP.match(entry.name)
        if match and not _alive(int(match.group(1))):
            entry.unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
