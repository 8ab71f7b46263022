"""`Learner`: the training process. Ingests transitions over ZeroMQ, trains, checkpoints, publishes.

One loop, one thread, so training state is never shared: each `tick` answers pending control
requests, drains the transition socket into replay (``info["source"]`` "real" goes to the real-robot
replay, anything else to simulation), runs gradient updates within the ``update_interval`` budget,
and at their intervals sends parameters to rollout workers, checkpoints, and runs the evaluation
gate. On-policy algorithms (PPO: ``update_from_rollout``) skip replay: each source stream's
transitions are kept in order and one update runs per ``n_steps`` of them (keep ``param_sync_every``
at 1 so workers act with the policy being updated). A bundle is written (``publisher(algo, version, recorded_obs) -> Path``) and announced on the weights socket
(version, path, sha256) only when the gate passed: the learner never talks to a robot.

Senders never wait for the learner: they drop on a full queue and count it, and ZeroMQ reconnects
them when a restarted learner binds the endpoint again. A restart with the same ``checkpoint_dir``
resumes the algorithm, the replay and the counters of the last checkpoint; what was acknowledged
(saved by a checkpoint) is not lost.

Divergence (NaN or inf in an update's losses or TD errors, or in the weights before they are synced,
checkpointed or published) never ends the process: the learner logs it in plain words, drops the
diverged weights and rolls back to the last good state (the newest of the last checkpoint and the
last parameters sent to workers; else the init checkpoint or a fresh algorithm), and keeps ingesting.
Non-finite weights are never checkpointed, sent or published. ``MAX_DIVERGENCES`` divergences in a
row (each within ``PROBATION_UPDATES`` of the previous rollback) pause training with the reason in
``ctl status``; ``ctl resume`` (after e.g. ``ctl set lr=...``) starts again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tinker_core.diagnostics import DivergenceError
from tinker_core.errors import CheckpointError, ConfigError, TinkerError
from tinker_core.learner import control
from tinker_core.learner.admit import admit_action
from tinker_core.learner.config import LearnerConfig, resolve_device
from tinker_core.learner.gate import GateResult, run_gate
from tinker_core.learner.mix import SOURCES, MixedReplay
from tinker_core.learner.publisher import Publisher, three_arg_publisher
from tinker_core.learner.params import (
    ALGO_FILE, is_scalar, algo_bytes, bundle_sha256, check_update, unpack_algo_dir, weights_finite,
)
from tinker_core.learner.graph import ACTOR_LEARNER, LEARNER
from tinker_core.loop.graph import ROBOT_LOOP
from tinker_core.monitor import FlowMonitor
from tinker_core.module import atomic_write_bytes
from tinker_core.replay import StorageConfig
from tinker_core.transition import Transition, TransitionBatch

log = logging.getLogger("tinker.learner")

STATE_FILE = "learner.json"
#: divergences in a row (each within PROBATION_UPDATES updates of the previous rollback) that pause training
MAX_DIVERGENCES = 3
PROBATION_UPDATES = 200
#: longest stretch of updates between two looks at control requests
TICK_SECONDS = 0.1
#: the latest parameters and bundle announcement are sent again this often, for late subscribers
REPUBLISH_SECONDS = 2.0


class Learner:
    """The learner process: see the module docstring."""

    def __init__(self, config: LearnerConfig, algo_factory: Callable[[], Any],
                 publisher: Publisher | None = None,
                 env_factory: Callable[[], Any] | None = None):
        if config.backend != "local":
            # measured slower than the single-process compiled step on the CPU this runs on (README,
            # "Data-parallel updates"), so the server's replay is not sharded over Fabric ranks
            raise ConfigError(f"LearnerConfig.backend: the learner server runs backend: local only; "
                              f"{config.backend!r} runs through tinker_core.learner.fabric_backend "
                              f"(see tinker_core/learner/README.md, 'Data-parallel updates')")
        self.config = config
        self.algo_factory, self.env_factory = algo_factory, env_factory
        self.publisher = None if publisher is None else three_arg_publisher(publisher)
        self.device = resolve_device(config.device)
        storage = StorageConfig(image_codec=config.image_codec, jpeg_quality=config.jpeg_quality)
        self.replay = MixedReplay(config.replay_capacity, config.real_capacity, config.real_fraction,
                                  config.prioritized, storage, seed=config.seed,
                                  intervention_capacity=config.intervention_capacity,
                                  intervention_fraction=config.intervention_fraction,
                                  intervention_warmup=config.intervention_warmup)
        self.algo: Any = None
        self.updates = 0
        self.ingested = {src: 0 for src in SOURCES}
        self.rejected = 0
        self.last_reject = ""
        self.version = 0
        self.paused = False
        self.settings: dict[str, Any] = {}
        self.last_gate: dict | None = None
        self.published: list[dict] = []
        self._published_weights: tuple[int, int] | None = None
        """(updates, divergences) when the newest version was published: the weights are unchanged while both are"""
        self.restored_from: str | None = None
        self.seeded_from_init = 0
        self.demonstrations = 0
        """transitions loaded from ``config.demonstrations`` into the simulation replay"""
        self.last_checkpoint: dict | None = None
        self.last_train: dict = {}
        self.divergences = 0
        self.last_divergence: dict | None = None
        self.discarded_updates = 0
        self.paused_reason: str | None = None
        self._in_row = 0
        self._rolled_back_to = -1
        self._good: dict | None = None  # the rollback point: {"updates", "path"} or {"updates", "blob"}
        self._started = time.monotonic()
        self._requests: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._last_param_sync = -1
        self._last_republish = 0.0
        self._sockets_open = False
        self._streams: dict[tuple, list] = {}  # on-policy algorithms (PPO): time-ordered transitions per source
        self.flow = FlowMonitor()
        """What crosses each of the learner's edges (`learner_edges`): ``ctl status``'s ``flow``."""

    @property
    def demo_sources(self) -> tuple[str, ...]:
        """The replays whose rows are demonstrations: a person's interventions, and the simulation replay where it
        holds ``config.demonstrations``."""
        return ("sim", "intervention") if self.config.demonstrations else ("intervention",)

    @property
    def on_policy(self) -> bool:
        """PPO-style algorithms learn from whole rollouts of one stream, not from replay samples."""
        return not hasattr(self.algo, "train_on_batch") and hasattr(self.algo, "update_from_rollout")

    # -- lifecycle -----------------------------------------------------------------------------
    def open(self) -> "Learner":
        """Restore from the checkpoint if there is one, then bind the sockets."""
        from tinker_core.transport import ControlServer, TransitionReceiver, WeightsPublisher

        self._restore_or_build()
        c = self.config
        for graph, port, direction in ((ROBOT_LOOP, "transitions", "in"), (ROBOT_LOOP, "bundles", "out"),
                                       (ACTOR_LEARNER, "transitions", "in"), (ACTOR_LEARNER, "params", "out")):
            graph.check_port(LEARNER, port, direction)
        self.receiver = TransitionReceiver(c.transitions_endpoint, bind=True, monitor=self.flow)
        self.weights_pub = WeightsPublisher(c.weights_endpoint, bind=True, monitor=self.flow, edge="bundles")
        self.params_pub = WeightsPublisher(c.params_endpoint, bind=True, monitor=self.flow, edge="params")
        self.control = ControlServer(c.control_endpoint, self._handle, bind=True).start()
        self._sockets_open = True
        self._sync_params()
        return self

    def close(self, checkpoint: bool = True) -> None:
        if checkpoint and self.config.checkpoint_dir and self.algo is not None:
            try:
                self.checkpoint()
            except DivergenceError as e:
                log.error("learner: not checkpointing on close: %s; the last good checkpoint stays", e)
        if self._sockets_open:
            self._sockets_open = False
            self.control.close()
            self.receiver.close()
            self.weights_pub.close()
            self.params_pub.close()

    def stop(self) -> None:
        """Ask `run` to return after the current tick (safe from any thread or a signal handler)."""
        self._stop.set()

    def run(self, max_updates: int | None = None, max_seconds: float | None = None) -> dict:
        """Open, loop until stopped (or a limit), checkpoint, close; returns the final status."""
        self.open()
        t0 = time.monotonic()
        try:
            while not self._stop.is_set():
                self.tick()
                if max_updates is not None and self.updates >= max_updates:
                    break
                if max_seconds is not None and time.monotonic() - t0 >= max_seconds:
                    break
        finally:
            status = self.status()
            self.close()
        return status

    # -- checkpoint ----------------------------------------------------------------------------
    def _restore_or_build(self) -> None:
        d = Path(self.config.checkpoint_dir) if self.config.checkpoint_dir else None
        resumed = d is not None and (d / STATE_FILE).is_file()
        if resumed:
            from tinker_core.algos import load_algorithm

            try:
                state = json.loads((d / STATE_FILE).read_text())
            except json.JSONDecodeError as e:
                raise CheckpointError(f"{d / STATE_FILE}: not valid JSON ({e})") from e
            self.algo = load_algorithm(d / ALGO_FILE, device=self.device)
            self.replay.restore(d, seed=self.config.seed)
            self.updates = int(state["updates"])
            self.version = int(state["version"])
            self.published = list(state.get("published", []))
            self.ingested = {**{src: 0 for src in SOURCES}, **{k: int(v) for k, v in state["ingested"].items()}}
            self.restored_from = str(d)
            self._good = {"updates": self.updates, "path": str(d / ALGO_FILE)}
            for k, v in state.get("settings", {}).items():
                control.apply_setting(self, k, v)
        elif self.config.init_checkpoint:
            from tinker_core.algos import load_algorithm

            self.algo = load_algorithm(self.config.init_checkpoint, device=self.device)
            self.restored_from = str(self.config.init_checkpoint)
            self._good = {"updates": 0, "path": str(self.config.init_checkpoint)}
            if self.config.seed_replay_from_init:
                self.seeded_from_init = self._seed_sim_replay(self.algo)
        else:
            self.algo = self.algo_factory()
        if self.config.demonstrations and not resumed:  # a resumed replay holds them already
            self.demonstrations = self.replay.load("sim", self.config.demonstrations, seed=self.config.seed)

    def _seed_sim_replay(self, algo: Any) -> int:
        """Copy an algorithm's own replay (uniform, in insertion order) into the simulation replay."""
        rb = getattr(algo, "replay", None)
        if rb is None or not hasattr(rb, "tensors") or len(rb) == 0:
            return 0
        t = rb.tensors()
        n = int(t["rewards"].shape[0])
        keep = min(n, int(self.config.replay_capacity))

        def field(name: str, i: int) -> Any:
            if name in t:
                return t[name][i]
            return {k.split(".", 1)[1]: v[i] for k, v in t.items() if k.startswith(name + ".")}

        for i in range(n - keep, n):
            self.replay.add(Transition(field("obs", i), np.asarray(t["actions"][i], dtype=np.float32),
                                       float(t["rewards"][i]), bool(t["dones"][i] > 0.5), False,
                                       {"source": "sim"}, field("next_obs", i)))
        return keep

    def checkpoint(self) -> dict:
        """Save algorithm, replay and counters to ``checkpoint_dir``; returns what was saved."""
        if not self.config.checkpoint_dir:
            raise ConfigError("checkpoint: LearnerConfig.checkpoint_dir is not set")
        d = Path(self.config.checkpoint_dir)
        self._check_weights("checkpoint")
        d.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        self.algo.save(d / ALGO_FILE)
        acked = self.replay.save(d)
        state = {"updates": self.updates, "version": self.version, "ingested": self.ingested, "acked": acked,
                 "settings": self.settings, "published": self.published[-20:], "time": time.time()}
        atomic_write_bytes(d / STATE_FILE, json.dumps(state, indent=1).encode())
        self.last_checkpoint = {"path": str(d), "updates": self.updates, "acked": acked,
                                "seconds": round(time.monotonic() - t0, 3)}
        self._good = {"updates": self.updates, "path": str(d / ALGO_FILE)}
        return self.last_checkpoint

    # -- the loop ------------------------------------------------------------------------------
    def _ingest(self, timeout_ms: int) -> int:
        n = 0
        for m in self.receiver.recv_many(max_n=512, timeout_ms=timeout_ms):
            for t in (m.to_transitions() if isinstance(m, TransitionBatch) else [m]):
                if self.on_policy:
                    info = t.info or {}
                    src = "real" if info.get("source") == "real" else "sim"
                    self._streams.setdefault((src, info.get("worker", 0)), []).append(t)
                    self.ingested[src] += 1
                    n += 1
                    continue
                try:
                    src = self.replay.add(admit_action(t, self.algo.action_spec))
                except TinkerError as e:  # a source with the wrong layout or action must not stop training
                    self.rejected += 1
                    self.last_reject = str(e)
                    continue
                self.ingested[src] += 1
                n += 1
        return n

    def _train_on_policy(self) -> None:
        """One update per full rollout (``algo.config.n_steps`` transitions of one stream)."""
        n_steps = int(getattr(self.algo.config, "n_steps", 2048))
        for key, ts in list(self._streams.items()):
            if self.paused or len(ts) < n_steps:
                continue
            rollout, self._streams[key] = TransitionBatch.from_transitions(ts[:n_steps]), ts[n_steps:]
            try:
                out = self.algo.update_from_rollout(rollout)
                check_update(out)
                self._count_update(out)
            except DivergenceError as e:
                self.on_divergence(e)
                return

    def _count_update(self, out: dict | None) -> None:
        """One finished (checked) update: count it, keep its scalars for ``status``, run what falls due."""
        self.updates += 1
        self.last_train = {k: float(v) for k, v in (out or {}).items() if is_scalar(v)}
        self._after_update()

    def _after_update(self) -> None:
        c = self.config
        if c.param_sync_every and self.updates % c.param_sync_every == 0:
            self._sync_params()
        if c.checkpoint_every and c.checkpoint_dir and self.updates % c.checkpoint_every == 0:
            self.checkpoint()
        if c.publish_every and self.updates % c.publish_every == 0:
            self.try_publish()

    def _update_budget(self) -> int:
        c = self.config
        if self.on_policy or self.paused or len(self.replay) < max(c.warmup, 1):
            return 0
        if c.update_interval == 0:
            return c.max_updates_per_tick
        allowed = ((sum(self.ingested.values()) - c.warmup) // c.update_interval + 1) * c.updates_per_interval
        return max(0, min(c.max_updates_per_tick, allowed - self.updates))

    def tick(self) -> None:
        """One pass: control requests, ingest, updates and whatever falls due."""
        self._serve_requests()
        now = time.monotonic()
        if now - self._last_republish > REPUBLISH_SECONDS:  # PUB/SUB drops what came before a subscriber joined
            self._last_republish = now
            self.params_pub.republish()
            self.weights_pub.republish()
        budget = self._update_budget()
        self._ingest(timeout_ms=0 if budget else 20)
        if self.on_policy:
            self._train_on_policy()
            return
        c = self.config
        t_end = time.monotonic() + TICK_SECONDS
        for _ in range(self._update_budget()):
            if time.monotonic() > t_end or not self._requests.empty():
                break  # come back to the sockets and control requests
            self._ingest(timeout_ms=0)
            batch, weights, slots = self.replay.sample(c.batch_size)
            try:
                out = self.algo.train_on_batch(batch, weights=weights,
                                               demo_mask=self.replay.demo_mask(self.replay.last_split, self.demo_sources))
                check_update(out)  # before the TD errors become priorities
                if slots and out is not None and "td_errors" in out:
                    self.replay.update_priorities(slots, out["td_errors"])
                self._count_update(out)
            except DivergenceError as e:
                self.on_divergence(e)
                break

    def _sync_params(self) -> None:
        if self._last_param_sync == self.updates:
            return
        self._check_weights("parameter sync")
        blob = algo_bytes(self.algo)
        self.params_pub.publish(self.updates, {"algo": blob}, meta={"updates": self.updates})
        self._last_param_sync = self.updates
        if self._good is None or self.updates >= self._good["updates"]:
            self._good = {"updates": self.updates, "blob": blob}

    # -- divergence ----------------------------------------------------------------------------
    def _check_weights(self, where: str) -> None:
        if not weights_finite(self.algo):
            raise DivergenceError(f"the network weights hold NaN or inf (found before the {where})")

    def on_divergence(self, err: DivergenceError) -> None:
        """Drop the diverged weights, roll back to the last good state, pause if it keeps diverging."""
        at = self.updates
        self.divergences += 1
        self._in_row = self._in_row + 1 if at - self._rolled_back_to < PROBATION_UPDATES else 1
        good = self._good
        try:
            self.algo = self._load_good(good)
            to, source = (good["updates"], good.get("path") or "the last parameters sent to workers") if good \
                else (0, "a fresh algorithm (nothing good was saved yet)")
        except Exception as e:  # a damaged rollback point: pause rather than train on diverged weights
            to, source = at, None
            self.paused, self.paused_reason = True, f"training diverged and the rollback failed ({e})"
        if source is not None:
            self.discarded_updates += max(0, at - to)
            self.updates, self._rolled_back_to, self._last_param_sync = to, to, -1
            for k, v in self.settings.items():  # the operator's algorithm settings stay in force
                if k not in control.LIVE_SETTINGS:
                    control.apply_setting(self, k, v)
            if self._in_row >= MAX_DIVERGENCES:
                self.paused = True
                self.paused_reason = (f"training diverged {self._in_row} times in a row (last: {err}); it is paused "
                                      f"at the last good weights (update {to}); lower the learning rate with "
                                      f"'tinker learner ctl set lr=...' and 'ctl resume'")
        reason = self.paused_reason or ""
        msg = (f"Training diverged in update {at + 1}: {err}. The diverged weights were dropped and nothing was "
               f"checkpointed or published from them; " +
               (f"rolled back to update {to} from {source}. " if source else "") +
               (reason[:1].upper() + reason[1:] + ". " if self.paused else "Training continues. ") +
               "Transitions are still ingested.")
        log.error("%s", msg)
        self.last_divergence = {"at_update": at, "error": str(err), "rolled_back_to": to if source else None,
                                "from": source, "message": msg, "time": time.time()}
        if source is not None:
            with contextlib.suppress(DivergenceError):
                self._sync_params()  # rollout workers act with the good weights again

    def _load_good(self, good: dict | None) -> Any:
        from tinker_core.algos import load_algorithm

        if good is None:
            return self.algo_factory()
        if "blob" in good:
            with unpack_algo_dir(good["blob"]) as root:
                return load_algorithm(root, device=self.device)
        return load_algorithm(good["path"], device=self.device)

    # -- gate and publishing -------------------------------------------------------------------
    def try_publish(self) -> dict:
        """Run the gate; publish a bundle only if it passed. Returns the gate result and the version."""
        c = self.config
        if self.env_factory is None:
            self.last_gate = {"passed": False, "reason": "no gate env (env_factory is None): nothing is published"}
            return self.last_gate
        if self._published_weights == (self.updates, self.divergences):
            last = self.published[-1]
            self.last_gate = {**last["gate"], "updates": self.updates, "version": self.version, "published": False,
                              "reason": f"no update since v{last['version']} was published at {last['updates']} "
                                        f"updates: it has these weights, nothing new to publish"}
            return self.last_gate
        self._check_weights("evaluation gate")
        res: GateResult = run_gate(self.algo, self.env_factory, c.gate_episodes, c.gate_min_success,
                                   c.gate_min_return, c.gate_seed, c.gate_max_estops)
        self.last_gate = {**res.to_dict(), "updates": self.updates}
        if not res.passed or self.publisher is None:
            if self.publisher is None:
                self.last_gate["reason"] += " (no publisher: nothing is published)"
            return self.last_gate
        try:
            path = Path(self.publisher(self.algo, self.version + 1, self._recorded_obs()))
        except TinkerError as e:  # e.g. onnxruntime and torch disagree beyond the tolerance: the robot keeps its policy
            log.warning("candidate at %d updates passed the gate, but its bundle was not written: %s", self.updates, e)
            self.last_gate.update(published=False, reason=f"the gate passed, but the bundle was not written: {e}")
            return self.last_gate
        self.version += 1
        self._published_weights = (self.updates, self.divergences)
        entry = {"version": self.version, "bundle": str(path), "sha256": bundle_sha256(path),
                 "updates": self.updates, "gate": res.to_dict()}
        self.published.append(entry)
        # The bundle's files travel with the announcement, so a robot on another machine gets them too.
        files = {f.name: f.read_bytes() for f in sorted(path.iterdir()) if f.is_file()} if path.is_dir() else {}
        self.weights_pub.publish(self.version, files, meta=entry)
        self.last_gate["version"] = self.version
        return self.last_gate

    def _recorded_obs(self, n: int = 256) -> np.ndarray | None:
        """Up to ``n`` stored observations, the robot's first (else simulation's), for the export's parity check: the
        bundle is compared with torch on what it will see, not only on inputs drawn from the spec's bounds. None for
        dict observations (the export then draws its own)."""
        for src in ("real", "intervention", "sim"):
            buf = self.replay.buffers[src]
            if len(buf):
                obs = buf.storage.get(np.arange(min(n, len(buf))), with_info=False).obs
                return obs if isinstance(obs, np.ndarray) else None
        return None

    # -- control -------------------------------------------------------------------------------
    def _handle(self, req: dict) -> dict:
        """Runs in the control thread: queue the request for the loop and wait for its answer."""
        done = threading.Event()
        box: dict = {}
        self._requests.put((req, done, box))
        if not done.wait(timeout=float(req.get("timeout_s", 60.0))):
            return {"ok": False, "error": "the learner loop did not answer in time"}
        return box["reply"]

    def _serve_requests(self) -> None:
        while True:
            try:
                req, done, box = self._requests.get_nowait()
            except queue.Empty:
                return
            try:
                box["reply"] = {"ok": True, **self.command(req)}
            except DivergenceError as e:  # found by a ctl checkpoint or publish: handled like any divergence
                self.on_divergence(e)
                box["reply"] = {"ok": False, "error": f"DivergenceError: {e}; {self.last_divergence['message']}"}
            except Exception as e:
                box["reply"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            done.set()

    def command(self, req: dict) -> dict:
        """Execute one control request (see `tinker_core.learner.control`)."""
        return control.execute(self, req)

    def status(self) -> dict:
        return control.status(self)
