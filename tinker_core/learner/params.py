"""The learner's parameter blobs and their checks: what rollout workers load, and what may be published."""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from tinker_core.diagnostics import DivergenceError
from tinker_core.errors import CheckpointError

ALGO_FILE = "algo"  # a checkpoint directory, as Algorithm.save writes it


def bundle_sha256(path: Path) -> str:
    """sha256 of a bundle file, or of a bundle directory's files (names and bytes, in name order)."""
    h = hashlib.sha256()
    if path.is_file():
        h.update(path.read_bytes())
        return h.hexdigest()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(str(p.relative_to(path)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def algo_bytes(algo: Any) -> bytes:
    """The algorithm's saved checkpoint directory packed into one msgpack blob (what rollout workers load)."""
    from tinker_core.replay.codec import pack

    with tempfile.TemporaryDirectory(prefix="tinker-params-") as d:
        root = Path(d) / ALGO_FILE
        algo.save(root)
        return pack({str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()})


@contextlib.contextmanager
def unpack_algo_dir(blob: bytes) -> Iterator[Path]:
    """Unpack an `algo_bytes` blob into a temporary checkpoint directory (removed afterwards)."""
    from tinker_core.replay.codec import unpack

    files = unpack(blob)
    with tempfile.TemporaryDirectory(prefix="tinker-params-") as d:
        root = Path(d) / ALGO_FILE
        for name, data in files.items():
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise CheckpointError(f"parameter blob names a file outside its directory: {name!r}")
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        yield root


def weights_finite(algo: Any) -> bool:
    """Whether every weight of a torch-based algorithm is finite (True for one without ``parameters``)."""
    params = getattr(algo, "parameters", None)
    if params is None:
        return True
    import torch

    return all(bool(torch.isfinite(p).all()) for p in params())


def check_update(out: Any) -> None:
    """Raise `DivergenceError` naming the first non-finite loss or metric of an update's output."""
    for k, v in (out or {}).items():
        if isinstance(v, np.ndarray) or is_scalar(v):
            a = np.asarray(v, dtype=np.float64)
            if not np.isfinite(a).all():
                raise DivergenceError(f"{k} is {'NaN' if np.isnan(a).any() else 'inf'}")


def algo_from_bytes(blob: bytes) -> Any:
    """Inverse of `algo_bytes`: the algorithm, rebuilt from the packed checkpoint directory."""
    from tinker_core.algos import load_algorithm

    with unpack_algo_dir(blob) as root:
        return load_algorithm(root)


def is_scalar(v: Any) -> bool:
    """Whether ``v`` is one number (a float, an int, a 0-d array)."""
    try:
        float(v)
        return getattr(v, "ndim", 0) == 0
    except (TypeError, ValueError):
        return False

