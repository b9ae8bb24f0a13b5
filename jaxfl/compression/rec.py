"""Relative-entropy coding (REC) of a client update against the prior N(0, sigma^2 I), blockwise.

DP-REC (Triastcyn et al., Algs 1-4 and Thm 3): the flattened update ``mu: float32[D]`` is cut into blocks
(:class:`BlockLayout`). For block ``m`` of size ``d_m`` with ``K_m = 2**bits_m`` codebook rows
``z_{m,k} ~ N(0, I)`` (:mod:`jaxfl.compression.codebook`, a pure function of the client's seed ``R``),
the encoder picks

    k*_m ~ softmax_k(logit_{m,k}),   logit_{m,k} = <z_{m,k}, mu_m> / sigma

by Gumbel-max with a *private* key that is independent of ``R`` (the paper's privacy argument needs the
categorical draw to stay secret), and the message is ``(R, k*_1..k*_M)``. ``logit`` is the log importance
weight ``log N(sigma z | mu, sigma^2) - log N(sigma z | 0, sigma^2)`` up to the constant
``||mu_m||^2 / (2 sigma^2)``, which cancels in the softmax. The decoder returns ``sigma z_{m,k*_m}``.

The encoder's scores are a fused kernel: codebook tiles of ``K x tile`` entries are generated and reduced
against ``mu`` inside one ``lax.scan``, so peak memory is O(K + block size), never K x block size.
:func:`naive_block_logits` materializes the codebook; it is the reference the tests and the benchmark
compare with. Everything is jit- and vmap-able (vmap over the clients of a round).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfl.compression import codebook as cb
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import normal

#: Codebook entries generated per tile of the fused kernel (K x tile). Small enough that the kernel's
#: temporaries stay near 1 MiB whatever the block size (bench/rec_kernel.py measures it).
TILE_ELEMENTS = 2**16
#: Bits of the client-chosen seed sent with every message (the paper's communication numbers imply 32).
SEED_BITS = 32


@dataclasses.dataclass(frozen=True)
class BlockLayout:
    """How a flat update of ``size`` entries is cut into contiguous blocks, in order.

    Attributes:
      sizes: entries per block (each >= 1; they sum to ``size``).
      bits: index bits per block (1..24); block ``m`` has ``K_m = 2**bits[m]`` codebook rows.
      names: a label per block (e.g. the parameter path).

    Example: :func:`per_tensor`.
    """

    sizes: tuple[int, ...]
    bits: tuple[int, ...]
    names: tuple[str, ...] = ()

    def __post_init__(self):
        sizes = tuple(int(s) for s in self.sizes)
        bits = tuple(int(b) for b in self.bits)
        if not sizes or any(s < 1 for s in sizes):
            raise ValueError(f"block sizes must be a non-empty sequence of positive ints, got {self.sizes!r}")
        if len(bits) != len(sizes):
            raise ValueError(f"bits has {len(bits)} entries for {len(sizes)} blocks")
        if any(not 1 <= b <= 24 for b in bits):
            raise ValueError(f"bits per block must be in 1..24, got {self.bits!r}")
        names = tuple(self.names) or tuple(f"block{m}" for m in range(len(sizes)))
        if len(names) != len(sizes):
            raise ValueError(f"names has {len(names)} entries for {len(sizes)} blocks")
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "names", names)

    @property
    def size(self) -> int:
        """Total entries D."""
        return int(sum(self.sizes))

    @property
    def num_blocks(self) -> int:
        return len(self.sizes)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Start of each block in the flat update."""
        return tuple(int(o) for o in np.cumsum((0,) + self.sizes[:-1]))

    @property
    def total_bits(self) -> int:
        """``b_tot = sum_m bits_m``: the index bits of one message, and the ``b`` of the accountant's
        ``12 / 2**b`` overhead (Triastcyn et al., Thm 3 + Alg 7)."""
        return int(sum(self.bits))

    def message_bits(self, seed_bits: int = SEED_BITS) -> int:
        """Bits of one client-to-server message: the indices plus the seed."""
        return self.total_bits + int(seed_bits)

    def classes(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """Blocks grouped by ``(size, bits)``: ``[(size, bits, block ids)]``, processed together under vmap."""
        groups: dict[tuple[int, int], list[int]] = {}
        for m, key in enumerate(zip(self.sizes, self.bits)):
            groups.setdefault(key, []).append(m)
        return [(s, b, tuple(ids)) for (s, b), ids in groups.items()]


def _leaves(tree) -> list[tuple[str, int]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path), int(np.prod(np.shape(leaf), dtype=np.int64))) for path, leaf in flat]


def per_tensor(tree, bits: int = 7, *, max_block_size: int | None = None) -> BlockLayout:
    """One block per leaf of ``tree`` (the paper's main setting: 7 bits per tensor), in the order of
    ``jax.flatten_util.ravel_pytree``. A leaf larger than ``max_block_size`` is cut into the fewest
    near-equal contiguous chunks of at most that size (the paper's StackOverflow run cuts the 5e6-entry
    weight into 5 blocks of 1e6).

    Example (one block per leaf, 7 bits each; a message is the 32-bit seed and the indices):
      >>> import jax.numpy as jnp
      >>> layout = per_tensor({"a": jnp.zeros((3, 4)), "b": jnp.zeros(5)})
      >>> layout.sizes, layout.bits, layout.message_bits()
      ((12, 5), (7, 7), 46)
    """
    sizes, names = [], []
    for name, n in _leaves(tree):
        if n == 0:
            continue
        parts = 1 if max_block_size is None else -(-n // int(max_block_size))
        base, extra = divmod(n, parts)
        for p in range(parts):
            sizes.append(base + (p < extra))
            names.append(name if parts == 1 else f"{name}[{p}/{parts}]")
    return BlockLayout(tuple(sizes), (int(bits),) * len(sizes), tuple(names))


def fixed_size(size: int, block_size: int, bits: int = 7) -> BlockLayout:
    """Consecutive blocks of ``block_size`` entries over a flat update of ``size`` (the last may be
    shorter); ``block_size=1`` is per-parameter coding, ``block_size >= size`` one block for the network.

    Example:
      >>> fixed_size(10, 4).sizes
      (4, 4, 2)
    """
    size, block_size = int(size), int(block_size)
    if size < 1 or block_size < 1:
        raise ValueError(f"size and block_size must be >= 1, got {size} and {block_size}")
    full, rest = divmod(size, block_size)
    sizes = (block_size,) * full + ((rest,) if rest else ())
    return BlockLayout(sizes, (int(bits),) * len(sizes))


def whole(size: int, bits: int) -> BlockLayout:
    """The whole update as one block.

    Example:
      >>> whole(10, 7)
      BlockLayout(sizes=(10,), bits=(7,), names=('all',))
    """
    return BlockLayout((int(size),), (int(bits),), ("all",))


def _tile(size: int, rows: int) -> int:
    """Entries per tile of a block: even (a tile starts on a codebook pair), at most the block size
    rounded up to even."""
    return 2 * max(1, min(-(-size // 2), TILE_ELEMENTS // (2 * rows)))


def _block_scores(key: jnp.ndarray, mu: jnp.ndarray, rows: int) -> jnp.ndarray:
    """``s_k = <z_k, mu>`` for ``k < rows``: float32[rows]; streams the codebook tile by tile."""
    size = mu.shape[0]
    tile = _tile(size, rows)
    row_ids = jnp.arange(rows, dtype=jnp.uint32)[:, None]
    full, rest = divmod(size, tile)

    def tile_scores(first_pair, mu_tile):
        """Scores of one even-length tile starting at pair ``first_pair``."""
        pairs = mu_tile.reshape(-1, 2)
        even, odd = normal.normal_pairs(key, row_ids,
                                        (first_pair + jnp.arange(pairs.shape[0], dtype=jnp.uint32))[None, :])
        return jnp.sum(even * pairs[None, :, 0] + odd * pairs[None, :, 1], axis=1)

    def body(acc, t):
        return acc + tile_scores((t * (tile // 2)).astype(jnp.uint32),
                                 lax.dynamic_slice(mu, (t * tile,), (tile,))), None

    scores = jnp.zeros(rows, jnp.float32)
    if full:
        scores, _ = lax.scan(body, scores, jnp.arange(full, dtype=jnp.int32))
    if rest:  # the last, partial tile; an odd length is padded with a zero entry
        tail = mu[full * tile:]
        tail = jnp.pad(tail, (0, rest % 2))
        scores = scores + tile_scores(jnp.uint32(full * tile // 2), tail)
    return scores


def _class_blocks(flat: jnp.ndarray, layout: BlockLayout, size: int, ids: tuple[int, ...]) -> jnp.ndarray:
    """The blocks ``ids`` (all of ``size`` entries) of ``flat`` as ``[len(ids), size]``."""
    offsets = layout.offsets
    start = offsets[ids[0]]
    if all(offsets[m] == start + i * size for i, m in enumerate(ids)):  # contiguous run: a reshape
        return flat[start:start + len(ids) * size].reshape(len(ids), size)
    return jnp.stack([flat[offsets[m]:offsets[m] + size] for m in ids])


def _class_logits(flat, seed, layout: BlockLayout, sigma, size, bits, ids) -> jnp.ndarray:
    rows = 2**bits
    blocks = _class_blocks(flat, layout, size, ids)
    keys = jax.vmap(lambda m: cb.block_key(seed, m))(jnp.asarray(ids, jnp.int32))
    per_chunk = max(1, _tile(TILE_ELEMENTS, rows) // size)  # blocks sharing one tile's memory budget
    scores = lax.map(lambda kb: _block_scores(kb[0], kb[1], rows), (keys, blocks), batch_size=per_chunk)
    return scores / sigma


def _check_flat(flat, layout: BlockLayout) -> jnp.ndarray:
    flat = jnp.asarray(flat, jnp.float32)
    if flat.shape != (layout.size,):
        raise ValueError(f"the update must be float32[{layout.size}] for this layout, got shape {flat.shape}")
    return flat


def block_logits(flat, seed, layout: BlockLayout, sigma) -> list[jnp.ndarray]:
    """Encoder logits ``<z_{m,k}, mu_m> / sigma`` per block, by the fused kernel.

    Args:
      flat: float32[D], the (clipped) update ``mu``.
      seed: the client's uint32 seed ``R``.
      layout: the block layout (static).
      sigma: prior standard deviation (> 0, may be traced).
    Returns:
      ``[float32[2**bits_m] for each block m]``; ``softmax`` of block ``m``'s entry is the paper's ``pi_m``.

    Example (the fused kernel agrees with the materialized reference up to each block's constant):
      >>> import jax.numpy as jnp
      >>> layout, flat, seed = fixed_size(10, 5, bits=4), jnp.linspace(-1.0, 1.0, 10), jnp.uint32(7)
      >>> fused, naive = block_logits(flat, seed, layout, 1.0), naive_block_logits(flat, seed, layout, 1.0)
      >>> same = [bool(jnp.allclose(a - a.max(), b - b.max(), atol=1e-5)) for a, b in zip(fused, naive)]
      >>> [a.shape for a in fused], same
      ([(16,), (16,)], [True, True])
    """
    flat = _check_flat(flat, layout)
    out: list = [None] * layout.num_blocks
    for size, bits, ids in layout.classes():
        logits = _class_logits(flat, seed, layout, sigma, size, bits, ids)
        for i, m in enumerate(ids):
            out[m] = logits[i]
    return out


def encode(flat, seed, private_key: jax.Array, layout: BlockLayout, sigma) -> jnp.ndarray:
    """Lossy REC encoder (Alg. 1/3 per block): ``int32[M]`` indices ``k*_m < 2**bits_m``.

    ``private_key`` draws the Gumbel noise of the categorical choice (block ``m`` uses
    ``fold_in(private_key, m)``); it must be the client's secret and independent of ``seed``, which the
    server learns. Shapes as in :func:`block_logits`.

    Example (two blocks of 4 bits: two indices below 16, decoded to the chosen codebook rows):
      >>> import jax, jax.numpy as jnp
      >>> layout, flat, seed = fixed_size(10, 5, bits=4), jnp.linspace(-1.0, 1.0, 10), jnp.uint32(7)
      >>> indices = encode(flat, seed, jax.random.key(1), layout, 1.0)
      >>> indices.dtype, bool((indices < 16).all()), decode(indices, seed, layout, 1.0).shape
      (dtype('int32'), True, (10,))
    """
    flat = _check_flat(flat, layout)
    indices = jnp.zeros(layout.num_blocks, jnp.int32)
    for size, bits, ids in layout.classes():
        logits = _class_logits(flat, seed, layout, sigma, size, bits, ids)
        block_ids = jnp.asarray(ids, jnp.int32)
        gumbel = jax.vmap(lambda m: jax.random.gumbel(keys_lib.fold_in(private_key, m), (2**bits,)))(block_ids)
        indices = indices.at[block_ids].set(jnp.argmax(logits + gumbel, axis=1).astype(jnp.int32))
    return indices


def decode(indices, seed, layout: BlockLayout, sigma) -> jnp.ndarray:
    """REC decoder (Alg. 2/4): ``float32[D]``, block ``m`` = ``sigma * z_{m, indices[m]}``; O(D) work.

    Example: :func:`encode`.
    """
    indices = jnp.asarray(indices, jnp.int32)
    if indices.shape != (layout.num_blocks,):
        raise ValueError(f"indices must be int32[{layout.num_blocks}], got shape {indices.shape}")
    parts: list = [None] * layout.num_blocks
    for size, _, ids in layout.classes():
        block_ids = jnp.asarray(ids, jnp.int32)
        rows = jax.vmap(lambda m, k: cb.codebook_row(cb.block_key(seed, m), k, size))(block_ids, indices[block_ids])
        for i, m in enumerate(ids):
            parts[m] = rows[i]
    return sigma * jnp.concatenate(parts)


def naive_block_logits(flat, seed, layout: BlockLayout, sigma) -> list[jnp.ndarray]:
    """Reference encoder logits that materialize each block's ``K x d`` prior samples
    ``Delta = sigma z`` and evaluate ``log N(Delta | mu, sigma^2 I) - log N(Delta | 0, sigma^2 I)``
    in full (including the constant ``-||mu_m||^2 / (2 sigma^2)`` that :func:`block_logits` drops).

    Example: :func:`block_logits`.
    """
    flat = _check_flat(flat, layout)
    out = []
    for m, (offset, size, bits) in enumerate(zip(layout.offsets, layout.sizes, layout.bits)):
        mu = flat[offset:offset + size]
        samples = sigma * cb.codebook(cb.block_key(seed, m), 2**bits, size)
        out.append((jnp.sum(samples**2, axis=1) - jnp.sum((samples - mu) ** 2, axis=1)) / (2.0 * sigma**2))
    return out


def pack_indices(indices: Sequence[int], bits: Sequence[int]) -> bytes:
    """Bit-packs indices (``indices[m] < 2**bits[m]``) little-endian into ``ceil(sum(bits) / 8)`` bytes.

    Example:
      >>> data = pack_indices([3, 5], [4, 4])              # two 4-bit indices in one byte
      >>> data, unpack_indices(data, [4, 4]).tolist()
      (b'S', [3, 5])
    """
    indices, bits = np.asarray(indices, np.int64).ravel(), [int(b) for b in bits]
    if indices.shape[0] != len(bits):
        raise ValueError(f"{indices.shape[0]} indices for {len(bits)} blocks")
    value, shift = 0, 0
    for k, b in zip(indices.tolist(), bits):
        if not 0 <= k < 2**b:
            raise ValueError(f"index {k} does not fit in {b} bits")
        value |= k << shift
        shift += b
    return value.to_bytes(math.ceil(shift / 8), "little")


def unpack_indices(data: bytes, bits: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`pack_indices`: ``int32[len(bits)]``.

    Example: :func:`pack_indices`.
    """
    value, out = int.from_bytes(data, "little"), []
    for b in bits:
        out.append(value & (2**int(b) - 1))
        value >>= int(b)
    return np.asarray(out, np.int32)
