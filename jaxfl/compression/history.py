"""Server-to-client compression by message histories (Triastcyn et al., Algs 5 and 6) and exact traffic counts.

Instead of the model, the server sends a client the messages ``(R, k*)`` of every round since the
client last took part (or, before its first round, the model-initialisation seed ``R'`` and every
message since round 0); the client replays them (:func:`replay`) with the server's own update rule
(:func:`jaxfl.algorithms.dprec.server_step`). Whenever the history is larger than the model plus the
server optimizer state, the server sends those instead. :class:`CommunicationLedger` counts every bit of
this, both directions, exactly as the protocol sends it; simulations skip the replay itself (the tests check
that a replay reproduces the server model).

Counting conventions (the paper's; they reproduce its "GB" figures, which are GiB = 2**30 bytes):

- upload per slot: ``layout.message_bits()`` = the index bits plus a 32-bit seed;
- a history entry is one message of that size; the init entry is a 32-bit seed;
- a round's participants get that round's messages except their own (Alg. 5's ``M \\ {own}``; the client
  re-inserts its own message, which it knows), the other clients get all ``B`` of them;
- a client drawn twice in one round downloads once: its history is empty at its second slot.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Sequence

import numpy as np

from jaxfl.compression.rec import SEED_BITS

GIB = 2**30


@dataclasses.dataclass
class CommunicationLedger:
    """Bits sent in each direction by DP-REC with history compression.

    Args:
      num_clients: ``N``.
      message_bits: bits of one client-to-server message (``layout.message_bits()``).
      model_bits: bits of the full model (32 per float32 parameter).
      optimizer_bits: bits of the server optimizer state a full download must also carry
        (0 for SGD; 64 per parameter for Adam's two moments).
      init_bits: bits of the model-initialisation entry (a seed).

    Example (4 clients, 56-bit messages, a 1,000-parameter model; a client downloads what it missed):
      >>> ledger = CommunicationLedger(num_clients=4, message_bits=56, model_bits=32 * 1000)
      >>> [ledger.record_round(slots) for slots in ([0, 1], [1, 2], [0, 3])]            # (up, down) per round
      [(112, 64), (112, 200), (112, 424)]
      >>> ledger.total_bits
      1024
    """

    num_clients: int
    message_bits: int
    model_bits: int
    optimizer_bits: int = 0
    init_bits: int = SEED_BITS
    up_bits: int = 0
    down_bits: int = 0
    full_downloads: int = 0
    rounds: int = 0

    def __post_init__(self):
        if int(self.num_clients) < 1:
            raise ValueError(f"num_clients must be >= 1, got {self.num_clients}")
        self._pending = np.full(int(self.num_clients), int(self.init_bits), dtype=np.int64)

    @property
    def full_bits(self) -> int:
        """Bits of a full download: model plus server optimizer state."""
        return int(self.model_bits) + int(self.optimizer_bits)

    def record_round(self, silos: Sequence[int]) -> tuple[int, int]:
        """Counts one round whose slots drew clients ``silos`` (with repetition, in slot order);
        returns the round's ``(up_bits, down_bits)``."""
        silos = np.asarray(silos, dtype=np.int64).ravel()
        if silos.size == 0 or silos.min() < 0 or silos.max() >= self.num_clients:
            raise ValueError(f"slot clients must be in 0..{self.num_clients - 1}, got {silos.tolist()}")
        down = 0
        for s in silos:  # Alg. 5's create_message_for_client, slot by slot
            history = int(self._pending[s])
            if history > self.full_bits:
                down += self.full_bits
                self.full_downloads += 1
            else:
                down += history
            self._pending[s] = 0
        own = np.bincount(silos, minlength=self.num_clients)
        self._pending += int(self.message_bits) * (silos.size - own)  # update_history
        up = int(self.message_bits) * silos.size
        self.up_bits += up
        self.down_bits += down
        self.rounds += 1
        return up, down

    def record_rounds(self, rounds: Iterable[Sequence[int]]) -> "CommunicationLedger":
        for silos in rounds:
            self.record_round(silos)
        return self

    @property
    def total_bits(self) -> int:
        return int(self.up_bits) + int(self.down_bits)

    def gib(self) -> dict[str, float]:
        """``{"up", "down", "total"}`` in GiB."""
        to_gib = lambda bits: bits / 8 / GIB
        return {"up": to_gib(self.up_bits), "down": to_gib(self.down_bits), "total": to_gib(self.total_bits)}


def uncompressed_bits(rounds: int, clients_per_round: int, num_params: int, up_bits_per_param: int = 32,
                      down_bits_per_param: int = 32) -> int:
    """Traffic of an uncompressed baseline such as DP-FedAvg: every participant downloads and uploads the
    model, ``rounds * B * D * (down + up)`` bits.

    Example (10 rounds of 10 clients on a 1,000-parameter float32 model):
      >>> uncompressed_bits(10, 10, 1000)
      6400000
    """
    return int(rounds) * int(clients_per_round) * int(num_params) * (int(up_bits_per_param) + int(down_bits_per_param))


def replay(state, transcripts: Iterable[tuple], step: Callable):
    """Alg. 6 on the client: applies ``step(state, seeds, indices)`` for each round's full transcript
    ``(seeds, indices)`` in order, from the state the client had when it last took part.

    Example (a client that missed two rounds applies both transcripts in order):
      >>> replay(0, [(1, 2), (3, 4)], lambda state, seeds, indices: state + seeds + indices)
      10
    """
    for seeds, indices in transcripts:
        state = step(state, seeds, indices)
    return state
