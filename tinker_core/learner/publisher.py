"""The learner's publisher: the function that writes a gated candidate's bundle, and its older form."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tinker_core.errors import ConfigError

log = logging.getLogger("tinker.learner")

Publisher = Callable[[Any, int, np.ndarray | None], Path]
"""writes the bundle of (algorithm, version, recorded observations for its parity check) and returns its path"""


def three_arg_publisher(publisher: Callable[..., Path]) -> Publisher:
    """``publisher`` as a `Publisher`. One written before the recorded observations (``(algo, version)``) is still
    called that way (its export then checks parity on inputs it draws); anything else is refused here, at the
    learner's construction, rather than at its first publish after hours of training."""
    try:
        sig = inspect.signature(publisher)
    except (TypeError, ValueError):  # a builtin without a signature: trust the documented form
        return publisher
    try:
        sig.bind(None, 1, None)
        return publisher
    except TypeError:
        pass
    try:
        sig.bind(None, 1)
    except TypeError:
        raise ConfigError(f"Learner publisher: {publisher!r} takes {sig}; expected (algo, version, recorded_obs) "
                          f"-> bundle path (or the older (algo, version))") from None
    log.info("publisher %r takes (algo, version): its bundles' parity is checked on inputs it draws, not on the "
             "recorded observations", publisher)
    return lambda algo, version, recorded_obs: publisher(algo, version)
