"""`OnnxPolicy`: a bundle's model in an onnxruntime session, behind the same `ModuleBase` interface as the
torch policy, so the pipeline, the ROS node and the evaluation can run either.

Edge settings: intra-op threads (1 by default: a control loop wants predictable latency, not
throughput), graph optimization level, optional int8 model. Start-up fails loud: a requested
execution provider that onnxruntime silently replaced by another is an error, and ``warmup`` reports
p50/p99/max latency. Imports numpy and onnxruntime only (no torch, no onnx).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from tinker_core.errors import BundleError, ConfigError, ValidationError
from tinker_core.module import ModuleBase
from tinker_core.spec import DictSpec, Spec

from tinker_deploy.bundle import Bundle, ExpectedIO, load_bundle
from tinker_deploy.manifest import HAND_SPEC, Manifest, hand_input_spec, spec_input_names

_OPT_LEVELS = ("disable", "basic", "extended", "all")


@dataclass
class OnnxPolicyConfig:
    """Session settings for an edge computer."""

    threads: int = 1
    """intra-op threads. 1 by default: a control loop wants the same latency every cycle, and with 2 every
    operator waits for its slower half on a second core that the ROS nodes also use (and onnxruntime's
    workers spin there between operators); on the 2-core dev machine 2 threads were no faster at batch 1.
    Use 2 where a core is free for the policy (see deploy/README.md, "Speed")"""
    optimization: str = "all"
    """graph optimization level: disable, basic, extended or all"""
    quantized: bool = False
    """run the bundle's int8 model (``policy.int8.onnx``: static for a CNN, ~0.6x the fp32 latency) instead of fp32"""
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    """execution providers in priority order; every one must really be used, or loading fails"""

    def __post_init__(self) -> None:
        if int(self.threads) < 1:
            raise ConfigError(f"OnnxPolicyConfig.threads: expected >= 1, got {self.threads}")
        if self.optimization not in _OPT_LEVELS:
            raise ConfigError(f"OnnxPolicyConfig.optimization: expected one of {_OPT_LEVELS}, got {self.optimization!r}")
        self.providers = tuple(self.providers)
        if not self.providers:
            raise ConfigError("OnnxPolicyConfig.providers: expected at least one execution provider")


def make_session(model_path: str | os.PathLike, config: OnnxPolicyConfig):
    """An `onnxruntime.InferenceSession` with ``config``; refuses a silent provider fallback."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    missing = [p for p in config.providers if p not in available]
    if missing:
        raise BundleError(f"execution provider(s) {missing} are not available in this onnxruntime "
                          f"{ort.__version__}; available: {available}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(config.threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[config.optimization]
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(str(model_path), sess_options=so, providers=list(config.providers))
    except Exception as e:  # onnxruntime raises its own Fail/InvalidGraph types
        raise BundleError(f"{model_path}: onnxruntime {ort.__version__} cannot load the model ({e})") from e
    used = sess.get_providers()
    fell_back = [p for p in config.providers if p not in used]
    if fell_back:
        raise BundleError(f"{model_path}: execution provider(s) {fell_back} were requested but the session "
                          f"runs on {used}: onnxruntime fell back silently")
    return sess


def _percentiles_us(samples_ns: Sequence[int]) -> dict[str, float]:
    a = np.asarray(samples_ns, dtype=np.float64) / 1e3
    return {"p50_us": float(np.percentile(a, 50)), "p99_us": float(np.percentile(a, 99)), "max_us": float(a.max())}


def _as_is(x: np.ndarray) -> np.ndarray:
    return x


PARTS = ("policy", "perception", "actor", "hand")
"""a bundle's models `OnnxPolicy` runs: the whole policy, its two parts, and a vision bundle's ``hand`` (the end
effector its locator sees, `tinker_core.nn.locator.HandLocator`)"""


class OnnxPolicy(ModuleBase[OnnxPolicyConfig]):
    """Maps an observation (numpy, one or a batch) to an action (numpy) with onnxruntime."""

    config_class = OnnxPolicyConfig
    input_name, output_name = "obs", "action"

    def __init__(self, bundle: Bundle, part: str = "policy", config: OnnxPolicyConfig | None = None):
        super().__init__(config)
        if part not in PARTS:
            raise ConfigError(f"OnnxPolicy part: expected one of {list(PARTS)}, got {part!r}")
        self.bundle = bundle
        self.part = part
        model = "policy_int8" if (self.config.quantized and part == "policy") else part
        if self.config.quantized and part != "policy":
            raise ConfigError(f"OnnxPolicy: quantized=True is only available for part 'policy', not {part!r}")
        if model not in bundle.manifest.models:
            hint = " (export with --int8 to add one)" if model == "policy_int8" else ""
            raise BundleError(f"{bundle.path}: bundle has no {model!r} model{hint}; it has {sorted(bundle.manifest.models)}")
        self.model = model
        self.session = make_session(bundle.model_path(model), self.config)
        m = bundle.manifest
        self.input_spec = (m.feature_spec if part == "actor" else hand_input_spec(m.obs_spec) if part == "hand"
                           else m.obs_spec)
        self.output_spec = (m.feature_spec if part == "perception" else HAND_SPEC if part == "hand"
                            else m.action_spec)
        if self.input_spec is None or self.output_spec is None:
            raise BundleError(f"{bundle.path}: manifest has no feature_spec, needed for part {part!r}")
        flat = "features" if part == "actor" else "obs"
        self._in_names = spec_input_names(self.input_spec, flat)
        graph_inputs = [i.name for i in self.session.get_inputs()]
        if graph_inputs != self._in_names:
            raise BundleError(f"{bundle.path}: {model} graph inputs {graph_inputs} differ from the spec's "
                              f"{self._in_names}")
        self._out_names = [self.session.get_outputs()[0].name]
        self._dict_in = isinstance(self.input_spec, DictSpec)
        specs = list(self.input_spec.fields.values()) if self._dict_in else [self.input_spec]
        self._in_dtypes = [np.dtype(s.dtype) for s in specs]
        self._in_ndims = [len(s.shape) for s in specs]
        self._feed: dict[str, np.ndarray] = {}
        self._run = self.session.run
        out_spec = self.output_spec
        self._clip = (out_spec.clip_rounding if part in ("policy", "actor") and isinstance(out_spec, Spec)
                      and out_spec.low is not None and out_spec.high is not None else _as_is)
        """an action a float32 rounding put beyond its bound (the scaled tanh's -1.0000001) is set to the bound"""
        self._bind_batch1(specs)
        self.name = f"onnx_{part}"

    def _bind_batch1(self, specs: list[Spec]) -> None:
        """Batch-1 fast path: inputs and output live in buffers bound once to the session (IOBinding),
        so a call copies the observation in, runs, and copies the action out, with no feed dict and no
        output allocation. Falls back to ``session.run`` if this onnxruntime lacks the binding call."""
        self._in_bufs = [np.zeros((1, *s.shape), dtype=s.dtype) for s in specs]
        out_spec = self.output_spec
        self._out_buf = np.zeros((1, *out_spec.shape), dtype=out_spec.dtype) if isinstance(out_spec, Spec) else None
        self._bound = None
        self._flat_fast: tuple[int, ...] | None = None
        try:
            binding = self.session.io_binding()
            for name, buf in zip(self._in_names, self._in_bufs):
                binding.bind_cpu_input(name, buf)
            if self._out_buf is None:
                return
            binding.bind_output(self._out_names[0], "cpu", 0, self._out_buf.dtype, list(self._out_buf.shape),
                                self._out_buf.ctypes.data)
            run_raw = self.session._sess.run_with_iobinding  # the wrapper's run_with_iobinding adds ~60 us
            import onnxruntime as ort

            raw, opts = binding._iobinding, ort.RunOptions()
            self._bound = lambda: run_raw(raw, opts)
            self._bound()
        except (AttributeError, TypeError, RuntimeError):
            self._bound = None
        self._flat_fast = None if (self._bound is None or self._dict_in) else tuple(specs[0].shape)

    @classmethod
    def from_bundle(cls, path: str | os.PathLike, *, part: str = "policy", threads: int = 1,
                    optimization: str = "all", quantized: bool = False, expect: ExpectedIO | None = None,
                    providers: Sequence[str] = ("CPUExecutionProvider",)) -> "OnnxPolicy":
        """Load and verify the bundle at ``path`` (directory or ``.onnx`` inside it) and open a session."""
        bundle = load_bundle(path, expect=expect)
        return cls(bundle, part, OnnxPolicyConfig(threads, optimization, quantized, tuple(providers)))

    def hand(self) -> "OnnxPolicy | None":
        """The same bundle's ``hand`` model (the end effector its locator sees), with this session's settings, or
        None where the bundle has none."""
        if "hand" not in self.manifest.models:
            return None
        return OnnxPolicy(self.bundle, part="hand", config=self.config)

    # -- identity -----------------------------------------------------------------------------
    @property
    def manifest(self) -> Manifest:
        return self.bundle.manifest

    @property
    def version(self) -> int:
        return self.bundle.manifest.policy_version

    @property
    def sha256(self) -> str:
        return self.bundle.sha256(self.model)

    # -- inference ----------------------------------------------------------------------------
    def forward(self, obs: Any) -> np.ndarray:
        """Action for one observation (spec shape) or a batch (leading axis); float32 out, within the action's bounds
        where only rounding put it beyond them.

        Not thread-safe on the batch-1 path (shared bound buffers): use one instance per thread."""
        if self._flat_fast is not None and type(obs) is np.ndarray and obs.shape == self._flat_fast:
            self._in_bufs[0][0] = obs  # the common case: one flat observation, as few Python steps as possible
            self._bound()
            return self._clip(self._out_buf[0].copy())
        if self._dict_in:
            if not isinstance(obs, Mapping):
                raise ValidationError(f"{self.name}.obs", self.input_spec.describe(), type(obs).__name__, "not a mapping")
            xs = [obs[n] if n in obs else self._missing(obs) for n in self._in_names]
        else:
            xs = [obs]
        single = all(getattr(x, "ndim", -1) == nd for x, nd in zip(xs, self._in_ndims))
        try:
            if single and self._bound is not None and all(
                    x.shape == b.shape[1:] for x, b in zip(xs, self._in_bufs)):
                for buf, x in zip(self._in_bufs, xs):
                    buf[0] = x
                self._bound()
                return self._clip(self._out_buf[0].copy())
            feed = self._feed
            for name, dt, nd, x in zip(self._in_names, self._in_dtypes, self._in_ndims, xs):
                x = np.asarray(x, dtype=dt)
                feed[name] = x[None] if x.ndim == nd else x
            out = self._run(self._out_names, feed)[0]
        except Exception as e:  # numpy broadcast errors, onnxruntime InvalidArgument: say it in spec terms
            self.input_spec.check(obs if self._dict_in else np.asarray(obs), f"{self.name}.obs",
                                  batched=not single, bounds=False)
            raise ValidationError(f"{self.name}.obs", self.input_spec.describe(), "an input onnxruntime refused",
                                  str(e)) from e
        return self._clip(out[0] if single else out)

    def _missing(self, obs: Mapping) -> np.ndarray:
        self.input_spec.check(dict(obs), f"{self.name}.obs", bounds=False)
        raise AssertionError("unreachable")  # check() raised

    def sample_obs(self) -> Any:
        """One observation to warm up with: the first recorded one, or zeros of the spec."""
        try:
            obs, _ = self.bundle.recorded()
        except BundleError:
            return self.input_spec.zeros()
        if self.part == "actor":
            return self.input_spec.zeros()
        if isinstance(obs, dict):
            return {k: v[0] for k, v in obs.items()}
        return obs[0]

    def warmup(self, n: int = 200, obs: Any = None) -> dict[str, float]:
        """Run ``n`` batch-1 inferences; returns latency ``p50_us``, ``p99_us``, ``max_us``."""
        if n < 1:
            raise ConfigError(f"warmup n: expected >= 1, got {n}")
        obs = self.sample_obs() if obs is None else obs
        self.forward(obs)
        samples = []
        clock = time.perf_counter_ns
        for _ in range(n):
            t0 = clock()
            self.forward(obs)
            samples.append(clock() - t0)
        return _percentiles_us(samples)

    def __repr__(self) -> str:
        return (f"OnnxPolicy({self.bundle.path.name}:{self.model} v{self.version} "
                f"sha256={self.sha256[:12]} in={self.input_spec!r} out={self.output_spec!r})")
