#!/usr/bin/env bash
# Builds the separate venv that benchmarks/algos.py uses to run sbx (Stable-Baselines3 on JAX).
# JAX stays out of the project's venv: sbx runs in a subprocess (benchmarks/_sbx_runner.py) from this venv.
#
#   bash benchmarks/competitors_venv.sh            # -> /work/venv-sbx (or $SBX_VENV)
#   python benchmarks/algos.py --sbx-python /work/venv-sbx/bin/python ...
#
# torch is pinned exactly (sbx's dependency on stable-baselines3 pulls torch; an unpinned torch brings a
# multi-GB CUDA build). gymnasium and panda-gym are pinned to the project venv's versions so both runners
# see the same environments.
set -euo pipefail
VENV="${SBX_VENV:-/work/venv-sbx}"
PROJECT_PY="${PROJECT_PY:-$(dirname "$0")/../.venv/bin/python}"
[ -x "$PROJECT_PY" ] || PROJECT_PY=/work/main/.venv/bin/python
ver() { "$PROJECT_PY" -c "from importlib.metadata import version; print(version('$1'))"; }
GYM_VERSION="$(ver gymnasium)"
PANDA_VERSION="$(ver panda-gym)"
SB3_VERSION="$(ver stable_baselines3)"
TORCH_VERSION="2.13.0+cpu"   # the CPU build (from the local wheel directory pip is configured with, else the CPU index)
python3.11 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet \
    "torch==${TORCH_VERSION}" \
    "gymnasium==${GYM_VERSION}" "panda-gym==${PANDA_VERSION}" "stable-baselines3==${SB3_VERSION}" \
    sbx-rl "jax[cpu]"
"$VENV/bin/python" -c "import sbx, jax, gymnasium, torch; print('sbx', sbx.__version__, 'jax', jax.__version__, 'gymnasium', gymnasium.__version__, 'torch', torch.__version__)"
