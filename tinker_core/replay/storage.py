"""`RingStorage`: the transitions of a replay buffer, in a fixed-capacity ring.

Small fixed-shape fields (state vectors, actions, rewards, flags) live in plain numpy arrays, one
row per slot, so 1e6 state transitions cost about ``2*obs + action + 6`` bytes each (see
`estimate_state_bytes`). Camera frames (``uint8[H,W,1|3]``) are the bulk of an image replay: each
is compressed on its own with lz4 (exact) or JPEG (lossy, ``jpeg_quality``) so a sampled frame
decodes without its neighbours, and a frame that is both the ``next_obs`` of one step and the
``obs`` of the following step is stored once (``dedup_next_frames``). ``info`` dicts are kept as
msgpack bytes.

Slots are grouped into chunks of ``chunk_size``: the chunk is the unit written to disk by
`persist.py`, each field lz4-compressed, and only chunks changed since the last save are written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

import lz4.frame
import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.replay import codec
from tinker_core.transition import Transition, TransitionBatch


@dataclass
class StorageConfig:
    """How transitions are stored in memory and on disk."""

    image_codec: str = "lz4"
    """Codec for camera frames: "lz4" (exact), "jpeg" (lossy, smaller) or "none" (raw bytes)."""
    jpeg_quality: int = 85
    """JPEG quality 1..95 when ``image_codec`` is "jpeg"."""
    lz4_level: int = 0
    """0: lz4 fast mode; 1..12: lz4-HC at that level (about 20% smaller frames, much slower to add)."""
    decode_threads: int = 2
    """Threads that decode the frames of a sampled batch (lz4 and Pillow release the GIL); 1 decodes in the
    caller's thread. lz4 decoding is the cost of sampling image batches, and it splits evenly across cores."""
    chunk_size: int = 256
    """Transitions per chunk: the unit of persistence (one file per chunk)."""
    keep_info: bool = True
    """Keep each transition's ``info`` dict (msgpack); off saves memory on huge state buffers."""
    dedup_next_frames: bool = True
    """Store a frame once when it is both ``next_obs`` of step t and ``obs`` of step t+1."""

    def __post_init__(self) -> None:
        if self.image_codec not in codec.CODECS:
            raise ConfigError(f"StorageConfig.image_codec: expected one of {codec.CODECS}, got {self.image_codec!r}")
        if not 1 <= int(self.jpeg_quality) <= 95:
            raise ConfigError(f"StorageConfig.jpeg_quality: expected 1..95, got {self.jpeg_quality!r}")
        if not 0 <= int(self.lz4_level) <= 12:
            raise ConfigError(f"StorageConfig.lz4_level: expected 0..12, got {self.lz4_level!r}")
        if int(self.decode_threads) < 1:
            raise ConfigError(f"StorageConfig.decode_threads: expected >= 1, got {self.decode_threads!r}")
        if int(self.chunk_size) < 1:
            raise ConfigError(f"StorageConfig.chunk_size: expected >= 1, got {self.chunk_size!r}")


def _flatten(obs: Any, prefix: str = "") -> dict[str, np.ndarray]:
    if isinstance(obs, Mapping):
        out: dict[str, np.ndarray] = {}
        for k, v in obs.items():
            out.update(_flatten(v, f"{prefix}{k}/"))
        return out
    return {prefix.rstrip("/"): np.asarray(obs)}


def _unflatten(flat: dict[str, np.ndarray]) -> Any:
    if list(flat) == [""]:
        return flat[""]
    out: dict = {}
    for name, v in flat.items():
        node = out
        *parents, leaf = name.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return out


@dataclass(frozen=True)
class FieldInfo:
    """Shape and dtype of one flattened observation field, and whether it is stored as frames."""

    shape: tuple[int, ...]
    dtype: str
    image: bool


class RingStorage:
    """Fixed-capacity ring of transitions; the layout is fixed by the first transition added."""

    def __init__(self, capacity: int, config: StorageConfig | None = None):
        if int(capacity) < 1:
            raise ConfigError(f"replay capacity: expected an integer >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.config = config or StorageConfig()
        self.cursor = 0
        """Slot the next transition goes to."""
        self.size = 0
        self.total_added = 0
        """Transitions ever added (monotonic; survives save/restore)."""
        self.fields: dict[str, FieldInfo] | None = None
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = "float32"
        self._dirty: set[int] = set()
        self._pending_next: dict[str, np.ndarray] | None = None  # raw next frames of the newest slot

    # -- layout ---------------------------------------------------------------------------------
    def _init_layout(self, t: Transition) -> None:
        flat = _flatten(t.obs)
        self.fields = {k: FieldInfo(tuple(v.shape), v.dtype.name, codec.is_image(v.shape, v.dtype))
                       for k, v in flat.items()}
        act = np.asarray(t.action)
        self.action_shape, self.action_dtype = tuple(act.shape), act.dtype.name
        self._allocate()

    def _allocate(self) -> None:
        n = self.capacity
        assert self.fields is not None
        self.obs = {k: np.zeros((n, *f.shape), f.dtype) for k, f in self.fields.items() if not f.image}
        self.next_obs = {k: np.zeros((n, *f.shape), f.dtype) for k, f in self.fields.items() if not f.image}
        self.frames = {k: np.full(n, None, dtype=object) for k, f in self.fields.items() if f.image}
        self.next_frames = {k: np.full(n, None, dtype=object) for k, f in self.fields.items() if f.image}
        self.linked = np.zeros(n, dtype=bool)
        self.action = np.zeros((n, *self.action_shape), self.action_dtype)
        self.reward = np.zeros(n, np.float32)
        self.terminated = np.zeros(n, bool)
        self.truncated = np.zeros(n, bool)
        self.info = np.full(n, None, dtype=object) if self.config.keep_info else None

    @property
    def image_fields(self) -> list[str]:
        return [k for k, f in (self.fields or {}).items() if f.image]

    @property
    def n_chunks(self) -> int:
        return -(-self.capacity // self.config.chunk_size)

    def __len__(self) -> int:
        return self.size

    # -- writing --------------------------------------------------------------------------------
    def _encode(self, frame: np.ndarray) -> bytes:
        c = self.config
        return codec.encode_frames(frame[None], c.image_codec, c.jpeg_quality, c.lz4_level)[0]

    def _check(self, t: Transition, flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Refuse a transition that does not fit the layout or holds NaN/inf; returns the flat next_obs."""
        assert self.fields is not None
        if set(flat) != set(self.fields):
            raise ValidationError("replay.add.obs", f"fields {sorted(self.fields)}", f"fields {sorted(flat)}")
        for k, v in flat.items():
            f = self.fields[k]
            if v.shape != f.shape:
                raise ValidationError(f"replay.add.obs[{k!r}]", f"shape {f.shape}", f"shape {v.shape}")
        if np.shape(t.action) != self.action_shape:
            raise ValidationError("replay.add.action", f"shape {self.action_shape}", f"shape {np.shape(t.action)}")
        if t.next_obs is None:
            raise ValidationError("replay.add.next_obs", "the observation after the step", "None")
        nxt = _flatten(t.next_obs)
        if set(nxt) != set(self.fields) or any(v.shape != self.fields[k].shape for k, v in nxt.items()):
            raise ValidationError("replay.add.next_obs", "the fields and shapes of obs",
                                  str({k: v.shape for k, v in nxt.items()}))
        # one NaN stored here would poison every batch it is drawn into: refuse it at the door
        for where, arrays in (("obs", flat), ("next_obs", nxt)):
            for k, v in arrays.items():
                if v.dtype.kind in "fc" and not np.isfinite(v).all():
                    raise ValidationError(f"replay.add.{where}[{k!r}]", "finite values", "NaN or inf")
        a = np.asarray(t.action)
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            raise ValidationError("replay.add.action", "finite values", "NaN or inf")
        if not np.isfinite(t.reward):
            raise ValidationError("replay.add.reward", "a finite number", repr(t.reward))
        return nxt

    def _resolve_pending(self, next_flat: dict[str, np.ndarray] | None) -> None:
        """Decide whether the newest slot's next frames are the frames now arriving."""
        if self._pending_next is None or self.size == 0:
            return
        prev = (self.cursor - 1) % self.capacity
        same = (next_flat is not None and self.config.dedup_next_frames
                and all(np.array_equal(self._pending_next[k], next_flat[k]) for k in self._pending_next))
        if same:
            self.linked[prev] = True
            for k in self._pending_next:
                self.next_frames[k][prev] = None
        else:
            for k, fr in self._pending_next.items():
                if self.next_frames[k][prev] is None:
                    self.next_frames[k][prev] = self._encode(fr)
        self._pending_next = None
        self._dirty.add(prev // self.config.chunk_size)

    def add(self, t: Transition) -> int:
        """Store ``t`` in the next slot (overwriting the oldest when full); returns the slot."""
        if self.fields is None:
            self._init_layout(t)
        flat = _flatten(t.obs)
        nxt = self._check(t, flat)
        images = self.image_fields
        self._resolve_pending({k: flat[k] for k in images} if images else None)
        i = self.cursor
        for k, f in self.fields.items():  # type: ignore[union-attr]
            if f.image:
                self.frames[k][i] = self._encode(np.ascontiguousarray(flat[k], dtype=np.uint8))
                self.next_frames[k][i] = None
            else:
                self.obs[k][i] = flat[k]
                self.next_obs[k][i] = nxt[k]
        self.linked[i] = False
        if images:
            self._pending_next = {k: np.array(nxt[k], dtype=np.uint8, copy=True) for k in images}
        self.action[i] = t.action
        self.reward[i] = t.reward
        self.terminated[i] = t.terminated
        self.truncated[i] = t.truncated
        if self.info is not None:
            self.info[i] = codec.pack(t.info) if t.info else None
        self.cursor = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.total_added += 1
        self._dirty.add(i // self.config.chunk_size)
        return i

    # -- reading --------------------------------------------------------------------------------
    def get(self, slots: np.ndarray, with_info: bool = True) -> TransitionBatch:
        """The transitions in ``slots`` as one batch (frames decoded)."""
        if self.fields is None or self.size == 0:
            raise ValidationError("replay.sample", "a non-empty buffer", "an empty one")
        slots = np.asarray(slots, dtype=np.int64)
        obs, nxt = {}, {}
        newest = (self.cursor - 1) % self.capacity
        for k, f in self.fields.items():
            if not f.image:
                obs[k] = self.obs[k][slots]
                nxt[k] = self.next_obs[k][slots]
                continue
            # obs and next frames of the batch decode in one pass, each straight into its row
            b = len(slots)
            both = np.empty((2 * b, *f.shape), np.uint8)
            blobs = self.next_frames[k][slots].copy()
            linked = self.linked[slots]
            blobs[linked] = self.frames[k][(slots[linked] + 1) % self.capacity]
            pend = (slots == newest) & ~linked & (self._pending_next is not None)
            if pend.any():
                both[b + np.flatnonzero(pend)] = self._pending_next[k]  # type: ignore[index]
            todo = np.flatnonzero(~pend)
            codec.decode_frames_into(both, np.concatenate([self.frames[k][slots], blobs[todo]]),
                                     self.config.image_codec, self.config.decode_threads,
                                     rows=np.concatenate([np.arange(b), b + todo]))
            o, n = both[:b], both[b:]
            obs[k], nxt[k] = o, n
        info: list[dict] = []
        if with_info and self.info is not None:
            info = [codec.unpack(b) if b is not None else {} for b in self.info[slots]]
        return TransitionBatch(obs=_unflatten(obs), action=self.action[slots], reward=self.reward[slots],
                               terminated=self.terminated[slots], truncated=self.truncated[slots],
                               next_obs=_unflatten(nxt), info=info)

    def nbytes(self) -> int:
        """Memory held by the stored transitions (arrays plus compressed frames and info)."""
        if self.fields is None:
            return 0
        n = sum(a.nbytes for a in (*self.obs.values(), *self.next_obs.values()))
        n += self.action.nbytes + self.reward.nbytes + self.terminated.nbytes + self.truncated.nbytes + self.linked.nbytes
        for arrs in (self.frames, self.next_frames):
            for a in arrs.values():
                n += a.nbytes + sum(len(b) for b in a if b is not None)
        if self.info is not None:
            n += self.info.nbytes + sum(len(b) for b in self.info if b is not None)
        return n

    # -- persistence hooks (used by persist.py) --------------------------------------------------
    def dirty_chunks(self) -> list[int]:
        return sorted(self._dirty)

    def mark_clean(self, chunks: list[int] | None = None) -> None:
        if chunks is None:
            self._dirty.clear()
        else:
            self._dirty.difference_update(chunks)

    def header(self) -> dict:
        """Everything but the rows: layout, ring position and counters."""
        return {
            "capacity": self.capacity, "cursor": self.cursor, "size": self.size, "total_added": self.total_added,
            "config": dataclasses.asdict(self.config),
            "fields": None if self.fields is None else {k: [list(f.shape), f.dtype, f.image] for k, f in self.fields.items()},
            "action": [list(self.action_shape), self.action_dtype],
        }

    def encode_chunk(self, c: int) -> bytes:
        """One chunk's rows, every field lz4-compressed, frames as stored, in one msgpack record."""
        lo, hi = c * self.config.chunk_size, min((c + 1) * self.config.chunk_size, self.capacity)
        z = lambda a: lz4.frame.compress(np.ascontiguousarray(a).tobytes())  # noqa: E731
        newest = (self.cursor - 1) % self.capacity
        nf = {k: list(self.next_frames[k][lo:hi]) for k in self.next_frames}
        if self._pending_next is not None and lo <= newest < hi and not self.linked[newest]:
            for k, fr in self._pending_next.items():  # the newest slot's next frame is not encoded yet
                nf[k][newest - lo] = self._encode(fr)
        rec = {
            "lo": lo, "hi": hi,
            "obs": {k: z(a[lo:hi]) for k, a in self.obs.items()},
            "next_obs": {k: z(a[lo:hi]) for k, a in self.next_obs.items()},
            "frames": {k: list(a[lo:hi]) for k, a in self.frames.items()},
            "next_frames": nf,
            "linked": z(self.linked[lo:hi]), "action": z(self.action[lo:hi]), "reward": z(self.reward[lo:hi]),
            "terminated": z(self.terminated[lo:hi]), "truncated": z(self.truncated[lo:hi]),
            "info": None if self.info is None else lz4.frame.compress(codec.pack(list(self.info[lo:hi]))),
        }
        return codec.pack(rec)

    @classmethod
    def from_header(cls, h: dict) -> "RingStorage":
        s = cls(h["capacity"], StorageConfig(**h["config"]))
        s.cursor, s.size, s.total_added = int(h["cursor"]), int(h["size"]), int(h["total_added"])
        if h["fields"] is not None:
            s.fields = {k: FieldInfo(tuple(v[0]), v[1], bool(v[2])) for k, v in h["fields"].items()}
            s.action_shape, s.action_dtype = tuple(h["action"][0]), h["action"][1]
            s._allocate()
        return s

    def decode_chunk(self, data: bytes) -> None:
        rec = codec.unpack(data)
        lo, hi = int(rec["lo"]), int(rec["hi"])
        u = lambda b, a: np.frombuffer(lz4.frame.decompress(b), dtype=a.dtype).reshape(a[lo:hi].shape)  # noqa: E731
        for k, a in self.obs.items():
            a[lo:hi] = u(rec["obs"][k], a)
        for k, a in self.next_obs.items():
            a[lo:hi] = u(rec["next_obs"][k], a)
        for k, a in self.frames.items():
            a[lo:hi] = _objects(rec["frames"][k])
        for k, a in self.next_frames.items():
            a[lo:hi] = _objects(rec["next_frames"][k])
        for name in ("linked", "action", "reward", "terminated", "truncated"):
            a = getattr(self, name)
            a[lo:hi] = u(rec[name], a)
        if self.info is not None and rec["info"] is not None:
            self.info[lo:hi] = _objects(codec.unpack(lz4.frame.decompress(rec["info"])))


def _objects(items: list) -> np.ndarray:
    a = np.empty(len(items), dtype=object)
    a[:] = items
    return a


def estimate_state_bytes(obs_dim: int, action_dim: int, capacity: int, info_bytes: int = 0) -> int:
    """Memory of ``capacity`` float32 state transitions: obs and next_obs, action, reward, 3 flags."""
    per = 4 * (2 * obs_dim + action_dim) + 4 + 3 + (info_bytes + 8 if info_bytes else 0)
    return per * int(capacity)
