"""Learner benchmark: transitions/s ingested over ZeroMQ and gradient updates/s, with rollout workers on the
local backend (threads) and on Ray (2 actors), in the same run; plus the bare ZeroMQ+replay ingest ceiling
against a bare PUSH/PULL pair without replay.

    python benchmarks/learner.py [--quick]

Writes benchmarks/results/learner.json (``--quick``: learner.quick.json).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

from tinker_cli.learner import make_env  # noqa: E402
from tinker_core.learner import DistributedTrainer  # noqa: E402
from tinker_core.transition import TransitionBatch  # noqa: E402
from tinker_core.transport import ControlClient, TransitionReceiver, TransitionSender, free_endpoints  # noqa: E402


class LearnerProc:
    def __init__(self, tmp: Path, **cfg):
        t, w, p, c = free_endpoints(4)
        self.cfg = {"transitions_endpoint": t, "weights_endpoint": w, "params_endpoint": p, "control_endpoint": c, **cfg}
        path = tmp / f"learner-{time.monotonic_ns()}.yaml"
        path.write_text(yaml.safe_dump({"learner": self.cfg}))
        self.log = open(path.with_suffix(".log"), "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "tinker_cli", "learner", "--config", str(path)],
                                     cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        self.cli = ControlClient(self.cfg["control_endpoint"], timeout_ms=180_000)
        self.status()

    def ctl(self, cmd: str, **values) -> dict:
        req = {"cmd": cmd, **({"values": values} if values else {})}
        return self.cli.request(req)

    def status(self) -> dict:
        return self.ctl("status")

    def stop(self) -> None:
        try:
            self.ctl("stop")
            self.proc.wait(timeout=60)
        except Exception:
            self.proc.kill()
        self.cli.close()


def transitions(n: int) -> list:
    import numpy as np

    from tinker_core.transition import Transition

    env = make_env("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    out = []
    for _ in range(n):
        a = env.action_space.sample()
        nxt, r, te, tr, _ = env.step(a)
        out.append(Transition(obs, np.asarray(a, np.float32), float(r), te, tr, {"source": "sim"}, nxt))
        obs = env.reset()[0] if (te or tr) else nxt
    return out


def bare_ingest(ts: list, reps: int) -> float:
    """The floor: PUSH/PULL with the same framing, no replay."""
    rx = TransitionReceiver(free_endpoints(1)[0])
    tx = TransitionSender(rx.endpoint, hwm=100_000)
    time.sleep(0.2)
    t0 = time.perf_counter()
    n = 0
    for _ in range(reps):
        tx.send_many(ts)
        got = 0
        while got < len(ts):
            for m in rx.recv_many(max_n=512, timeout_ms=1000):
                got += len(m) if isinstance(m, TransitionBatch) else 1
        n += len(ts)
    dt = time.perf_counter() - t0
    tx.close()
    rx.close()
    return n / dt


def learner_ingest(lp: LearnerProc, ts: list, reps: int) -> float:
    """Transitions/s the learner process ingests into replay (training paused so only ingest is measured)."""
    lp.ctl("pause")
    tx = TransitionSender(lp.cfg["transitions_endpoint"], hwm=100_000)
    time.sleep(0.3)
    start = sum(lp.status()["ingested"].values())
    t0 = time.perf_counter()
    for _ in range(reps):
        tx.send_many(ts)
    target = start + reps * len(ts) - tx.dropped
    while sum(lp.status()["ingested"].values()) < target:
        time.sleep(0.02)
    dt = time.perf_counter() - t0
    tx.close()
    lp.ctl("resume")
    return (target - start) / dt


def with_workers(lp: LearnerProc, backend: str, steps: int) -> dict:
    """2 rollout workers (async) feeding the learner while it trains; rates measured at the learner."""
    env_factory = functools.partial(make_env, "Pendulum-v1")
    tr = DistributedTrainer(env_factory, lp.cfg["transitions_endpoint"], lp.cfg["params_endpoint"],
                            lp.cfg["control_endpoint"], backend=backend, num_workers=2,
                            resources_per_worker={"CPU": 1, "GPU": 0}, sync="async", worker_cache_size=200,
                            param_sync_every=1000)
    tr.start()
    assert all(tr.wait_params(120)), "workers got no parameters from the learner"
    tr.run(200)  # warm
    s0 = lp.status()
    t0 = time.perf_counter()
    out = tr.run(steps)
    dt = time.perf_counter() - t0
    s1 = lp.status()
    tr.shutdown()
    ing = sum(s1["ingested"].values()) - sum(s0["ingested"].values())
    return {"env_steps_per_s": steps / dt, "ingested_per_s": ing / dt,
            "updates_per_s": (s1["updates"] - s0["updates"]) / dt, "dropped": out["dropped"]}


def main() -> None:
    ap = arg_parser(__doc__, "fewer transitions, repetitions and worker runs",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    args = ap.parse_args()
    n, reps, steps = (2000, 3, 2000) if args.quick else (5000, 6, 8000)
    fig: dict = {}
    ts = transitions(n)
    fig["bare_zmq_per_s"] = round(bare_ingest(ts, reps), 1)
    tmp = Path(tempfile.mkdtemp(prefix="tinker-bench-"))
    lp = LearnerProc(tmp, env_id="Pendulum-v1", batch_size=256, warmup=1000, update_interval=0, publish_every=0,
                     param_sync_every=200, replay_capacity=200_000,
                     algo_kwargs={"net_arch": [256, 256], "torch_threads": 1})
    try:
        fig["learner_ingest_per_s"] = round(learner_ingest(lp, ts, reps), 1)
        fig["learner_ingest_ratio_vs_bare_zmq"] = round(fig["learner_ingest_per_s"] / fig["bare_zmq_per_s"], 3)
        s0 = lp.status()
        time.sleep(5.0 if args.quick else 15.0)
        s1 = lp.status()
        fig["learner_alone_updates_per_s"] = round((s1["updates"] - s0["updates"]) / (s1["uptime_s"] - s0["uptime_s"]), 1)
        import ray

        ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="rt", dir="/tmp"),
                 log_to_driver=False)
        rows = {}
        for backend in ("local", "ray", "local", "ray") if not args.quick else ("local", "ray"):
            r = with_workers(lp, backend, steps)
            rows.setdefault(backend, []).append(r)
        ray.shutdown()
        for backend, rs in rows.items():
            for k in ("env_steps_per_s", "ingested_per_s", "updates_per_s"):
                vals = sorted(r[k] for r in rs)
                fig[f"{backend}_2workers_{k}"] = round(vals[len(vals) // 2], 1)
            fig[f"{backend}_2workers_dropped"] = sum(r["dropped"] for r in rs)
        for k in ("ingested_per_s", "updates_per_s"):
            fig[f"ray_vs_local_{k.replace('_per_s', '')}_ratio"] = round(
                fig[f"ray_2workers_{k}"] / max(fig[f"local_2workers_{k}"], 1e-9), 3)
        fig["device"] = lp.status()["device"]
    finally:
        lp.stop()
    result = {
        **header("learner", args.quick, machine()),
        "figures": fig,
        "goals": {},
        "notes": ("Pendulum-v1, SAC [256,256], batch 256, one torch thread, learner in its own process training "
                  "continuously (update_interval 0). learner_ingest: a sender blasting pre-made transitions at the "
                  "paused learner (ZeroMQ + decode + replay add); bare_zmq: the same framing into a bare PULL. "
                  "Workers: 2 async rollout workers, local = threads in the benchmark process, ray = 2 actors on "
                  "ray.init(num_cpus=2); all on the same 2 shared cores, so workers and learner compete for CPU. "
                  f"load average at the end: {os.getloadavg()[0]:.1f}"),
    }
    write_result("learner", args.quick, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
