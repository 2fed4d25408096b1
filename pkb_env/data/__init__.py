"""Training data from judged episodes: every judged step a row of a parquet dataset (docs/data.md).

    from pkb_env.data import EpisodeRecorder, load
    from pkb_env.entrypoints.gym import RecordEpisodes
    env = RecordEpisodes(gymnasium.make("pkb_env/ParallelKernel-v0"), "episodes/")   # the env's steps
    client = LocalClient(config, recorder=EpisodeRecorder("episodes/"))             # a judge's steps
    recorder.record(record, completion, messages, config=...)                        # a driver's records
    rows = load("episodes/")                                                         # a datasets.Dataset

One module a job: the schema (schema.py), a row from a record (rows.py), the shards on disk (writer.py),
the dataset card (card.py), reading back (reader.py), the recorder (recorder.py), SFT / DPO / verl data
(recipes.py), the summary and its plot (summary.py); the Gymnasium wrapper that records an env's steps is a door's
(pkb_env/entrypoints/gym/recording.py). Needs the `data`
extra (pyarrow, datasets): pip install 'pkb-env[data]'.
"""
from pkb_env.extras import require

require("pyarrow", "data", "pkb_env.data (episode datasets)")

from pkb_env.data.reader import DatasetError, load, read_rows, read_table  # noqa: E402
from pkb_env.data.recorder import EpisodeRecorder, Recorder  # noqa: E402
from pkb_env.data.schema import COLUMNS, SCHEMA  # noqa: E402
from pkb_env.data.writer import DatasetWriter  # noqa: E402

__all__ = ["EpisodeRecorder", "Recorder", "DatasetWriter", "DatasetError", "SCHEMA", "COLUMNS",
           "load", "read_rows", "read_table"]
