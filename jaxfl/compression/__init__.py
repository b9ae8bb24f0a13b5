"""Compression of client updates: DP-REC's relative-entropy codec (``rec``, on the counter-based
``codebook``) and its server-to-client history scheme with exact traffic counts (``history``)."""
from jaxfl.compression import codebook, history, rec

__all__ = ["codebook", "history", "rec"]
