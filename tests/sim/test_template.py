"""The user-env template in sim/README.md runs as written and passes gymnasium's env checker."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from gymnasium.utils.env_checker import check_env

README = Path(__file__).resolve().parents[2] / "sim" / "README.md"


def test_readme_template_runs_and_passes_the_env_checker():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) == 1
    scope: dict = {}
    exec(compile(blocks[0], str(README), "exec"), scope)  # the documented example, verbatim
    env = scope["env"]
    try:
        assert [t["name"] for t in env.unwrapped.obs_terms][-2] == "point_minus_ee"
        assert "distance" in scope["info"] and "dynamics" in scope["info"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()
