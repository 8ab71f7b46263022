"""`splice_perception`: a bundle's perception model in front of another bundle's actor, as one new bundle.

What online fine-tuning of a camera policy needs: the learner trains the actor (SAC on the features), and its
exported bundles carry the state policy's own perception (the features are the observation). A robot running a
vision bundle (`pretrained/arm_reach_vision`: a locator trained apart, put in front of the state actor) keeps
its perception; this puts it in front of each new actor. ONNX graphs are composed (`onnx.compose.merge_models`,
the perception's ``features`` into the actor's input), the recorded observations of the perception bundle get
reference features and actions from the two parts through onnxruntime, and the composed ``policy.onnx`` must
reproduce them (parity). The perception bundle's ``hand`` model (the end effector its locator sees, which
calibrates a moved camera in the loop) comes along unchanged: a fine-tuned actor keeps its perception's calibration.
Where the perception's features are the actor bundle's observation rather than its features (the camera sorter:
the located state, and the sorter normalizes its observation first), the actor bundle's whole policy.onnx takes
the actor's place. Refused, with the reason, when the two bundles do not fit: another feature layout, action,
joint order, action chain or control period.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import numpy as np

from tinker_core.errors import BundleError
from tinker_deploy.bundle import load_bundle, pack_recorded, write_bundle
from tinker_deploy.manifest import Manifest

PERCEPTION_SIDE = ("perception", "hand")
"""the models of the perception bundle the spliced bundle keeps as they are"""

PARITY_TOLERANCE = 1e-5
"""max abs difference of the composed policy.onnx from its two parts run one after the other"""


def _session(model_bytes: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _run(sess: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
    names = [i.name for i in sess.get_inputs()]
    if len(names) == 1 and names[0] not in feeds and len(feeds) == 1:
        feeds = {names[0]: next(iter(feeds.values()))}
    return np.asarray(sess.run(None, {n: feeds[n] for n in names})[0])


def _fits(p: Manifest, a: Manifest) -> str:
    """Which model of the actor bundle the perception feeds: ``actor`` where the features are its features;
    ``policy`` (its own perception, e.g. the observation's normalization, then its actor) where the features are
    its observation (the camera sorter: the located state, before the sorter's normalization)."""
    side = "actor" if p.feature_spec == a.feature_spec else "policy" if p.feature_spec == a.obs_spec else ""
    checks = (("feature_spec", p.feature_spec, a.feature_spec if side != "policy" else a.obs_spec),
              ("action_spec", p.action_spec, a.action_spec),
              ("joint_names", p.joint_names, a.joint_names), ("action_chain", p.action_chain, a.action_chain),
              ("control_period", p.control_period, a.control_period),
              ("obs_terms (the features' layout)", [t.name for t in p.obs_terms], [t.name for t in a.obs_terms]))
    for what, mine, theirs in checks:
        if mine != theirs:
            raise BundleError(f"splice: the perception bundle's {what} {mine!r} differs from the actor bundle's "
                              f"{theirs!r}" + (" (nor is it its observation)" if what == "feature_spec" else "")
                              + "; its perception cannot feed that actor")
    for m, where in ((p, "perception"), (a, "actor")):
        if "perception" not in m.models or "actor" not in m.models:
            raise BundleError(f"splice: the {where} bundle has no perception/actor split")
    return side


def _input_named(model: Any, name: str) -> Any:
    """``model`` (one input) with that input renamed ``name`` (an actor's graph reads ``features``)."""
    old = model.graph.input[0].name
    if old != name:
        model.graph.input[0].name = name
        for node in model.graph.node:
            for i, x in enumerate(node.input):
                if x == old:
                    node.input[i] = name
    return model


def splice_perception(perception_bundle: str | os.PathLike, actor_bundle: str | os.PathLike, out: str | os.PathLike,
                      policy_version: int | None = None) -> Path:
    """Bundle ``out`` = ``perception_bundle``'s perception.onnx, then ``actor_bundle``'s actor.onnx."""
    import onnx
    from onnx import compose

    pb, ab = load_bundle(perception_bundle), load_bundle(actor_bundle)
    pm, am = pb.manifest, ab.manifest
    side = _fits(pm, am)
    p_bytes = pb.model_path("perception").read_bytes()
    a_bytes = ab.model_path(side).read_bytes()
    p_model, a_model = onnx.load_from_string(p_bytes), onnx.load_from_string(a_bytes)
    if side == "policy":
        a_model = _input_named(a_model, "features")
        a_bytes = a_model.SerializeToString()
    p_out, a_in = p_model.graph.output[0].name, a_model.graph.input[0].name
    if p_out == a_in:  # the shared edge keeps one name
        p_model = compose.add_prefix(p_model, "perception/", rename_inputs=False, rename_outputs=False)
        a_model = compose.add_prefix(a_model, "actor/", rename_inputs=False, rename_outputs=False)
    else:
        p_model = compose.add_prefix(p_model, "perception/", rename_inputs=False)
        a_model = compose.add_prefix(a_model, "actor/", rename_inputs=False)
        p_out = "perception/" + p_out
    merged = compose.merge_models(p_model, a_model, io_map=[(p_out, a_in)])
    onnx.checker.check_model(merged)
    policy_bytes = merged.SerializeToString()

    obs, _ = pb.recorded()
    feeds = obs if isinstance(obs, dict) else {"obs": obs}
    features = _run(_session(p_bytes), feeds).astype(np.float32)
    action = _run(_session(a_bytes), {a_in: features})
    composed = _run(_session(policy_bytes), feeds)
    diff = float(np.max(np.abs(composed.astype(np.float64) - action))) if action.size else 0.0
    if diff > PARITY_TOLERANCE:
        raise BundleError(f"splice: the composed policy.onnx differs from its two parts by {diff:.3g} (max abs), "
                          f"above {PARITY_TOLERANCE:g}")

    m = Manifest.from_json(pm.to_json())
    m.models = {k: copy.deepcopy(v) for k, v in m.models.items() if k in (*PERCEPTION_SIDE, "actor", "policy")}
    m.models["actor"] = copy.deepcopy(pm.models["actor"])  # the same I/O: the features in, the action out
    m.models["actor"].file = "actor.onnx"
    m.models["policy"].accuracy = {"max_abs_diff_vs_two_parts": diff, "tolerance": PARITY_TOLERANCE,
                                   "spliced": f"perception {pm.models['perception'].sha256[:12]} + {side} "
                                              f"{am.models[side].sha256[:12]}"}
    m.training_step = am.training_step
    m.policy_version = int(policy_version if policy_version is not None else am.policy_version)
    m.parity = {"max_abs_diff": diff, "tolerance": max(PARITY_TOLERANCE, float((pm.parity or {}).get("tolerance", 0.0))),
                "n_obs": int(action.shape[0])}
    recorded = pack_recorded(obs, {"action": action.astype(np.float32), "features": features})
    m.data_files = {"recorded_obs": {"file": "recorded_obs.npz", "sha256": ""}}
    files = {"perception.onnx": p_bytes, "actor.onnx": a_bytes, "policy.onnx": policy_bytes,
             "recorded_obs.npz": recorded}
    m.models["perception"].file, m.models["policy"].file = "perception.onnx", "policy.onnx"
    if "hand" in m.models:
        files["hand.onnx"] = pb.model_path("hand").read_bytes()
        m.models["hand"].file = "hand.onnx"
    return write_bundle(out, m, files)
