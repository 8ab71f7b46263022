"""Argument types the subcommands share (light: imported when the parser is built)."""

from __future__ import annotations

import argparse


def compensation_arg(text: str) -> int | str:
    """``--latency-compensation``: control periods (0..20), or 'auto' (measured, then compensated)."""
    from tinker_core.loop.latency_compensation import check_steps

    if text == "auto":
        return text
    try:
        return check_steps(int(text), "--latency-compensation")
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of control periods or 'auto', got {text!r}")
