"""`LearnerConfig`: every setting of a learner run, one typed dataclass (loadable from YAML)."""

from __future__ import annotations

from dataclasses import dataclass

from tinker_core.errors import ConfigError


@dataclass
class LearnerConfig:
    """Settings of `Learner`; ``tinker learner --config FILE`` reads them from the ``learner:`` section."""

    transitions_endpoint: str = "tcp://127.0.0.1:5555"
    """Where the learner binds its PULL socket; every source (sim workers, the ROS bridge) connects here."""
    weights_endpoint: str = "tcp://127.0.0.1:5556"
    """PUB socket announcing each gated bundle: version, bundle path and sha256 (the policy node listens)."""
    params_endpoint: str = "tcp://127.0.0.1:5558"
    """PUB socket with raw algorithm parameters for rollout workers (not gated: never reaches a robot)."""
    control_endpoint: str = "tcp://127.0.0.1:5557"
    """REP socket of ``tinker learner ctl``."""
    algo: str = "sac"
    """Algorithm name, as the CLI's factory knows it ("sac", "ppo")."""
    env_id: str = "Pendulum-v1"
    """Env the CLI builds for the spec and the evaluation gate (a gymnasium id; ``tinker/...`` loads sim)."""
    env_kwargs: dict | None = None
    """Keyword arguments for the gate env (e.g. ``{"randomize": true}``)."""
    algo_kwargs: dict | None = None
    """Keyword arguments for the algorithm constructor (learning rate, network sizes, ...)."""
    init_checkpoint: str | None = None
    """Algorithm checkpoint to start from (e.g. the pretrained policy, for online fine-tuning) when
    ``checkpoint_dir`` holds nothing to resume; None builds a fresh algorithm."""
    seed_replay_from_init: bool = True
    """Copy the init checkpoint's own replay (its simulation experience) into the simulation replay, so
    fine-tuning keeps the sim share of the ``real_fraction`` mix from the first update."""
    demonstrations: str | None = None
    """A saved replay of demonstrations (``tinker prior``'s ``demonstrations/``), loaded into the simulation replay at
    start: RLPD's prior data, sampled beside the live data by ``real_fraction``. Its rows, and a person's
    interventions, are the batch's demonstrations (``demo_mask``: SAC's ``td3bc_alpha`` imitates them)."""
    device: str = "auto"
    """"auto" (CUDA when available, else CPU), "cpu" or "cuda[:N]"."""
    batch_size: int = 256
    """Transitions per gradient update."""
    update_interval: int = 1
    """One gradient update per this many transitions ingested; 0 trains continuously."""
    updates_per_interval: int = 1
    """Gradient updates per ``update_interval`` transitions (the replay ratio): a few live transitions
    buy more learning, which online fine-tuning on a robot needs."""
    max_updates_per_tick: int = 64
    """Cap on updates between two looks at the sockets, so ingest and control stay responsive."""
    warmup: int = 1000
    """Transitions in replay before the first update."""
    replay_capacity: int = 1_000_000
    """Capacity of the simulation replay."""
    real_capacity: int = 200_000
    """Capacity of the real-robot replay."""
    real_fraction: float = 0.0
    """Share of each batch drawn from real-robot data (when there is any); the rest comes from simulation."""
    intervention_capacity: int = 100_000
    """Capacity of the intervention replay: transitions a person took over (``info["intervention"]``)."""
    intervention_fraction: float = 0.5
    """Share of each batch drawn from the intervention replay once it holds ``intervention_warmup`` transitions
    (RLPD / HIL-SERL: half demonstrations, half online data); ``real_fraction`` splits the rest."""
    intervention_warmup: int = 25
    """Interventions in replay before they are sampled at ``intervention_fraction`` (two or three takeovers' worth;
    fewer would be drawn again and again). 100 was never reached in a 50-episode demo fine-tuning with the stand-in
    operator (41 intervention transitions from 12 takeovers: docs/sim2real/human_data.md)."""
    prioritized: bool = False
    """Prioritized replay (TD-error priorities) instead of uniform."""
    image_codec: str = "lz4"
    """Camera frames in replay: "lz4", "jpeg" or "none"."""
    jpeg_quality: int = 85
    """JPEG quality when ``image_codec`` is "jpeg"."""
    publish_every: int = 1000
    """Try to publish (gate, then bundle) every this many updates; 0 never."""
    param_sync_every: int = 100
    """Send parameters to rollout workers every this many updates; 0 never."""
    checkpoint_dir: str | None = None
    """Where algorithm, replay and counters are checkpointed; None disables checkpoints."""
    checkpoint_every: int = 1000
    """Checkpoint every this many updates (also on ``ctl checkpoint`` and on a clean stop); 0 only on request."""
    bundle_dir: str = "runs/learner/bundles"
    """Where published bundles are written (one sub-directory per version)."""
    perception_bundle: str | None = None
    """A bundle whose perception each published bundle keeps in front of the learned actor (a vision bundle:
    its locator was trained apart; `tinker_deploy.splice`); None: the algorithm's own perception."""
    gate_episodes: int = 5
    """Episodes the candidate runs in simulation before it may be published."""
    gate_min_success: float = 0.0
    """Least success rate (``info['is_success']``) a candidate needs in the gate."""
    gate_min_return: float | None = None
    """Least mean episode return a candidate needs in the gate (None: not checked)."""
    gate_max_estops: int = 0
    """Most SafetyWrapper e-stops a candidate may trigger in the gate (tinker/ envs run it with the wrapper)."""
    gate_seed: int = 10_000
    """Seed of the gate episodes (fixed, so candidates are compared on the same episodes)."""
    seed: int = 0
    """Seed of replay sampling."""
    backend: str = "local"
    """Where gradient updates run: "local" (this process; on the CPU the compiled step) or "fabric"
    (data-parallel over ``devices`` processes through Lightning Fabric, autograd path; see
    learner/fabric_backend.py and the README's measurement: on a small CPU it is slower)."""
    devices: int = 1
    """Processes (devices) of the "fabric" back-end; ``batch_size`` must divide by it (equal shards)."""

    def __post_init__(self) -> None:
        positive = ("batch_size", "updates_per_interval", "max_updates_per_tick", "replay_capacity", "real_capacity", "gate_episodes",
                    "intervention_capacity")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"LearnerConfig.{name}: expected an integer >= 1, got {getattr(self, name)!r}")
        for name in ("update_interval", "warmup", "intervention_warmup", "publish_every", "param_sync_every", "checkpoint_every",
                     "gate_max_estops"):
            if int(getattr(self, name)) < 0:
                raise ConfigError(f"LearnerConfig.{name}: expected an integer >= 0, got {getattr(self, name)!r}")
        for name in ("real_fraction", "intervention_fraction"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ConfigError(f"LearnerConfig.{name}: expected 0..1, got {getattr(self, name)!r}")
        if not 0.0 <= float(self.gate_min_success) <= 1.0:
            raise ConfigError(f"LearnerConfig.gate_min_success: expected 0..1, got {self.gate_min_success!r}")
        owner: dict[str, str] = {}
        for name in ("transitions_endpoint", "weights_endpoint", "params_endpoint", "control_endpoint"):
            endpoint = getattr(self, name)
            if endpoint in owner:
                raise ConfigError(f"LearnerConfig.{owner[endpoint]} and LearnerConfig.{name} are both {endpoint!r}: "
                                  f"each socket binds an endpoint of its own")
            owner[endpoint] = name
        if self.backend not in ("local", "fabric"):
            raise ConfigError(f"LearnerConfig.backend: expected 'local' or 'fabric', got {self.backend!r}")
        if int(self.devices) < 1:
            raise ConfigError(f"LearnerConfig.devices: expected an integer >= 1, got {self.devices!r}")
        if self.backend == "fabric":
            if int(self.batch_size) % int(self.devices):
                raise ConfigError(f"LearnerConfig.batch_size: expected a multiple of devices={self.devices} "
                                  f"(equal shards per process), got {self.batch_size}")
            from tinker_core.learner.fabric_backend import require_lightning

            require_lightning("LearnerConfig.backend")
        elif int(self.devices) != 1:
            raise ConfigError(f"LearnerConfig.devices: {self.devices} processes need backend: fabric, "
                              f"got backend: {self.backend!r}")
        if self.device != "auto" and not self.device.startswith(("cpu", "cuda")):
            raise ConfigError(f"LearnerConfig.device: expected 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")


def resolve_device(device: str) -> str:
    """"auto" → "cuda" when torch sees a GPU, else "cpu"."""
    if device != "auto":
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"
