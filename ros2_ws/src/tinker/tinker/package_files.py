"""Where the package's own files are: the installed share (colcon) first, else the source tree."""

from __future__ import annotations

from pathlib import Path


def config_file(name: str) -> Path:
    """``config/NAME`` from the package share when tinker is installed with colcon, else from the source tree
    (the path returned there may not exist: the caller says what it needed)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory

        try:
            p = Path(get_package_share_directory("tinker")) / "config" / name
            if p.is_file():
                return p
        except (PackageNotFoundError, OSError):  # not installed with colcon, or no AMENT_PREFIX_PATH
            pass
    except ImportError:
        pass
    return Path(__file__).resolve().parent.parent / "config" / name
