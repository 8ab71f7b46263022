"""Installed import names that cannot collide with other distributions: each layer's folder keeps the name the
project is known by (sim/, safety/, deploy/, cli/), and installs as tinker_<folder>. A folder that is absent
(the edge wheel carries only tinker_core and deploy) is left out."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
LAYERS = {"tinker_core": "tinker_core", "tinker_sim": "sim", "tinker_safety": "safety", "tinker_deploy": "deploy",
          "tinker_cli": "cli"}

package_dir, packages = {}, []
for name, folder in LAYERS.items():
    if (HERE / folder / "__init__.py").is_file():
        package_dir[name] = folder
        packages += [name] + [f"{name}.{p}" for p in find_packages(str(HERE / folder))]

setup(package_dir=package_dir, packages=packages)
