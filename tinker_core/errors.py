"""The project's exception types. Every message names what was wrong, where, and what was expected."""

from __future__ import annotations


class TinkerError(Exception):
    """Base of every error tinker raises on purpose."""


class ConfigError(TinkerError, ValueError):
    """A configuration value or file is invalid."""


class SpecError(TinkerError):
    """Two specs that must agree do not (raised at connect/swap/load time)."""


class ValidationError(TinkerError, ValueError):
    """Run-time data does not match its declared spec.

    Carries the edge, the field path, what was expected and what came, so a caller can act on it.
    """

    def __init__(self, where: str, expected: str, got: str, reason: str = ""):
        self.where, self.expected, self.got, self.reason = where, expected, got, reason
        msg = f"{where}: expected {expected}, got {got}"
        if reason:
            msg += f" ({reason})"
        super().__init__(msg)


class CheckpointError(TinkerError):
    """A saved module file is missing, damaged, tampered with, or written for another spec."""


class PipelineError(TinkerError):
    """A pipeline was built or driven incorrectly."""


class TransportError(TinkerError):
    """A message could not be sent, received, framed or authenticated."""


class BundleError(TinkerError):
    """A deployable model bundle is invalid, tampered with, or does not match what is expected."""
