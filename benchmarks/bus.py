"""Bus benchmark: what the tinker bus costs on top of the work it carries.

1. In-process: `Pipeline.run` over cheap pure-Python modules (a Pendulum-sized env, identity
   perception, constant policy, counting learner) against a plain Python loop that calls the same
   modules in the same order, in the same run, alternating. The difference per step is the bus
   overhead (validation, flow monitor, edge bookkeeping), with run-time validation off and on. Also:
   the cost of one `Spec.check` and of one plain Python function call, for scale.
2. An evaluation on the simulated arm: `tinker_core.evaluate.evaluate` (which runs the Pipeline: every edge
   checked, the flow monitor) against a bare loop over the same env (``tinker/ArmReach-v0`` with the
   SafetyWrapper) and the same shipped bundle's onnxruntime policy, the same seeds, alternating; CPU time per step
   of this thread, the order swapped every repetition. The difference is what the pipeline adds to a real
   evaluation step (physics and resets included).
3. The training loop's edges (`tinker_core.training.flow.WatchedVecEnv`: every batch checked, both edges measured):
   PPO on Pendulum-v1 (8 envs, its numpy rollout path) and SAC on Pendulum-v1 (1 env), env steps per second of
   ``learn`` with ``watch_edges`` on against the same ``learn`` with it off, alternating, thread CPU time.
4. Between two processes over ZeroMQ (tcp on loopback): transitions with 4 KB observations
   (float32[1024]) from `TransitionSender` to `TransitionReceiver`, one message per transition and
   batched with ``send_many``, against raw pyzmq PUSH/PULL of the same 4 KB per message, alternating.
   The receiver runs in its own (spawned) process; throughput is counted end to end.

    python benchmarks/bus.py [--quick]

Writes benchmarks/results/bus.json (``--quick``: bus.quick.json).
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time
import timeit

import numpy as np

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

from tinker_core.module import ModuleBase  # noqa: E402
from tinker_core.pipeline import Pipeline  # noqa: E402
from tinker_core.spec import Spec  # noqa: E402
from tinker_core.transition import Transition, TransitionSpec  # noqa: E402

OBS = Spec((3,), "float32", [-1.0, -1.0, -8.0], [1.0, 1.0, 8.0])
ACT = Spec((1,), "float32", -2.0, 2.0)


# -- in-process -------------------------------------------------------------------------------------

class CheapEnv(ModuleBase):
    """Pendulum-sized observations, no physics: the bus, not the env, is what is measured."""

    input_name, output_name = "action", "obs"

    def __init__(self) -> None:
        super().__init__()
        self.input_spec, self.output_spec = ACT, OBS
        self._obs = [np.array([0.1 * i % 1, -0.5, 3.0], np.float32) for i in range(16)]
        self._i = 0

    def reset_env(self, seed=None):
        return self._obs[0], {}

    def step(self, action):
        self._i = (self._i + 1) & 15
        return self._obs[self._i], -1.0, False, False, {}


class Through(ModuleBase):
    input_name = output_name = "obs"

    def __init__(self) -> None:
        super().__init__()
        self.input_spec = self.output_spec = OBS

    def forward(self, x):
        return x


class Constant(ModuleBase):
    input_name, output_name = "obs", "action"

    def __init__(self) -> None:
        super().__init__()
        self.input_spec, self.output_spec = OBS, ACT
        self._a = np.array([0.5], np.float32)

    def forward(self, x):
        return self._a


class Count(ModuleBase):
    input_name = "transition"

    def __init__(self) -> None:
        super().__init__()
        self.input_spec = TransitionSpec(OBS, ACT)
        self.n = 0

    def forward(self, t):
        self.n += 1
        return None


def plain_loop(env: CheapEnv, perc: Through, pol: Constant, learner: Count, steps: int) -> None:
    """The same calls the pipeline makes per step, with nothing around them."""
    obs, _ = env.reset_env()
    for _ in range(steps):
        feats = perc(obs)
        action = pol(feats)
        nxt, r, term, trunc, info = env.step(action)
        t = Transition(obs, action, float(r), bool(term), bool(trunc), dict(info), nxt)
        learner(t)
        obs = nxt


def bench_in_process(steps: int, reps: int, quick: bool) -> dict:
    env, perc, pol, learner = CheapEnv(), Through(), Constant(), Count()
    pipes = {v: Pipeline(validate=v).connect(env, perc, pol, learner) for v in (False, True)}
    times: dict[str, list[float]] = {"plain": [], "off": [], "on": []}
    plain_loop(env, perc, pol, learner, 2000)  # warm up every path once
    for p in pipes.values():
        p.run(2000)
    # Short alternating chunks, timed in CPU time of this thread: other jobs on the shared machine
    # then hit all three alike and their time slices are not counted.
    clock = time.thread_time
    for _ in range(reps):
        t0 = clock()
        plain_loop(env, perc, pol, learner, steps)
        times["plain"].append((clock() - t0) / steps * 1e6)
        for key, v in (("off", False), ("on", True)):
            t0 = clock()
            pipes[v].run(steps)
            times[key].append((clock() - t0) / steps * 1e6)
    plain = statistics.median(times["plain"])
    off = [t - p for t, p in zip(times["off"], times["plain"])]
    on = [t - p for t, p in zip(times["on"], times["plain"])]

    # Scale: one plain Python call, and one Spec.check of a passing value (bounded and unbounded, 3 and 1024 floats).
    n = 50_000 if quick else 200_000

    def f(x):
        return x

    x3 = np.array([0.5, -0.2, 3.0], np.float32)
    x1k = np.random.default_rng(0).uniform(-1, 1, 1024).astype(np.float32)
    s1k = Spec((1024,), "float32", -1.0, 1.0)
    u1k = Spec((1024,), "float32")
    def us(fn, number: int) -> float:
        return min(timeit.Timer(fn, timer=time.thread_time).repeat(repeat=5, number=number)) / number * 1e6

    call_us = us(lambda: f(x3), n)
    loop_us = us(lambda: None, n)
    check = {name: us(lambda s=s, v=v: s.check(v, "x"), n // 4)
             for name, s, v in (("bounded_3", OBS, x3), ("bounded_1024", s1k, x1k), ("unbounded_1024", u1k, x1k))}
    ts = TransitionSpec(OBS, ACT)
    tr = Transition(x3, np.array([0.5], np.float32), -1.0, False, False, {}, x3)
    check["transition"] = us(lambda: ts.check(tr), n // 4)
    return {
        "plain_loop_us_per_step": plain,
        "pipeline_validation_off_us_per_step": statistics.median(times["off"]),
        "pipeline_validation_on_us_per_step": statistics.median(times["on"]),
        "bus_overhead_validation_off_us": statistics.median(off),
        "bus_overhead_validation_off_us_min": min(off),
        "bus_overhead_validation_off_us_max": max(off),
        "bus_overhead_validation_on_us": statistics.median(on),
        "bus_overhead_validation_on_us_min": min(on),
        "bus_overhead_validation_on_us_max": max(on),
        "validation_cost_us_per_step": statistics.median(on) - statistics.median(off),
        # policy and env inputs, the learner's next_obs (which is the next step's obs, not checked twice)
        # and a finite-reward test; the learner's obs/action equal specs already checked this step
        "spec_checks_per_step": 3,
        "overhead_off_to_plain_loop_ratio": statistics.median(off) / plain,
        "plain_python_call_us": max(call_us - loop_us, 0.0),
        "spec_check_bounded_float32x3_us": check["bounded_3"],
        "spec_check_bounded_float32x1024_us": check["bounded_1024"],
        "spec_check_unbounded_float32x1024_us": check["unbounded_1024"],
        "transition_spec_check_us": check["transition"],
    }


# -- between processes ------------------------------------------------------------------------------

OBS_BYTES = 4096


def receiver_main(conn) -> None:
    """Child process: for each job (mode, endpoint, n) receive n transitions/messages, reply with timing."""
    import zmq

    from tinker_core.transport import TransitionReceiver

    while True:
        job = conn.recv()
        if job is None:
            return
        mode, endpoint, n = job
        if mode == "raw":
            ctx = zmq.Context()
            sock = ctx.socket(zmq.PULL)
            sock.setsockopt(zmq.RCVHWM, 10000)
            sock.setsockopt(zmq.RCVTIMEO, 10000)  # a bare recv loop: the fastest raw receiver
            sock.connect(endpoint)
            conn.send("ready")
            got, first, cpu0 = 0, None, time.process_time()
            while got < n:
                try:
                    msg = sock.recv(copy=True)
                except zmq.Again:
                    break
                if first is None:
                    first = time.perf_counter()
                got += 1
                last_len = len(msg)
            conn.send((got, first, time.perf_counter(), last_len, time.process_time() - cpu0))
            sock.close(0)
            ctx.term()
        else:
            r = TransitionReceiver(endpoint, bind=False)
            conn.send("ready")
            got, first, check, cpu0 = 0, None, 0.0, time.process_time()
            while got < n:
                ts = r.recv_many(4096, 10000)
                if not ts:
                    break
                if first is None:
                    first = time.perf_counter()
                got += len(ts)
                check += float(ts[-1].obs[0])
            conn.send((got, first, time.perf_counter(), r.rejected, time.process_time() - cpu0))
            r.close()


def bench_zmq(n: int, reps: int) -> dict:
    import zmq

    from tinker_core.transport import TransitionSender

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=receiver_main, args=(child,), daemon=True)
    proc.start()
    obs = np.random.default_rng(0).standard_normal(OBS_BYTES // 4).astype(np.float32)
    act = np.zeros(2, np.float32)
    rates: dict[str, list[float]] = {"raw": [], "send": [], "send_many": []}
    cpu: dict[str, list[tuple[float, float]]] = {"raw": [], "send": [], "send_many": []}
    wire: dict[str, int] = {}

    def run(mode: str) -> None:
        if mode == "raw":
            zctx = zmq.Context()
            sock = zctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.SNDHWM, 10000)
            port = sock.bind_to_random_port("tcp://127.0.0.1")
            endpoint = f"tcp://127.0.0.1:{port}"
        else:
            s = TransitionSender("tcp://127.0.0.1:*", bind=True, block=True)
            endpoint = s.endpoint
        parent.send(("raw" if mode == "raw" else "tinker", endpoint, n))
        assert parent.recv() == "ready"
        time.sleep(0.3)  # connection established before the clock starts
        t0 = time.perf_counter()
        c0 = time.process_time()
        if mode == "raw":
            buf = obs.tobytes()
            for _ in range(n):
                sock.send(buf, copy=True)
        elif mode == "send":
            for i in range(n):
                s.send(Transition(obs, act, 0.0, False))
        else:
            chunk = 64
            for i in range(0, n, chunk):
                s.send_many([Transition(obs, act, 0.0, False) for _ in range(min(chunk, n - i))])
        got, first, end, extra, rx_cpu = parent.recv()
        tx_cpu = time.process_time() - c0
        if got != n:
            raise RuntimeError(f"{mode}: receiver got {got} of {n}")
        rates[mode].append(n / (end - t0))
        cpu[mode].append((tx_cpu / n * 1e6, rx_cpu / n * 1e6))
        if mode == "raw":
            wire[mode] = extra
            sock.close(0)
            zctx.term()
        else:
            wire[mode] = s.bytes_sent // n
            s.close()

    for mode in ("raw", "send", "send_many"):  # warm up
        n_real = n
        n = min(n, 5000)
        run(mode)
        n = n_real
        rates[mode].clear()
        cpu[mode].clear()
    for _ in range(reps):
        for mode in ("raw", "send", "send_many"):
            run(mode)
    parent.send(None)
    proc.join(timeout=10)
    med = {k: statistics.median(v) for k, v in rates.items()}
    tx = {k: statistics.median(c[0] for c in v) for k, v in cpu.items()}
    rx = {k: statistics.median(c[1] for c in v) for k, v in cpu.items()}
    # CPU time per message on each side (process time: the ZeroMQ I/O thread included) does not
    # count the time slices other jobs take, so it holds on a busy machine where wall-clock rates do not.
    cpu_fig = {}
    for k in ("raw", "send", "send_many"):
        name = "raw_pyzmq" if k == "raw" else f"tinker_{k}"
        cpu_fig[f"{name}_sender_cpu_us"] = tx[k]
        cpu_fig[f"{name}_receiver_cpu_us"] = rx[k]
        cpu_fig[f"{name}_cpu_bound_per_s"] = 1e6 / max(tx[k], rx[k])
    cpu_fig["send_to_raw_cpu_bound_ratio"] = cpu_fig["tinker_send_cpu_bound_per_s"] / cpu_fig["raw_pyzmq_cpu_bound_per_s"]
    cpu_fig["send_many_to_raw_cpu_bound_ratio"] = (cpu_fig["tinker_send_many_cpu_bound_per_s"]
                                                   / cpu_fig["raw_pyzmq_cpu_bound_per_s"])
    return {**cpu_fig,
        "raw_pyzmq_4kb_msgs_per_s": med["raw"],
        "tinker_send_transitions_per_s": med["send"],
        "tinker_send_many_transitions_per_s": med["send_many"],
        "tinker_send_transitions_per_s_min": min(rates["send"]),
        "tinker_send_many_transitions_per_s_min": min(rates["send_many"]),
        "raw_pyzmq_4kb_msgs_per_s_min": min(rates["raw"]),
        "send_to_raw_ratio": med["send"] / med["raw"],
        "send_many_to_raw_ratio": med["send_many"] / med["raw"],
        "raw_bytes_per_msg": wire["raw"],
        "tinker_send_bytes_per_transition": wire["send"],
        "tinker_send_many_bytes_per_transition": wire["send_many"],
    }


def bare_evaluation(env, policy, episodes: int, seed: int) -> int:
    """The evaluation loop with nothing around it: reset with seed + k, step the policy's action until the end."""
    steps = 0
    for k in range(episodes):
        obs, _ = env.reset(seed=seed + k)
        done = False
        while not done:
            obs, _, term, trunc, _ = env.step(policy(obs))
            done, steps = term or trunc, steps + 1
    return steps


def bench_evaluation(episodes: int, reps: int) -> dict:
    from tinker_cli._compose import load_policy, make_env
    from tinker_core.evaluate import evaluate

    env = make_env("tinker/ArmReach-v0")
    policy = load_policy(ROOT / "pretrained" / "arm_reach" / "bundle")
    clock = time.thread_time
    times: dict[str, list[float]] = {"bare": [], "pipeline": []}
    bare_evaluation(env, policy, 2, 0)  # warm up both paths once
    evaluate(env, policy, 2, seed=0)
    def bare(seed: int) -> int:
        return bare_evaluation(env, policy, episodes, seed)

    def piped(seed: int) -> int:
        return sum(row["steps"] for row in evaluate(env, policy, episodes, seed=seed).per_episode)

    for r in range(reps):
        seed, steps = 1000 + r * episodes, {}
        order = (("bare", bare), ("pipeline", piped))
        for name, fn in (order if r % 2 == 0 else order[::-1]):
            t0 = clock()
            steps[name] = fn(seed)
            times[name].append((clock() - t0) / steps[name] * 1e6)
        if steps["bare"] != steps["pipeline"]:  # the same seeds, policy and env: the same episodes
            raise RuntimeError(f"evaluation: the pipeline ran {steps['pipeline']} steps, the bare loop {steps['bare']}")
    env.close()
    bare_us, piped_us = statistics.median(times["bare"]), statistics.median(times["pipeline"])
    return {"eval_bare_us_per_step": bare_us, "eval_pipeline_us_per_step": piped_us,
            "eval_bare_us_per_step_spread": max(times["bare"]) / min(times["bare"]),
            "eval_pipeline_overhead_us": statistics.median(p - b for p, b in zip(times["pipeline"], times["bare"])),
            "eval_pipeline_to_bare_ratio": piped_us / bare_us}


def bench_training(reps: int) -> dict:
    import torch

    from tinker_core.algos import PPO, SAC, PPOConfig, SACConfig

    torch.set_num_threads(1)
    clock = time.thread_time
    out: dict[str, float] = {}
    for name, make, steps in (
            ("ppo", lambda watch: PPO("Pendulum-v1", PPOConfig(n_envs=8, n_steps=256, batch_size=256, n_epochs=2,
                                                               seed=0, watch_edges=watch)), 8 * 256 * 2),
            ("sac", lambda watch: SAC("Pendulum-v1", SACConfig(learning_starts=100, seed=0, watch_edges=watch)), 600)):
        algos = {w: make(w) for w in (False, True)}
        for a in algos.values():
            a.learn(steps, progress=False, tensorboard=False)  # warm up (builds, first rollouts)
        rates: dict[bool, list[float]] = {False: [], True: []}
        for r in range(reps):
            for w in ((False, True) if r % 2 == 0 else (True, False)):
                t0 = clock()
                algos[w].learn(steps, progress=False, tensorboard=False)
                rates[w].append(steps / (clock() - t0))
        off, on = statistics.median(rates[False]), statistics.median(rates[True])
        out.update({f"train_{name}_steps_per_s_edges_off": off, f"train_{name}_steps_per_s_edges_on": on,
                    f"train_{name}_edges_on_to_off_ratio": on / off})
    return out


def main() -> int:
    ap = arg_parser(__doc__.split("\n\n")[0])
    args = ap.parse_args()
    steps, reps_in = (5_000, 8) if args.quick else (5_000, 60)
    n_zmq, reps_zmq = (30_000, 1) if args.quick else (200_000, 3)

    print("in-process bus ...", flush=True)
    fig = bench_in_process(steps, reps_in, args.quick)
    for k, v in fig.items():
        print(f"  {k}: {v:.3f}")
    print("evaluation on the simulated arm: evaluate() through the pipeline vs a bare loop ...", flush=True)
    ev = bench_evaluation(*((10, 8) if args.quick else (20, 30)))
    for k, v in ev.items():
        print(f"  {k}: {v:.3f}")
    fig.update(ev)
    print("the training loop's edges: learn with watch_edges on vs off ...", flush=True)
    tr = bench_training(3 if args.quick else 8)
    for k, v in tr.items():
        print(f"  {k}: {v:.3f}")
    fig.update(tr)
    print("ZeroMQ between two processes ...", flush=True)
    z = bench_zmq(n_zmq, reps_zmq)
    for k, v in z.items():
        print(f"  {k}: {v:,.3f}")
    fig.update(z)
    result = {
        **header("bus", args.quick, machine()),
        "figures": {k: round(v, 4) if isinstance(v, float) else v for k, v in fig.items()},
        "goals": {
            "bus_overhead_validation_off_us": "<= 5",
            "bus_overhead_validation_on_us": "<= 20",
            "eval_pipeline_to_bare_ratio": "<= 1.05",
            "train_ppo_edges_on_to_off_ratio": ">= 0.95",
            "train_sac_edges_on_to_off_ratio": ">= 0.95",
            "tinker_send_many_transitions_per_s": ">= 100000",
            "send_many_to_raw_ratio": ">= 0.6",
            "tinker_send_transitions_per_s": ">= 100000 (one message per transition; see notes)",
            "send_to_raw_ratio": ">= 0.6 (one message per transition)",
        },
        "notes": (f"in-process: {reps_in} alternating chunks of {steps} steps, thread CPU time, overhead = "
                  "pipeline - plain loop per step (median of per-chunk differences); "
                  f"evaluation: {'10 episodes x 8' if args.quick else '20 episodes x 30'} alternating reps, thread CPU "
                  "time per step, seeds 1000 on, the same for both; training: "
                  f"{3 if args.quick else 8} alternating learn() calls per side, thread CPU time; "
                  f"ZeroMQ: {n_zmq} transitions x {reps_zmq} alternating reps over tcp loopback, receiver in a "
                  "spawned process, end-to-end rate; the machine is shared by other jobs, so ratios count more "
                  "than absolute figures."),
    }
    out = write_result("bus", args.quick, result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
