"""The gradient step alone, every path tinker has against torch's own tools and SB3, on this machine's CPU.

Issue 23 asks to keep the compiled steps (sac_native.cpp, ppo_native.cpp) only where they beat what torch
offers by a wide margin, measured on every CPU kind we can reach. This times one training step of each
path on the same networks, batch and data, one thread (as training runs), after a warm-up:

SAC (Pendulum-v1, RL Zoo sizes: 256x256 MLPs, batch 256, two critics), one gradient step each, replay
sampling included:
- ``compiled``: the C++ step (`NativeSACUpdate`), what `SAC` runs by default;
- ``python step``: the same written-out backward in Python (`SACUpdate`: the fallback without a compiler);
- ``autograd``: the plain autograd step with the fused Adam (`SAC._train_step`, ``_update = None``);
- ``autograd + torch.compile``: that step through ``torch.compile`` (inductor, default mode), as a
  user would try first;
- ``sb3``: Stable-Baselines3's ``SAC.train`` (same sizes, its own sampling), where it is installed.

PPO (Pendulum-v1, RL Zoo: 4 envs x 1024 steps, 10 epochs of minibatch 64, 64x64 tanh MLPs, gSDE), one
whole update (640 minibatch steps) each:
- ``compiled`` (`NativePPOUpdate`), ``autograd`` (``compiled_update=False``), ``autograd + torch.compile``
  (the forward pass and the loss terms compiled: the whole minibatch step, with its in-place Adam step,
  fails inductor's functionalization in torch 2.13).

FLOPs per SAC step are counted from the layer sizes (2 multiply-adds per weight per sample for each
product, the backward's two products per layer), and set against this machine's measured fp32
matrix-product peak on one thread (a 1024^3 product through the BLAS and through oneDNN, the faster's
best of 5), so the distance to the physical
limit shows.

    python benchmarks/update_step.py            # about 4 min on 2 idle cores (torch.compile's build included)
    python benchmarks/update_step.py --quick    # fewer steps, no torch.compile
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from typing import Any, Callable

import numpy as np
import torch

from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

from tinker_core.algos import PPO, SAC, PPOConfig, SACConfig, native  # noqa: E402
from tinker_core.algos.sac_update import SACUpdate  # noqa: E402


def _time(step: Callable[[], Any], n: int, warm: int) -> list[float]:
    """Per-call wall times (s) of ``n`` calls after ``warm`` untimed ones."""
    for _ in range(warm):
        step()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        out.append(time.perf_counter() - t0)
    return out


def matmul_peaks_gflops() -> dict[str, float]:
    """fp32 GFLOP/s of a 1024^3 product through torch's BLAS (``torch.mm``) and through oneDNN (also inside
    torch), each the best of 5 on the current thread count; ``peak`` is the faster (on the AMD EPYC this
    was developed on oneDNN ran 2.3x MKL's speed, so the BLAS alone understates the machine)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    flop = 2 * 1024 ** 3
    out = {"blas": flop / min(_time(lambda: torch.mm(a, b), 5, 1)) / 1e9}
    try:
        am, bm = a.to_mkldnn(), b.t().contiguous().to_mkldnn()
        out["onednn"] = flop / min(_time(lambda: torch._C._nn.mkldnn_linear(am, bm), 5, 1)) / 1e9
    except (RuntimeError, AttributeError):  # a torch built without oneDNN
        pass
    out["peak"] = max(out.values())
    return out


def sac_flops(obs: int, act: int, h: int, batch: int) -> float:
    """Multiply-add FLOPs of one SAC step with two critics (forward and backward products, all layers)."""
    actor = [(obs, h), (h, h), (h, 2 * act)]
    critic = [(obs + act, h), (h, h), (h, 1)]
    fl = lambda layers: sum(2 * i * o for i, o in layers) * batch  # one forward of one network
    # forward: actor on obs and next obs, 2 target critics, 2 critics, 2 critics on the actor's action;
    # backward (2 products per layer): 2 critics' weights and inputs, the actor's, and one critic's inputs
    return 2 * fl(actor) + 6 * fl(critic) + 2 * (2 * fl(critic) + fl(actor) + fl(critic))


def _sac(path: str, seed: int) -> SAC:
    algo = SAC("Pendulum-v1", SACConfig(learning_rate=1e-3, batch_size=256, learning_starts=2000, seed=seed,
                                         compiled_step=path == "compiled"))
    algo.learn(2000, progress=False, tensorboard=False)  # fills the replay buffer; no update yet
    if path == "python step":
        algo._update = SACUpdate(algo.actor, algo.critic, algo.critic_target)
    elif path.startswith("autograd"):
        algo._update = None
    return algo


def bench_sac(n: int, compile_too: bool, seed: int = 0) -> dict[str, dict]:
    out: dict[str, dict] = {}
    paths = ["compiled", "python step", "autograd"] + (["autograd + torch.compile"] if compile_too else [])
    for path in paths:
        algo = _sac(path, seed)
        if path == "compiled" and algo.update_path != "compiled":
            out[path] = {"skipped": f"update path is {algo.update_path!r} here (no compiler?)"}
            continue
        train = algo._train_step
        warm = 20
        if path.endswith("torch.compile"):
            # the step reads integer attributes (num_updates) that change every call: without this, dynamo
            # recompiles on each value until its limit and then runs that frame eagerly
            torch._dynamo.config.allow_unspec_int_on_nn_module = True
            train = torch.compile(algo._train_step)
            t0 = time.perf_counter()
            try:
                train(algo._sample()[0])
            except Exception as e:  # noqa: BLE001 - a compiler failure is a result here, not a crash
                out[path] = {"skipped": f"torch.compile failed: {type(e).__name__}: {str(e)[:200]}"}
                continue
            warm, compile_s = 20, time.perf_counter() - t0
        ts = _time(lambda: train(algo._sample()[0]), n, warm)
        out[path] = {"step_us_p50": 1e6 * float(np.median(ts)), "step_us_mean": 1e6 * float(np.mean(ts)), "steps": n,
                     "update_path": algo.update_path if not path.startswith("autograd +") else path}
        if path.endswith("torch.compile"):
            out[path]["compile_s"] = compile_s
    try:
        out["sb3"] = _sb3_sac(n, seed)
    except ImportError:
        out["sb3"] = {"skipped": "stable-baselines3 is not installed here"}
    return out


def _sb3_sac(n: int, seed: int) -> dict:
    import stable_baselines3 as sb3

    model = sb3.SAC("MlpPolicy", "Pendulum-v1", learning_rate=1e-3, batch_size=256, learning_starts=2000, seed=seed,
                    device="cpu", verbose=0)
    model.learn(2000)
    model.train(gradient_steps=20, batch_size=256)
    ts = []
    for _ in range(max(1, n // 50)):
        t0 = time.perf_counter()
        model.train(gradient_steps=50, batch_size=256)
        ts.append((time.perf_counter() - t0) / 50)
    return {"step_us_p50": 1e6 * float(np.median(ts)), "step_us_mean": 1e6 * float(np.mean(ts)),
            "steps": 50 * len(ts), "note": "timed in blocks of 50 gradient steps (SB3's train loop)"}


def _ppo(path: str, seed: int) -> tuple[PPO, tuple]:
    cfg = PPOConfig(n_envs=4, n_steps=1024, batch_size=64, n_epochs=10, gae_lambda=0.95, gamma=0.9, learning_rate=1e-3,
                    use_sde=True, sde_sample_freq=4, seed=seed, compiled_update=path == "compiled")
    algo = PPO("Pendulum-v1", cfg)
    seen: list[tuple] = []
    real = algo._update

    def spy(*args: Any) -> dict:
        seen[:] = [args]
        return real(*args)

    algo._update = spy  # type: ignore[method-assign]
    algo.learn(2 * 4 * 1024, progress=False, tensorboard=False)  # two updates: Adam's state exists
    algo._update = real  # type: ignore[method-assign]
    return algo, seen[0]


def bench_ppo(n: int, compile_too: bool, seed: int = 0) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in ["compiled", "autograd"] + (["autograd + torch.compile"] if compile_too else []):
        algo, args = _ppo(path, seed)
        if path == "compiled" and algo.update_path != "compiled":
            out[path] = {"skipped": f"update path is {algo.update_path!r} here (no compiler?)"}
            continue
        compile_s = None
        if path.endswith("torch.compile"):
            # the whole minibatch step (in-place Adam on the flat buffer) fails inductor's functionalization
            # in torch 2.13 ("mutating a non-functional tensor"): compile the forward and the loss terms, the
            # part a user can compile, and leave the gradient and the Adam step to autograd
            if algo.fused is not None:
                algo.fused.forward = torch.compile(algo.fused.forward)  # type: ignore[method-assign]
            algo._logp_ent = torch.compile(algo._logp_ent)  # type: ignore[method-assign]
            t0 = time.perf_counter()
            try:
                algo._update(*args)
            except Exception as e:  # noqa: BLE001 - a compiler failure is a result here, not a crash
                out[path] = {"skipped": f"torch.compile failed: {type(e).__name__}: {str(e)[:200]}"}
                continue
            compile_s = time.perf_counter() - t0
        ts = _time(lambda: algo._update(*args), n, 1)
        minibatches = 10 * (4 * 1024 // 64)
        out[path] = {"update_ms_p50": 1e3 * float(np.median(ts)), "minibatch_us": 1e6 * float(np.median(ts)) / minibatches,
                     "updates": n, "update_path": algo.update_path if not path.startswith("autograd +") else path}
        if compile_s is not None:
            out[path]["compile_s"] = compile_s
    return out


def main() -> None:
    ap = arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (training runs on 1)")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile paths")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    compile_too = not (args.quick or args.no_compile)
    n_sac, n_ppo = (100, 2) if args.quick else (1000, 5)
    peaks = matmul_peaks_gflops()
    peak = peaks["peak"]
    info = {"built": native.load(), "sac_products": native.gemm(), "unavailable": native.unavailable_reason()}
    sac = bench_sac(n_sac, compile_too)
    ppo = bench_ppo(n_ppo, compile_too)
    flops = sac_flops(3, 1, 256, 256)
    for r in sac.values():
        if "step_us_p50" in r:
            r["gflops"] = flops / (r["step_us_p50"] * 1e-6) / 1e9
            r["share_of_peak"] = r["gflops"] / peak
    ratios = {}
    base = sac.get("compiled", {}).get("step_us_p50")
    for k, r in sac.items():
        if base and "step_us_p50" in r and k != "compiled":
            ratios[f"sac: {k} / compiled (time)"] = r["step_us_p50"] / base
    base = ppo.get("compiled", {}).get("update_ms_p50")
    for k, r in ppo.items():
        if base and "update_ms_p50" in r and k != "compiled":
            ratios[f"ppo: {k} / compiled (time)"] = r["update_ms_p50"] / base
    print(f"cpu: {machine()['cpu']}   fp32 1024^3 product on {args.threads} thread(s): "
          + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()))
    for k, r in sac.items():
        print(f"SAC {k:26s} " + (f"{r['step_us_p50']:8.0f} us/step  {r.get('gflops', 0):6.1f} GFLOP/s ({100 * r.get('share_of_peak', 0):.0f}% of peak)"
                                 if "step_us_p50" in r else r["skipped"]))
    for k, r in ppo.items():
        print(f"PPO {k:26s} " + (f"{r['update_ms_p50']:8.1f} ms/update ({r['minibatch_us']:.0f} us/minibatch)"
                                 if "update_ms_p50" in r else r["skipped"]))
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    load = os.getloadavg()[0]
    write_result("update_step", args.quick, {
        **header("update_step", args.quick, machine(("torch", "stable-baselines3"), load_key="load_average_1min")),
        "figures": {"matmul_gflops_fp32": peaks, "threads": args.threads, "sac": sac, "ppo": ppo,
                    "ratios_time_vs_compiled": ratios, "sac_flops_per_step": flops, "native": info},
        "notes": "same networks, batch and data on every path; SAC steps include replay sampling; SB3 timed in "
                 "blocks of 50 steps inside its own train loop. load average after: %.2f" % load})


if __name__ == "__main__":
    main()
