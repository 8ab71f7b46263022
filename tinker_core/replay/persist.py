"""Saving a replay buffer to disk and restoring it after a restart, without losing what was acknowledged.

Layout of a replay directory::

    index.json                 the persistence point: header, chunk list with sha256, counters
    c000012-g000007.bin        one chunk (``chunk_size`` slots, every field lz4-compressed)
    extra-g000007.bin          buffer-specific arrays (e.g. the priorities of a PrioritizedReplay)

A save writes only the chunks changed since the previous save, each to a new file name (chunk and
generation), every file atomically (tmp + fsync + rename); then it replaces ``index.json``
atomically; only then does it delete the files the new index no longer names. A crash at any
moment leaves either the old index with all its files or the new one with all of its files.

**Acknowledged** means: counted in ``acked`` (``index.json: acked``), the number of transitions ever
added when the last save completed. Every acknowledged transition that still fits in the ring is
restored by `load_replay`; transitions added after the last save are not acknowledged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import lz4.frame

from tinker_core.errors import CheckpointError
from tinker_core.module import atomic_write_bytes
from tinker_core.replay import codec
from tinker_core.replay.storage import RingStorage

FORMAT = "tinker.replay"
FORMAT_VERSION = 1
INDEX = "index.json"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_index(directory: Path) -> dict | None:
    p = directory / INDEX
    if not p.is_file():
        return None
    try:
        idx = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{p}: not valid JSON ({e})") from e
    if idx.get("format") != FORMAT:
        raise CheckpointError(f"{p}: format {idx.get('format')!r}, expected {FORMAT!r}")
    if int(idx.get("format_version", -1)) > FORMAT_VERSION:
        raise CheckpointError(f"{p}: format version {idx.get('format_version')} is newer than {FORMAT_VERSION}")
    return idx


def save_replay(buffer, directory: str | os.PathLike) -> int:
    """Persist ``buffer`` into ``directory`` incrementally; returns the number of acknowledged transitions."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    with buffer.lock:
        old = _read_index(directory)
        same_dir = old is not None and getattr(buffer, "_saved_to", None) == directory.resolve()
        chunks = dict(old["chunks"]) if same_dir else {}
        gen = (int(old["generation"]) + 1) if old is not None else 1
        st: RingStorage = buffer.storage
        todo = st.dirty_chunks() if same_dir else list(range(st.n_chunks)) if st.fields is not None else []
        if st.fields is not None and same_dir:
            todo = sorted(set(todo) | {c for c in range(st.n_chunks) if str(c) not in chunks})
        for c in todo:
            if c * st.config.chunk_size >= st.size and st.size < st.capacity and str(c) not in chunks:
                continue  # never filled: nothing to write
            data = st.encode_chunk(c)
            name = f"c{c:06d}-g{gen:06d}.bin"
            atomic_write_bytes(directory / name, data)
            chunks[str(c)] = {"file": name, "sha256": _sha(data)}
        extra_file = None
        arrays = buffer.extra_arrays()
        if arrays:
            blob = lz4.frame.compress(codec.pack(arrays))
            extra_file = {"file": f"extra-g{gen:06d}.bin", "sha256": _sha(blob)}
            atomic_write_bytes(directory / extra_file["file"], blob)
        index = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "generation": gen,
            "kind": buffer.kind, "acked": st.total_added,
            "header": st.header(), "chunks": chunks, "extra_state": buffer.extra_state(), "extra": extra_file,
        }
        atomic_write_bytes(directory / INDEX, json.dumps(index).encode())
        # the new index is the persistence point: from here on, everything it names is durable
        st.mark_clean()
        buffer.acked = st.total_added
        buffer._saved_to = directory.resolve()
        keep = {v["file"] for v in chunks.values()} | ({extra_file["file"]} if extra_file else set()) | {INDEX}
        for p in directory.iterdir():
            if p.name not in keep and (p.suffix == ".bin" or p.name.startswith(".")):
                try:
                    p.unlink()
                except OSError:
                    pass
        return buffer.acked


def load_replay(directory: str | os.PathLike, seed: int | None = None):
    """Rebuild the buffer saved in ``directory``; raises `CheckpointError` on a missing or damaged file."""
    from tinker_core.replay.buffer import ReplayBuffer
    from tinker_core.replay.prioritized import PrioritizedReplay

    directory = Path(directory)
    idx = _read_index(directory)
    if idx is None:
        raise CheckpointError(f"{directory}: no {INDEX}: not a saved replay buffer")
    kinds = {"uniform": ReplayBuffer, "prioritized": PrioritizedReplay}
    if idx["kind"] not in kinds:
        raise CheckpointError(f"{directory / INDEX}: kind {idx['kind']!r}, expected one of {sorted(kinds)}")
    st = RingStorage.from_header(idx["header"])
    buf = kinds[idx["kind"]](st.capacity, storage=st.config, seed=seed)
    buf.storage = st
    if isinstance(buf, PrioritizedReplay):
        from tinker_core.replay.sumtree import SumTree

        buf.tree = SumTree(st.capacity)
    for c, ent in sorted(idx["chunks"].items(), key=lambda kv: int(kv[0])):
        st.decode_chunk(_read_checked(directory, ent))
    arrays = {}
    if idx.get("extra"):
        arrays = codec.unpack(lz4.frame.decompress(_read_checked(directory, idx["extra"])))
    buf.restore_extra(idx.get("extra_state", {}), arrays)
    st.mark_clean()
    buf.acked = int(idx["acked"])
    buf._saved_to = directory.resolve()
    return buf


def _read_checked(directory: Path, ent: dict) -> bytes:
    p = directory / ent["file"]
    if not p.is_file():
        raise CheckpointError(f"{p}: missing (named in {directory / INDEX})")
    data = p.read_bytes()
    if _sha(data) != ent["sha256"]:
        raise CheckpointError(f"{p}: sha256 does not match {INDEX}: the file is damaged or was modified")
    return data


def acked_count(directory: str | os.PathLike) -> int:
    """Acknowledged transitions in a saved replay directory (0 if none was saved)."""
    idx = _read_index(Path(directory))
    return 0 if idx is None else int(idx["acked"])
