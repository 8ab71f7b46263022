"""Joint limits by joint name, read from the robot's URDF (the one source of the limits)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

import numpy as np

from tinker_core.errors import ConfigError


def default_urdf() -> Path:
    """kuka_iiwa/model.urdf from pybullet_data, found without importing pybullet (edge installs lack it)."""
    import importlib.util

    spec = importlib.util.find_spec("pybullet_data")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("urdf: no path given and pybullet_data is not installed; set the 'urdf' parameter")
    return Path(list(spec.submodule_search_locations)[0]) / "kuka_iiwa" / "model.urdf"


def joint_limits(urdf: str | os.PathLike | None, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper, velocity) for ``names``, in that order; names the joints the URDF lacks."""
    path = Path(urdf) if urdf else default_urdf()
    if not path.is_file():
        raise ConfigError(f"urdf: file not found: {path}")
    found = {}
    for j in ET.parse(path).getroot().iter("joint"):
        lim = j.find("limit")
        if j.get("type") in ("revolute", "prismatic") and lim is not None:
            found[j.get("name")] = (float(lim.get("lower", "nan")), float(lim.get("upper", "nan")),
                                    float(lim.get("velocity", "nan")))
    missing = [n for n in names if n not in found]
    if missing:
        raise ConfigError(f"urdf {path}: no limited joint named {missing}; joints there: {sorted(found)}")
    arr = np.asarray([found[n] for n in names], dtype=np.float64)
    return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()
