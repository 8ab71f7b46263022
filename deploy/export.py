"""Export a trained policy to a model bundle, with the checks that make the result trustworthy.

`export_bundle` takes what ``algo.deployable_parts()`` returns (``{"perception": obs -> features,
"actor": features -> action}``, or one module obs -> action) and ``algo.export_metadata()``, and:

1. traces each part with torch's TorchScript exporter at opset 17 (dynamic batch axis; input names
   are the spec's field names, or ``obs`` / ``features`` for a flat spec; outputs ``action`` /
   ``features``), failing in plain words when ``forward`` branches on tensor values;
2. applies the exact graph rewrites of `tinker_deploy.graph_rewrite` (the image's /255 folded into the first
   convolution's weights), runs ``onnx.checker.check_model(full_check=True)`` and checks the opset against the table of
   onnxruntime releases that load it;
3. runs torch and onnxruntime on the recorded observations and fails above ``tolerance``
   (max abs difference printed);
4. optionally quantizes the policy to int8 (for a CNN static, calibrated on the recorded observations)
   with an accuracy report against fp32;
5. writes the bundle directory atomically with its manifest.

Needs torch and onnx (the training install), never imported by the edge runtime.
"""

from __future__ import annotations

import datetime as _dt
import io
import linecache
import platform
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.errors import BundleError
from tinker_core.spec import AnySpec, DictSpec, Spec, spec_from_dict

from tinker_deploy.bundle import RECORDED, bundle_dir_for_output, pack_recorded, write_bundle
from tinker_deploy.graph_rewrite import rewrite
from tinker_deploy.manifest import (
    HAND_SPEC, OPSET, Manifest, ModelEntry, Term, check_opset_supported, deploy_settings_sha256, hand_input_spec,
    spec_input_names,
)

N_RECORDED = 256
"""observations generated for parity when the caller records none"""


class DataDependentControlFlowError(BundleError):
    """``forward`` branches on tensor values: a traced ONNX graph would keep only one branch."""


# -- module plumbing ---------------------------------------------------------------------------
class _Composed(nn.Module):
    """perception then actor, as one obs -> action module."""

    def __init__(self, perception: nn.Module, actor: nn.Module):
        super().__init__()
        self.perception, self.actor = perception, actor

    def forward(self, obs: Any) -> torch.Tensor:
        return self.actor(self.perception(obs))


class _Positional(nn.Module):
    """Positional tensor inputs (what the ONNX exporter names) -> the module's dict or tensor input."""

    def __init__(self, inner: nn.Module, names: list[str] | None):
        super().__init__()
        self.inner, self.names = inner, names

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.inner(dict(zip(self.names, xs)) if self.names is not None else xs[0])


def _as_spec(s: Any) -> AnySpec | None:
    if s is None or isinstance(s, (Spec, DictSpec)):
        return s
    return spec_from_dict(s)


def _to_torch(x: np.ndarray | Mapping[str, np.ndarray]) -> Any:
    if isinstance(x, Mapping):
        return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in x.items()}
    return torch.from_numpy(np.ascontiguousarray(x))


def _slice(x: np.ndarray | Mapping[str, np.ndarray], n: int) -> Any:
    return {k: v[:n] for k, v in x.items()} if isinstance(x, Mapping) else x[:n]


def _positional_args(x: Any, spec: AnySpec) -> tuple[torch.Tensor, ...]:
    t = _to_torch(x)
    return tuple(t[k] for k in spec.keys()) if isinstance(spec, DictSpec) else (t,)


def generate_obs(spec: AnySpec, n: int = N_RECORDED, seed: int = 0) -> np.ndarray | dict[str, np.ndarray]:
    """``n`` observations for the parity check when none were recorded: uniform within the spec's
    bounds (clamped to [-5, 5] when unbounded), the full range for integer images."""
    rng = np.random.default_rng(seed)

    def one(s: Spec) -> np.ndarray:
        dt = np.dtype(s.dtype)
        if np.issubdtype(dt, np.integer):
            info = np.iinfo(dt)
            lo = info.min if s.low is None else np.maximum(s.low, info.min)
            hi = info.max if s.high is None else np.minimum(s.high, info.max)
            return rng.integers(lo, np.asarray(hi) + 1, size=(n, *s.shape)).astype(dt)
        lo = -5.0 if s.low is None else np.clip(s.low, -5.0, 5.0)
        hi = 5.0 if s.high is None else np.clip(s.high, -5.0, 5.0)
        return rng.uniform(lo, hi, size=(n, *s.shape)).astype(dt)

    return {k: one(v) for k, v in spec.items()} if isinstance(spec, DictSpec) else one(spec)


def record_observations(env: Any, parts: Mapping[str, nn.Module] | nn.Module, n: int = N_RECORDED,
                        seed: int = 0) -> np.ndarray | dict[str, np.ndarray]:
    """``n`` observations met by the deterministic policy itself in a gymnasium ``env`` (resets
    included): the states the deployed model will see, for the parity checks."""
    policy = parts if isinstance(parts, nn.Module) else (
        parts.get("policy") or _Composed(parts["perception"], parts["actor"]))
    policy.eval()
    seen: list[Any] = []
    obs, _ = env.reset(seed=seed)
    with torch.no_grad():
        while len(seen) < n:
            seen.append(obs)
            batch = {k: np.asarray(v)[None] for k, v in obs.items()} if isinstance(obs, Mapping) else np.asarray(obs)[None]
            action = policy(_to_torch(batch))[0].numpy()
            obs, _r, terminated, truncated, _info = env.step(action)
            if terminated or truncated:
                obs, _ = env.reset()
    if isinstance(seen[0], Mapping):
        return {k: np.stack([np.asarray(o[k]) for o in seen]) for k in seen[0]}
    return np.stack([np.asarray(o) for o in seen])


# -- checks ------------------------------------------------------------------------------------
def _control_flow_problems(caught: list[warnings.WarningMessage]) -> list[str]:
    out = []
    for w in caught:
        if w.category.__name__ != "TracerWarning":
            continue
        msg = str(w.message)
        if "might cause the trace to be incorrect" not in msg and "might not generalize" not in msg:
            continue
        what = msg.split(" might")[0].replace("Converting a tensor to", "turns a tensor into")
        line = linecache.getline(w.filename, w.lineno).strip()
        out.append(f"{w.filename}:{w.lineno} `{line}` {what}")
    return out


def onnx_bytes(module: nn.Module, example: Any, in_spec: AnySpec, in_flat_name: str, out_name: str,
               opset: int = OPSET, where: str = "policy") -> bytes:
    """Trace ``module`` to ONNX bytes; refuses data-dependent control flow in plain words."""
    names = spec_input_names(in_spec, in_flat_name)
    wrapped = _Positional(module, names if isinstance(in_spec, DictSpec) else None).eval()
    buf = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        try:
            torch.onnx.export(
                wrapped, _positional_args(example, in_spec), buf, input_names=names, output_names=[out_name],
                dynamic_axes={n: {0: "batch"} for n in names + [out_name]}, opset_version=opset,
                do_constant_folding=True, dynamo=False)
        except Exception as e:  # the exporter raises many types; name the part
            raise BundleError(f"{where}: torch could not export the module to ONNX opset {opset}: {e}") from e
    problems = _control_flow_problems(caught)
    if problems:
        raise DataDependentControlFlowError(
            f"{where}: forward() has data-dependent control flow, so the exported graph would always take "
            f"the branch seen while tracing: " + "; ".join(problems)
            + ". Replace Python `if`/`.item()` on tensors with tensor ops such as torch.where.")
    return buf.getvalue()


def check_onnx(model_bytes: bytes, opset: int, where: str) -> list[dict]:
    """onnx.checker (full check), the model's opset, and onnxruntime's ability to load it."""
    import onnx
    import onnxruntime as ort

    model = onnx.load_from_string(model_bytes)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # onnx.checker.ValidationError, shape inference errors
        raise BundleError(f"{where}: onnx.checker rejects the exported model: {e}") from e
    got = {o.domain or "ai.onnx": o.version for o in model.opset_import}
    if got.get("ai.onnx") != opset:
        raise BundleError(f"{where}: exported opset {got.get('ai.onnx')}, expected {opset}")
    check_opset_supported(opset, ort.__version__)
    return [{"name": i.name} for i in model.graph.input]


def _ort_run(model_bytes: bytes, inputs: Any, spec: AnySpec, flat_name: str) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model_bytes, sess_options=so, providers=["CPUExecutionProvider"])
    names = spec_input_names(spec, flat_name)
    feed = {n: np.ascontiguousarray(inputs[n]) for n in names} if isinstance(spec, DictSpec) else {names[0]: inputs}
    return sess.run(None, feed)[0]


def parity(where: str, expected: np.ndarray, got: np.ndarray, tolerance: float,
           log: Callable[[str], None] = print) -> float:
    """Max abs difference between ``expected`` and ``got``; `BundleError` above ``tolerance``."""
    if expected.shape != got.shape:
        raise BundleError(f"{where}: onnxruntime output shape {got.shape} differs from torch's {expected.shape}")
    diff = float(np.max(np.abs(expected.astype(np.float64) - got.astype(np.float64)))) if expected.size else 0.0
    ok = diff <= tolerance
    log(f"parity {where}: max abs diff torch vs onnxruntime {diff:.3g} on {len(expected)} obs "
        f"(tolerance {tolerance:g}) {'ok' if ok else 'FAILED'}")
    if not ok:
        raise BundleError(f"{where}: onnxruntime differs from torch by {diff:.3g} (max abs) on the recorded "
                          f"observations, above the tolerance {tolerance:g}")
    return diff


# -- normalization -----------------------------------------------------------------------------
class _Normalize(nn.Module):
    """(x - mean) / std, clipped: the observation normalization of training, folded into the graph."""

    def __init__(self, inner: nn.Module, stats: Mapping[str, Any], spec: AnySpec):
        super().__init__()
        self.inner = inner
        self.fields = list(spec.keys()) if isinstance(spec, DictSpec) else None
        clip = stats.get("clip")
        self.clip = None if clip is None else float(clip)
        eps = float(stats.get("eps", 1e-8))
        mean, std = stats.get("mean", stats.get("obs_mean")), stats.get("std", stats.get("obs_std"))
        var = stats.get("var", stats.get("obs_var"))
        if mean is None or (std is None and var is None):
            raise BundleError(f"normalization to fold needs 'mean' and 'std' or 'var', got keys {sorted(stats)}")
        keys = self.fields or [None]
        for i, k in enumerate(keys):
            m = np.asarray(mean[k] if k else mean, dtype=np.float32)
            s = np.asarray(std[k] if k else std, dtype=np.float32) if std is not None else \
                np.sqrt(np.asarray(var[k] if k else var, dtype=np.float64) + eps).astype(np.float32)
            self.register_buffer(f"mean{i}", torch.from_numpy(m))
            self.register_buffer(f"std{i}", torch.from_numpy(s))

    def _norm(self, x: torch.Tensor, i: int) -> torch.Tensor:
        y = (x.float() - getattr(self, f"mean{i}")) / getattr(self, f"std{i}")
        return y if self.clip is None else torch.clamp(y, -self.clip, self.clip)

    def forward(self, obs: Any) -> torch.Tensor:
        if self.fields is None:
            return self.inner(self._norm(obs, 0))
        return self.inner({k: self._norm(obs[k], i) for i, k in enumerate(self.fields)})


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime as ort

    return {"torch": torch.__version__, "onnx": onnx.__version__, "numpy": np.__version__,
            "onnxruntime": ort.__version__, "python": platform.python_version()}


# -- the export --------------------------------------------------------------------------------
def export_bundle(parts: Mapping[str, nn.Module] | nn.Module, metadata: Mapping[str, Any], out: str | Path, *,
                  opset: int = OPSET, recorded_obs: Any = None, tolerance: float = 1e-5, policy_version: int = 0,
                  quantize: bool = False, int8_mode: str = "auto", log: Callable[[str], None] = print) -> Path:
    """Export, check and write a bundle; returns its directory (``out`` without ``.onnx``).

    ``metadata`` keys: ``obs_spec``, ``action_spec`` (required), ``feature_spec`` (required with two
    parts), ``normalization`` (``{"mean" | "obs_mean", "std" | "var" | "obs_var", "eps", "clip", "folded"}``; when ``folded`` is
    false the normalization is added in front of the graph), ``training_step``, ``env_id``,
    ``obs_terms``, ``action_terms``, ``joint_names``, ``action_chain_config``, ``control_period``.
    ``quantize`` adds ``policy.int8.onnx``, quantized by ``int8_mode`` (`tinker_deploy.quantize.MODES`: ``static``,
    calibrated on the recorded observations, ``dynamic``, or ``auto``: static when the graph has convolutions).
    """
    if opset != OPSET:
        log(f"note: exporting at opset {opset}; tinker's documented opset is {OPSET}")
    obs_spec, action_spec = _as_spec(metadata.get("obs_spec")), _as_spec(metadata.get("action_spec"))
    feature_spec = _as_spec(metadata.get("feature_spec"))
    if obs_spec is None or action_spec is None:
        raise BundleError("export metadata needs 'obs_spec' and 'action_spec'")
    if isinstance(parts, nn.Module):
        parts = {"policy": parts}
    parts = dict(parts)
    if set(parts) - {"hand"} == {"perception", "actor"}:
        if feature_spec is None:
            raise BundleError("export metadata needs 'feature_spec' when the policy has perception and actor parts")
        if "hand" in parts and not (isinstance(obs_spec, DictSpec) and "image" in obs_spec.fields):
            raise BundleError("deployable part 'hand' finds the end effector in the image, and this observation has "
                              "no 'image' field")
    elif set(parts) != {"policy"}:
        raise BundleError(f"deployable parts must be {{'perception', 'actor'}} (and 'hand' with them), or one module, "
                          f"got {sorted(parts)}")
    norm = dict(metadata.get("normalization") or {})
    if norm and norm.get("folded", True) is False:
        first = "perception" if "perception" in parts else "policy"
        parts[first] = _Normalize(parts[first], norm, obs_spec)
        norm["folded"] = True
    if quantize:
        from tinker_deploy.quantize import MODES

        if int8_mode not in MODES:
            raise BundleError(f"int8_mode: expected one of {MODES}, got {int8_mode!r}")
    modes = {k: m.training for k, m in parts.items()}
    for m in parts.values():
        m.eval()
    try:
        return _export(parts, metadata, out, obs_spec, action_spec, feature_spec, norm, opset, recorded_obs,
                       tolerance, policy_version, int8_mode if quantize else None, log)
    finally:
        for k, m in parts.items():
            m.train(modes[k])


def _export(parts, metadata, out, obs_spec, action_spec, feature_spec, norm, opset, recorded_obs, tolerance,
            policy_version, int8, log) -> Path:
    if recorded_obs is None:
        recorded_obs = generate_obs(obs_spec)
        log(f"no recorded observations given: using {N_RECORDED} generated within the observation spec")
    obs_spec.check(recorded_obs, "recorded_obs", batched=True, bounds=False)
    policy = parts.get("policy") or _Composed(parts["perception"], parts["actor"])

    files: dict[str, bytes] = {}
    models: dict[str, ModelEntry] = {}
    reference: dict[str, np.ndarray] = {}
    with torch.no_grad():
        plan = []  # the parts first, so that an export error names the part it comes from
        if "perception" in parts:
            plan += [("perception", parts["perception"], obs_spec, "obs", "features", feature_spec),
                     ("actor", parts["actor"], feature_spec, "features", "action", action_spec)]
        plan.append(("policy", policy, obs_spec, "obs", "action", action_spec))
        if "hand" in parts:
            plan.append(("hand", parts["hand"], hand_input_spec(obs_spec), "obs", "hand", HAND_SPEC))
        for name, mod, in_spec, flat, out_name, out_spec in plan:
            inputs = (reference["features"] if name == "actor" else
                      {k: recorded_obs[k] for k in in_spec.fields} if name == "hand" else recorded_obs)
            src = _slice(inputs, 1)
            raw = onnx_bytes(mod, src, in_spec, flat, out_name, opset, name)
            blob, rewrites = rewrite(raw)
            if name == "policy" and int8 is not None:
                int8_source, int8_rewrites = rewrite(raw, for_int8=True)  # the int8 model's own layout choices
            for line in rewrites:
                log(f"graph {name}: {line}")
            check_onnx(blob, opset, name)
            expected = mod(_to_torch(inputs)).numpy()
            out_spec.check(expected[0], f"{name} output", bounds=False)
            if name == "perception":
                reference["features"] = expected
            elif name == "policy":
                reference["action"] = expected
            got = _ort_run(blob, inputs, in_spec, flat)
            diff = parity(name, expected, got, tolerance, log)
            files[f"{name}.onnx"] = blob
            models[name] = ModelEntry(
                file=f"{name}.onnx", sha256="",
                inputs=[{"name": n, "spec": (in_spec[n] if isinstance(in_spec, DictSpec) else in_spec).to_dict()}
                        for n in spec_input_names(in_spec, flat)],
                outputs=[{"name": out_name, "spec": out_spec.to_dict()}],
                accuracy={"max_abs_diff_vs_torch": diff, "tolerance": tolerance,
                          **({"graph_rewrites": rewrites} if rewrites else {})})
        parity_info = {"max_abs_diff": models["policy"].accuracy["max_abs_diff_vs_torch"], "tolerance": tolerance,
                       "n_obs": int(len(reference["action"]))}

    if int8 is not None:
        from tinker_deploy.quantize import quantize_model

        q_bytes, report = quantize_model(int8_source, recorded_obs, obs_spec, reference["action"], int8)
        log(f"int8 ({report['mode']}): max abs diff vs fp32 {report['max_abs_diff_vs_fp32']:.3g}, "
            f"mean {report['mean_abs_diff_vs_fp32']:.3g} on {report['n_obs']} obs")
        if int8_rewrites:
            report["graph_rewrites"] = int8_rewrites
        files["policy.int8.onnx"] = q_bytes
        models["policy_int8"] = ModelEntry(file="policy.int8.onnx", sha256="", inputs=models["policy"].inputs,
                                           outputs=models["policy"].outputs, accuracy=report)

    files[RECORDED] = pack_recorded(recorded_obs, {"action": reference["action"],
                                                  **({"features": reference["features"]} if "features" in reference else {})})
    obs_terms = [t if isinstance(t, Term) else Term.from_dict(t) for t in metadata.get("obs_terms") or []]
    action_chain = metadata.get("action_chain_config") or metadata.get("action_chain") or {}
    if not isinstance(action_chain, Mapping):
        import dataclasses
        action_chain = dataclasses.asdict(action_chain)
    control_period = metadata.get("control_period")
    import onnxruntime as ort

    manifest = Manifest(
        models=models, obs_spec=obs_spec, action_spec=action_spec, feature_spec=feature_spec,
        created=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), opset=opset,
        ort_versions_verified={platform.machine(): [ort.__version__]},
        obs_terms=obs_terms, action_terms=list(metadata.get("action_terms") or []),
        image_terms=list(metadata.get("image_terms") or []),
        image_terms_static=bool(metadata.get("image_terms_static", True)),
        located_geometry=_jsonable(metadata["located_geometry"]) if metadata.get("located_geometry") else None,
        joint_names=list(metadata.get("joint_names") or []),
        control_period=None if control_period is None else float(control_period),
        action_chain=dict(action_chain),
        deploy_settings_sha256=deploy_settings_sha256(control_period, dict(action_chain), obs_terms),
        normalization=_jsonable(norm), training_step=int(metadata.get("training_step", 0)),
        policy_version=int(policy_version), env_id=str(metadata.get("env_id") or ""),
        env=_jsonable(dict(metadata.get("env") or {})), parity=parity_info,
        data_files={"recorded_obs": {"file": RECORDED, "sha256": ""}},
        versions=_versions(), byte_order=sys.byteorder,
        platform={"system": platform.system(), "machine": platform.machine(), "python": platform.python_version()},
    )
    path = write_bundle(bundle_dir_for_output(out), manifest, files)
    log(f"bundle written: {path} (models {', '.join(sorted(models))}; opset {opset}; "
        f"policy sha256 {manifest.models['policy'].sha256[:12]}...)")
    return path


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().tolist()
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return x
