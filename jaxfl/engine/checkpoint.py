"""Orbax checkpoints of a run: the algorithm state plus a small JSON of run metadata."""
from __future__ import annotations

import os
from pathlib import Path

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    """Synchronous orbax checkpoints under ``directory`` (keeps the newest ``max_to_keep``).

    Saves are synchronous and atomic (orbax writes to a temporary directory and renames), so a run
    killed at any point leaves its last completed checkpoint readable.

    Example:
      >>> import tempfile, jax.numpy as jnp
      >>> checkpoints = Checkpointer(tempfile.mkdtemp())
      >>> checkpoints.save(3, {"w": jnp.ones(2)}, {"round": 3})
      >>> state, meta = checkpoints.restore(checkpoints.latest_step(), {"w": jnp.zeros(2)})
      >>> state["w"].tolist(), meta
      ([1.0, 1.0], {'round': 3})
      >>> checkpoints.close()
    """

    def __init__(self, directory: str | os.PathLike, max_to_keep: int = 2):
        self.directory = Path(directory).absolute()
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, enable_async_checkpointing=False),
        )

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state, meta: dict) -> None:
        self._manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                         meta=ocp.args.JsonSave(meta)), force=True)
        self._manager.wait_until_finished()

    def restore(self, step: int, like_state):
        """Restores ``(state, meta)`` of ``step`` into the structure and shardings of ``like_state``."""
        abstract = jax.tree_util.tree_map(ocp.utils.to_shape_dtype_struct, like_state)
        try:
            out = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                                      meta=ocp.args.JsonRestore()))
        except Exception as error:  # orbax's, tensorstore's and json's own errors for a damaged checkpoint
            raise ValueError(f"checkpoint {self.directory / str(step)} (round {step}) cannot be restored: "
                             f"{type(error).__name__}: {str(error)[:300]}; it is truncated, corrupt or from another "
                             "model: move it away to start the run over") from error
        if not isinstance(out.meta, dict) or "round" not in out.meta:
            raise ValueError(f"checkpoint {self.directory / str(step)} has no run metadata (round): it was not "
                             "written by jaxfl.engine.driver.train")
        return out.state, out.meta

    def close(self) -> None:
        self._manager.close()
