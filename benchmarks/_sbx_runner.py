"""Runs one (task, seed) of benchmarks/algos.py with sbx (Stable-Baselines3 on JAX) and prints one JSON line.

Runs in the separate venv of ``benchmarks/competitors_venv.sh`` (JAX stays out of the project's venv):

    /work/venv-sbx/bin/python benchmarks/_sbx_runner.py --task sac_pendulum --steps 20000 --seed 0 [--threads 1]
    /work/venv-sbx/bin/python benchmarks/_sbx_runner.py --peak      # JAX's measured matrix-product GFLOP/s

The last line of stdout is the result (``run_sb3_like``'s figures plus ``jax``/``sbx`` versions).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task")
    ap.add_argument("--steps", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="XLA CPU threads (1: per-core speed, as the others)")
    ap.add_argument("--peak", action="store_true", help="measure JAX's float32 matrix-product GFLOP/s and exit")
    args = ap.parse_args()
    if args.threads == 1:  # before jax is imported
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _suite import TASKS, matmul_peak_gflops, run_sb3_like

    if args.peak:
        dot = jax.jit(jnp.dot)
        peak = matmul_peak_gflops(dot, lambda n, m: jnp.asarray(np.random.rand(n, m).astype(np.float32)),
                                  sync=lambda x: x.block_until_ready())
        print(json.dumps({"jax_matmul_gflops": peak, "jax": jax.__version__}))
        return 0
    import torch

    torch.set_num_threads(args.threads)  # SB3's buffers and VecNormalize use torch/numpy around the JAX update
    import sbx

    r = run_sb3_like(TASKS[args.task], "sbx", args.steps, args.seed)
    r.update({"jax": jax.__version__, "sbx": sbx.__version__})
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
