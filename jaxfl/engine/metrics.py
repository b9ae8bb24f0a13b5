"""Append-only JSONL metrics: one line per evaluation, flushed as it is written."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path


def _jsonable(value):
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return str(value)
    return value


class MetricsWriter:
    """Writes dicts as JSON lines to ``path``; ``truncate_after(r)`` drops lines past round ``r``.

    Each line is flushed and fsync'ed, so a killed run keeps everything it reported.

    Example:
      >>> import pathlib, tempfile
      >>> path = pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl"
      >>> writer = MetricsWriter(path)
      >>> writer.write({"round": 1, "loss": 0.5}); writer.write({"round": 2, "loss": 0.4})
      >>> writer.truncate_after(1)                               # a run resumed from round 1
      >>> read_metrics(path)
      [{'round': 1, 'loss': 0.5}]
    """

    def __init__(self, path: str | os.PathLike | None):
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def truncate_after(self, round_index: int) -> None:
        """Keeps only lines with ``round <= round_index`` (used when resuming from a checkpoint)."""
        if self.path is None or not self.path.exists():
            return
        kept = [line for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("round", 0) <= round_index]
        self.path.write_text("".join(line + "\n" for line in kept))

    def write(self, record: dict) -> None:
        if self.path is None:
            return
        with self.path.open("a") as f:
            f.write(json.dumps({k: _jsonable(v) for k, v in record.items()}) + "\n")
            f.flush()
            os.fsync(f.fileno())


def read_metrics(path: str | os.PathLike) -> list[dict]:
    """All records of a JSONL metrics file.

    Example: :class:`MetricsWriter`.
    """
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
