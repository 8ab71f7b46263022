#!/usr/bin/env bash
# Builds /work/venv-rllib (or $1): a venv, separate from the project's, with RLlib for
# benchmarks/multi_agent.py --rllib. ray[rllib] 2.60 pins gymnasium 1.2.2 and needs dm-tree, which the
# project's venv must not get. tinker itself is NOT installed there: benchmarks/_rllib_runner.py puts the
# repository (via .shim if present) on sys.path.
set -euo pipefail
VENV="${1:-/work/venv-rllib}"
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# torch pinned exactly (an unpinned torch pulls a multi-GB CUDA build); here pip's find-links
# (/opt/wheels) holds the 2.13.0+cpu wheel. Elsewhere add --index-url https://download.pytorch.org/whl/cpu.
"$VENV/bin/pip" install -q 'torch==2.13.0'
# The project's pins where RLlib allows them (gymnasium stays at RLlib's 1.2.2).
"$VENV/bin/pip" install -q 'ray[rllib]==2.60.*' dm-tree 'torch==2.13.0' \
  'pettingzoo==1.27.0' 'pybullet==3.2.7' 'numpy==2.4.6' pyyaml
"$VENV/bin/python" -c "import ray, gymnasium, pettingzoo, torch; print('ray', ray.__version__, 'gymnasium', gymnasium.__version__, 'pettingzoo', pettingzoo.__version__, 'torch', torch.__version__)"
