"""The layer rules, checked on the source: dependencies point one way.

    tinker_core  <-  sim/, safety/, deploy/  <-  the ROS package `tinker`  <-  cli/ (the composition root)

The folders install as tinker_core, tinker_sim, tinker_safety, tinker_deploy and tinker_cli (setup.py).

Every import counts, at module level or inside a function (a lazy import is still a dependency), and so does
``importlib.import_module("...")`` or ``__import__("...")`` with a literal name. A planted back-import (say
``from tinker_sim.arm_env import ArmEnv`` inside a function in tinker_core) fails `test_layer_rules` with the file,
line and rule it breaks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# layer folder -> (its import name, the import names it must never use)
CORE, SIM, SAFETY, DEPLOY, ROS, CLI = "tinker_core", "tinker_sim", "tinker_safety", "tinker_deploy", "tinker", "tinker_cli"
FOLDERS: dict[str, str] = {
    "tinker_core": CORE, "sim": SIM, "safety": SAFETY, "deploy": DEPLOY, "ros2_ws/src/tinker/tinker": ROS, "cli": CLI,
}
FORBIDDEN: dict[str, tuple[str, ...]] = {
    CORE: (SIM, SAFETY, DEPLOY, ROS, CLI),
    SIM: (SAFETY, DEPLOY, ROS, CLI),
    SAFETY: (SIM, DEPLOY, ROS, CLI),
    DEPLOY: (SIM, SAFETY, ROS, CLI),
    ROS: (CLI,),
    CLI: (),
}


@dataclass(frozen=True)
class Import:
    path: str
    line: int
    name: str


def _is(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    """Every module name the file imports, at any depth (relative imports stay inside their own layer)."""
    rel = path.relative_to(root).as_posix()
    tree = ast.parse(path.read_text(), filename=rel)
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(rel, node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: within its own package, which is its own layer
                continue
            mod = node.module or ""
            found.append(Import(rel, node.lineno, mod))
            found += [Import(rel, node.lineno, f"{mod}.{a.name}") for a in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and ((isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                   or (isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__")))):
            found.append(Import(rel, node.lineno, node.args[0].value))
    return found


def layer_of(rel: str) -> str:
    return next(layer for folder, layer in sorted(FOLDERS.items(), key=lambda f: -len(f[0]))
                if rel.startswith(folder + "/"))


def violations(root: Path = ROOT) -> list[str]:
    """One line per import statement that breaks a rule: file, line, layer, the name and the rule."""
    found: dict[tuple[str, int, str], str] = {}
    for folder, layer in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            for imp in imports_of(path, root):
                for banned in FORBIDDEN[layer]:
                    key = (imp.path, imp.line, banned)
                    if _is(imp.name, banned) and (key not in found or len(imp.name) < len(found[key])):
                        found[key] = imp.name
    return [f"{p}:{line}: {layer_of(p)} imports {name!r} ({layer_of(p)} must not depend on {banned})"
            for (p, line, banned), name in sorted(found.items())]


def test_layer_rules():
    found = violations()
    assert not found, "imports against the layer rules:\n" + "\n".join(found)


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from tinker_sim.arm_env import ArmEnv\n", "tinker_core imports 'tinker_sim.arm_env'"),
    ("import importlib\nm = importlib.import_module('tinker_safety.limits')\n", "tinker_core imports 'tinker_safety.limits'"),
    ("from tinker_cli import main\n", "tinker_core imports 'tinker_cli'"),
])
def test_a_planted_back_import_is_found(tmp_path, source, expected):
    (tmp_path / "tinker_core").mkdir()
    (tmp_path / "tinker_core" / "planted.py").write_text(source)
    for folder in FOLDERS:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    found = violations(tmp_path)
    assert len(found) == 1 and expected in found[0] and found[0].startswith("tinker_core/planted.py:"), found


def test_the_rules_see_every_layer_folder():
    for folder in FOLDERS:
        assert any((ROOT / folder).rglob("*.py")), f"no Python files under {folder}: the rule checks nothing"
