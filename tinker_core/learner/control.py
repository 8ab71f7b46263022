"""The learner's control requests (``tinker learner ctl``): set, pause, resume, checkpoint, publish, status, stop,
and join (what rollout workers need to feed it: ``tinker learner workers --learner ENDPOINT``).

They run in the learner's loop thread, between two updates (`Learner._serve_requests`), so they change its state
without locks.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tinker_core.errors import ConfigError
from tinker_core.learner.graph import learner_edges

if TYPE_CHECKING:
    from tinker_core.learner.server import Learner

#: settings ``ctl set`` may change on the learner itself; anything else goes to ``algo.control.set``
LIVE_SETTINGS = {"batch_size": int, "update_interval": int, "real_fraction": float, "publish_every": int,
                 "param_sync_every": int, "checkpoint_every": int, "gate_min_success": float,
                 "gate_min_return": float, "gate_episodes": int, "max_updates_per_tick": int, "warmup": int,
                 "intervention_fraction": float, "intervention_warmup": int}


def execute(learner: Learner, req: dict) -> dict:
    """Execute one control request: set, pause, resume, checkpoint, publish, status, stop."""
    cmd = req.get("cmd")
    if cmd == "set":
        values = req.get("values") or {}
        if not isinstance(values, dict) or not values:
            raise ConfigError(f"set: expected values {{name: value}}, got {values!r}")
        for k, v in values.items():
            apply_setting(learner, k, v)
        return {"settings": dict(learner.settings), "updates": learner.updates}
    if cmd == "pause":  # the learner holds its own loop; the algorithm's control is not paused
        learner.paused = True
        return {"paused": True, "updates": learner.updates}
    if cmd == "resume":
        learner.paused, learner.paused_reason, learner._in_row = False, None, 0
        return {"paused": False, "updates": learner.updates}
    if cmd == "checkpoint":
        return {"checkpoint": learner.checkpoint()}
    if cmd == "publish":
        return {"gate": learner.try_publish()}
    if cmd == "status":
        return learner.status()
    if cmd == "join":
        return join(learner)
    if cmd == "stop":
        learner.stop()
        return {"stopping": True}
    raise ConfigError(f"ctl: unknown command {cmd!r}; known: set, pause, resume, checkpoint, publish, status, join, "
                      f"stop")


def apply_setting(learner: Learner, key: str, value: Any) -> None:
    """Change one setting of the learner (`LIVE_SETTINGS`) or of its algorithm; a refused value changes nothing."""
    if key in LIVE_SETTINGS:
        try:
            v = None if value is None else LIVE_SETTINGS[key](value)
        except (TypeError, ValueError):
            raise ConfigError(f"set {key}: expected a {LIVE_SETTINGS[key].__name__}, got {value!r}") from None
        old = getattr(learner.config, key)
        setattr(learner.config, key, v)
        try:
            learner.config.__post_init__()
        except ConfigError:
            setattr(learner.config, key, old)
            raise
        if key in ("real_fraction", "intervention_fraction", "intervention_warmup"):
            setattr(learner.replay, key, LIVE_SETTINGS[key](v))
    else:
        ctl = getattr(learner.algo, "control", None)
        known = list(getattr(ctl, "settable", []))
        if ctl is None or key not in known:
            raise ConfigError(f"set {key}: unknown setting; the learner accepts {sorted(LIVE_SETTINGS)}, "
                              f"{type(learner.algo).__name__} accepts {known}")
        ctl.set(**{key: value})
        ctl.apply_pending()  # this runs in the loop thread, between two updates
    learner.settings[key] = value


def join(learner: Learner) -> dict:
    """What rollout workers need to feed this learner: the env they step and the endpoints of their two edges
    (`tinker_core.learner.graph.ACTOR_LEARNER`: transitions in, parameters out) as this learner binds them. The
    workers ask for it; the learner's config need not describe them."""
    c = learner.config
    return {"env_id": c.env_id, "env_kwargs": dict(c.env_kwargs or {}), "transitions_endpoint": c.transitions_endpoint,
            "params_endpoint": c.params_endpoint, "algo": c.algo}


def status(learner: Learner) -> dict:
    """What ``ctl status`` shows: counters, settings, the last train, gate, checkpoint and publication."""
    el = max(time.monotonic() - learner._started, 1e-9)
    algo_settings = {"lr": getattr(getattr(learner.algo, "config", None), "learning_rate", None),
                     "settable": list(getattr(getattr(learner.algo, "control", None), "settable", []))}
    recv = getattr(learner, "receiver", None)
    return {
        "updates": learner.updates, "paused": learner.paused, "paused_reason": learner.paused_reason,
        "device": learner.device, "version": learner.version,
        "divergences": learner.divergences, "last_divergence": learner.last_divergence,
        "discarded_updates": learner.discarded_updates,
        "ingested": dict(learner.ingested), "rejected": learner.rejected, "last_reject": learner.last_reject,
        "replay": {k: len(b) for k, b in learner.replay.buffers.items()}, "acked": learner.replay.acked,
        # how the next batch splits over the buffers, and how many each gave so far (interventions: HIL-SERL's share)
        "batch_mix": learner.replay.split(int(learner.config.batch_size)), "sampled": dict(learner.replay.sampled),
        "settings": dict(learner.settings), "algo_settings": algo_settings,
        "last_train": learner.last_train, "last_gate": learner.last_gate, "last_checkpoint": learner.last_checkpoint,
        "published": learner.published[-1] if learner.published else None, "restored_from": learner.restored_from,
        "seeded_from_init": learner.seeded_from_init, "demonstrations": learner.demonstrations,
        "uptime_s": round(el, 2),
        "receiver": None if recv is None else {"received": recv.received, "rejected": recv.rejected},
        "flow": flow(learner),
    }


def flow(learner: Learner) -> dict[str, dict]:
    """Each edge the learner opened (`learner_edges`): its flow monitor's figures since then, and the edge's ends."""
    ends = learner_edges()
    return {port: {**snap, "ends": ends.get(port, "")} for port, snap in learner.flow.snapshot().items()}
