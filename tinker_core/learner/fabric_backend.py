"""Data-parallel learner updates through Lightning Fabric (``learner: {backend: fabric, devices: N}``).

Each process holds the same algorithm and takes its own shard of the global batch; before every
optimizer step the gradients of that optimizer's parameters are averaged over the processes (one
all-reduce of one flat buffer per optimizer, through ``Fabric.all_reduce``), so every process takes
the same Adam step and the parameters stay identical across ranks. With equal shards, the mean of
the shards' mean-loss gradients is the gradient of the mean loss over the whole batch: the step is
the single-process step on the concatenated batch (tests/learner/test_fabric.py holds it to that).

The algorithm classes are unchanged. The gradients must exist as ``.grad`` before an optimizer step,
so the back-end runs the autograd path: tinker's compiled steps (``sac_native``) and written-out
Python steps compute the gradients and the Adam step inside one call, with nothing in between to
all-reduce. `DataParallelUpdate` turns them off and says so once (`native.note_update_path`).

On CPU the processes talk over gloo. What it buys on this machine is measured by
benchmarks/learner_fabric.py (see tinker_core/learner/README.md, "Data-parallel updates").

    python -m tinker_core.learner.fabric_backend --devices 2 --steps 50 --batch 256 --out /tmp/fab
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tinker_core.algos import native
from tinker_core.algos.buffers import ReplaySamples
from tinker_core.algos.optim import update_scope
from tinker_core.errors import ConfigError

log = logging.getLogger("tinker.learner")

BACKENDS = ("local", "fabric")
ACCELERATORS = ("cpu", "cuda", "gpu", "auto")
STRATEGIES = ("ddp", "ddp_spawn")


def require_lightning(field: str = "LearnerConfig.backend") -> Any:
    """The ``lightning.fabric`` module, or a ConfigError naming ``field`` when Lightning is not installed."""
    try:
        import lightning.fabric as lf
    except ImportError as e:
        raise ConfigError(f"{field}: 'fabric' needs Lightning (lightning==2.6.6, installed by `make setup`), "
                          f"which cannot be imported here ({e}); use backend: local") from None
    return lf


@dataclass
class FabricConfig:
    """How the data-parallel processes are made."""

    devices: int = 2
    """Processes (one per device; on the CPU, each runs one torch thread)."""
    accelerator: str = "cpu"
    """"cpu" (gloo), "cuda"/"gpu" (nccl) or "auto"."""
    strategy: str = "ddp"
    """"ddp" (the script is started again per rank) or "ddp_spawn" (a function is spawned per rank)."""

    def __post_init__(self) -> None:
        if int(self.devices) < 1:
            raise ConfigError(f"FabricConfig.devices: expected an integer >= 1, got {self.devices!r}")
        if self.accelerator not in ACCELERATORS:
            raise ConfigError(f"FabricConfig.accelerator: expected one of {ACCELERATORS}, got {self.accelerator!r}")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"FabricConfig.strategy: expected one of {STRATEGIES}, got {self.strategy!r}")


def make_fabric(cfg: FabricConfig) -> Any:
    """A `lightning.fabric.Fabric` for ``cfg`` (gloo between CPU processes); call ``.launch()`` on it."""
    lf = require_lightning()
    from lightning.fabric.strategies import DDPStrategy

    cpu = cfg.accelerator == "cpu"
    strategy = DDPStrategy(process_group_backend="gloo" if cpu else None,
                           start_method="spawn" if cfg.strategy == "ddp_spawn" else "popen")
    return lf.Fabric(accelerator=cfg.accelerator, devices=int(cfg.devices), strategy=strategy, precision="32-true")


def train_step(algo: Any, samples: ReplaySamples) -> torch.Tensor:
    """One update of ``algo`` on ``samples`` (returns |TD| per sample), in the `update_scope` every update runs in;
    data-parallel where a `DataParallelUpdate` hooks the algorithm's optimizers."""
    with update_scope():
        return algo._train_step(samples)


class DataParallelUpdate:
    """An algorithm's gradient steps made data-parallel over ``fabric``'s processes.

    Construct it on every rank after ``fabric.launch()``: it switches the algorithm to its autograd
    path, copies rank 0's parameters, buffers and optimizer-free state to every rank, reseeds the
    algorithm's sampling generator per rank, and hooks every optimizer so its gradients are averaged
    over the ranks before it steps. Then call the algorithm's step (``algo._train_step(shard)``) or
    `step` as usual, each rank with its own shard."""

    def __init__(self, fabric: Any, algo: Any, seed: int = 0):
        self.fabric, self.algo = fabric, algo
        self.rank, self.world = int(fabric.global_rank), int(fabric.world_size)
        if getattr(algo, "_update", None) is not None:
            algo._update = None  # SAC's compiled / written-out step: gradients never reach .grad between steps
            native.note_update_path(type(algo).__name__, "autograd",
                                    "the Fabric back-end all-reduces gradients between backward and the optimizer "
                                    "step, which the compiled step does in one call")
        self.all_reduces, self.reduce_s = 0, 0.0  # collectives made and the wall time spent in them
        self._broadcast_state()
        if getattr(algo, "gen", None) is not None:
            algo.gen.manual_seed(int(seed) * 1000 + self.rank)  # independent noise per shard, as per sample
        self._hooks = [opt.register_step_pre_hook(self._average_grads)
                       for opt in algo._optimizers().values() if opt is not None]

    def _broadcast_state(self) -> None:
        """Every rank starts from rank 0's parameters and buffers (targets included)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        for t in itertools.chain(self.algo.parameters(), self.algo.buffers()):
            dist.broadcast(t.data, src=0)

    def _average_grads(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Optimizer pre-step hook: replace each gradient by its mean over the ranks (one flat all-reduce)."""
        if self.world == 1:
            return
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return
        t0 = time.perf_counter()
        flat = torch.cat([g.reshape(-1) for g in grads])
        flat = self.fabric.all_reduce(flat, reduce_op="mean")
        torch._foreach_copy_(grads, [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in grads]), grads)])
        self.reduce_s += time.perf_counter() - t0
        self.all_reduces += 1

    def step(self, shard: ReplaySamples) -> torch.Tensor:
        """One data-parallel update on this rank's shard (returns the shard's |TD| per sample): `train_step`."""
        return train_step(self.algo, shard)

    def close(self) -> None:
        """Remove the optimizer hooks (the algorithm trains alone again)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []


def shard(samples: ReplaySamples, rank: int, world: int) -> ReplaySamples:
    """Rank ``rank``'s equal slice of a batch (the batch size must divide by ``world``)."""
    n = samples.actions.shape[0]
    if n % world:
        raise ConfigError(f"batch_size: expected a multiple of devices={world} (equal shards), got {n}")
    k = n // world
    cut = lambda t: t[rank * k:(rank + 1) * k]  # noqa: E731
    return ReplaySamples(*(None if t is None else cut(t) for t in samples))


# -- a self-contained run: the test's and the benchmark's processes -------------------------------------

def synthetic_batch(n: int, obs_dim: int, act_dim: int, seed: int) -> ReplaySamples:
    """A fixed replay batch (what a replay would return), the same on every rank for a given seed."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return ReplaySamples(r(n, obs_dim), torch.rand(n, act_dim, generator=g) * 2 - 1, r(n, obs_dim), r(n),
                         (torch.rand(n, generator=g) < 0.05).float())


def make_sac(hidden: int, seed: int, deterministic: bool, compiled: bool) -> Any:
    """RL Zoo's Pendulum SAC (two critics, ``hidden`` x ``hidden``); ``deterministic`` pins the policy's
    noise to nothing (log std at its floor, entropy coefficient 0), so a step is a function of its batch."""
    from tinker_core.algos import SAC, SACConfig

    algo = SAC("Pendulum-v1", SACConfig(learning_rate=1e-3, net_arch=[hidden, hidden], seed=seed, torch_threads=1,
                                         ent_coef="0" if deterministic else "auto", compiled_step=compiled))
    if deterministic:
        with torch.no_grad():
            algo.actor.log_std.weight.zero_()
            algo.actor.log_std.bias.fill_(-100.0)  # clamped to LOG_STD_MIN: std ~ 2e-9, zero gradient
    return algo


def flat_state(algo: Any) -> np.ndarray:
    """Every parameter and buffer of the algorithm, concatenated (for comparing ranks and runs)."""
    return torch.cat([t.detach().reshape(-1) for t in itertools.chain(algo.parameters(), algo.buffers())]).numpy()


def run(devices: int, steps: int, batch: int, hidden: int, seed: int, deterministic: bool, path: str,
        out: Path, warm: int = 5) -> dict:
    """``steps`` updates of SAC on fixed batches of ``batch`` samples in all: over ``devices`` Fabric
    processes (``devices`` > 1, autograd path) or in this process (``path``: "autograd" or "compiled").
    Each rank writes ``rank{r}_start.npy`` and ``rank{r}.npy`` (its state before and after) into ``out``; rank 0 returns and writes ``result.json``."""
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    algo = make_sac(hidden, seed, deterministic, compiled=path == "compiled" and devices == 1)
    obs_dim, act_dim = int(np.prod(algo.obs_spec.shape)), int(np.prod(algo.action_spec.shape))
    batches = [synthetic_batch(batch, obs_dim, act_dim, seed * 7919 + i) for i in range(steps + warm)]
    rank, world, dp = 0, 1, None
    if devices > 1:
        fabric = make_fabric(FabricConfig(devices=devices))
        fabric.launch()
        dp = DataParallelUpdate(fabric, algo, seed)
        rank, world = dp.rank, dp.world
    elif path == "autograd":
        algo._update = None
    mine = [shard(b, rank, world) for b in batches]
    step = dp.step if dp is not None else (lambda b: train_step(algo, b))  # noqa: E731
    np.save(out / f"rank{rank}_start.npy", flat_state(algo))
    for b in mine[:steps]:  # the steps compared by the test
        step(b)
    state = flat_state(algo)
    np.save(out / f"rank{rank}.npy", state)
    ts = []  # timing: all batches again (after the state was saved), each step timed
    for i, b in enumerate(mine):
        if dp is not None and i == warm:
            dp.reduce_s = 0.0
        t0 = time.perf_counter()
        step(b)
        ts.append(time.perf_counter() - t0)
    ts = ts[warm:]
    if dp is not None:
        dp.fabric.barrier()
    result = {"devices": devices, "path": algo.update_path, "global_batch": batch, "shard": batch // world,
              "hidden": hidden, "steps": steps, "timed_steps": len(ts), "step_ms_p50": 1e3 * float(np.median(ts)),
              "step_ms_mean": 1e3 * float(np.mean(ts)), "updates_per_s": 1.0 / float(np.mean(ts)),
              "samples_per_s": batch / float(np.mean(ts)),
              "all_reduces_per_update": dp.all_reduces / (steps + len(mine)) if dp else 0,
              "all_reduce_ms_per_update": 1e3 * dp.reduce_s / len(ts) if dp else 0.0}
    if rank == 0:
        (out / "result.json").write_text(json.dumps(result, indent=1))
    if dp is not None:
        import torch.distributed as dist

        if dist.is_initialized():  # stop gloo's threads before the interpreter exits: a live process group at exit
            dist.destroy_process_group()  # aborted a rank once ("terminate called without an active exception")
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--steps", type=int, default=3, help="updates before the state is saved (then timed again)")
    p.add_argument("--batch", type=int, default=256, help="global batch (split equally over the devices)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deterministic", action="store_true", help="policy noise pinned to nothing (equivalence test)")
    p.add_argument("--path", choices=("autograd", "compiled"), default="autograd", help="single process only")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    run(a.devices, a.steps, a.batch, a.hidden, a.seed, a.deterministic, a.path, a.out)


if __name__ == "__main__":
    main()
