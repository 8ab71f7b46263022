"""Perception encoders (specs, numpy path, ONNX export + onnxruntime parity) and the curriculum."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tinker_core.curriculum import Curriculum, CurriculumConfig
from tinker_core.errors import ConfigError, SpecError
from tinker_core.nn import (CrossModalFusion, DepthwiseEncoder, JointMLP, LSTMEncoder, MultiScaleSpatial, NatureCNN,
                            TemporalCNN, build_perception)
from tinker_core.spec import DictSpec, Spec

IMG = Spec((64, 64, 3), "uint8", 0, 255)
JOINTS = Spec((14,), "float32")
HIST = Spec((8, 14), "float32")
MAP = Spec((24, 20, 6), "float32", 0.0, 1.0)

CASES = [
    (NatureCNN, IMG), (DepthwiseEncoder, IMG), (JointMLP, JOINTS), (LSTMEncoder, HIST), (TemporalCNN, HIST),
    (CrossModalFusion, DictSpec({"image": IMG, "joints": JOINTS})), (MultiScaleSpatial, IMG), (MultiScaleSpatial, MAP),
]


def _sample(spec, b):
    rng = np.random.default_rng(0)
    if isinstance(spec, DictSpec):
        return {k: _sample(s, b) for k, s in spec.items()}
    if spec.dtype == "uint8":
        return rng.integers(0, 256, size=(b, *spec.shape), dtype=np.uint8)
    return rng.normal(size=(b, *spec.shape)).astype(np.float32)


def _case_id(cls, spec) -> str:
    return f"{cls.__name__}-{'x'.join(map(str, spec.shape)) if isinstance(spec, Spec) else 'dict'}"


@pytest.mark.parametrize("cls,spec", CASES, ids=[_case_id(*c) for c in CASES])
def test_encoder_specs_numpy_path_and_onnx_parity(cls, spec, tmp_path):
    import onnxruntime as ort

    torch.manual_seed(0)
    enc = cls(spec).eval()
    x = _sample(spec, 2)
    feats = enc(x[0] if not isinstance(x, dict) else {k: v[0] for k, v in x.items()})
    enc.output_spec.check(feats, f"{cls.__name__}.features")
    tx = {k: torch.as_tensor(v) for k, v in x.items()} if isinstance(x, dict) else torch.as_tensor(x)
    with torch.no_grad():
        ref = enc(tx).numpy()
    names = list(x) if isinstance(x, dict) else ["obs"]
    args = (tx,) if not isinstance(x, dict) else (tx, {})  # trailing {}: the dict is the input, not kwargs
    path = tmp_path / "enc.onnx"
    torch.onnx.export(enc, args, str(path), opset_version=17, dynamo=False, input_names=names,
                      output_names=["features"])
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {n: (x[n] if isinstance(x, dict) else x) for n in names}
    out = sess.run(None, feed)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4)


def test_multiscale_levels_halve_the_resolution_and_say_where_a_marker_is():
    """Each level halves the map; the finest level's soft-argmax moves with a marker (the where survives), and a
    float map is taken as it is while an image is scaled from bytes."""
    torch.manual_seed(0)
    enc = MultiScaleSpatial(MAP).eval()
    maps = enc.feature_maps(torch.zeros(1, *MAP.shape))
    assert [tuple(m.shape[2:]) for m in maps] == [(24, 20), (12, 10), (6, 5)]
    assert [m.shape[1] for m in maps] == [16, 32, 64]
    assert build_perception(MAP).__class__ is MultiScaleSpatial and build_perception(IMG).__class__ is NatureCNN

    @torch.no_grad()
    def where(col: int) -> float:
        x = torch.zeros(1, *MAP.shape)
        x[0, 12, col, 0] = 1.0
        m = enc.feature_maps(x)[0].flatten(2)
        return float(torch.matmul(torch.softmax(m * 50.0, dim=-1), enc.grid0)[0, :, 0].mean())  # x of the peaks

    assert where(2) < where(10) < where(17)


def test_encoders_refuse_wrong_specs():
    with pytest.raises(SpecError, match="expected an image spec"):
        NatureCNN(JOINTS)
    with pytest.raises(SpecError, match="keys 'image' and 'joints'"):
        CrossModalFusion(DictSpec({"cam": IMG}))
    with pytest.raises(ConfigError, match="perception"):
        build_perception(JOINTS, "transformer")
    with pytest.raises(SpecError, match=r"H>=8, W>=8, C<=64\] for 3 levels"):
        MultiScaleSpatial(Spec((6, 32, 3), "float32"))
    assert type(build_perception(IMG)).__name__ == "NatureCNN"


def test_image_observations_train_end_to_end(tiny_sac):
    """SAC on a dict observation {image, state} uses the dict encoder without changes elsewhere."""
    from tinker_core.algos import SAC

    class ImgPendulum(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Dict({
                "image": gym.spaces.Box(0, 255, (48, 48, 3), np.uint8), "state": env.observation_space})

        def observation(self, o):
            img = np.zeros((48, 48, 3), np.uint8)
            img[..., 0] = int((o[0] + 1) * 127)
            return {"image": img, "state": o}

    algo = SAC(ImgPendulum(gym.make("Pendulum-v1")), tiny_sac)
    algo.learn(80, progress=False)
    assert algo.num_updates > 0
    assert algo.predict(algo.vec_env.obs).shape == (1, 1)
    assert algo.export_metadata()["feature_spec"]["shape"][0] > 3


class _Env:
    def __init__(self):
        self.target_distance = None
        self.unwrapped = self


def test_curriculum_promotes_and_demotes_on_success_rate(caplog):
    env = _Env()
    cur = Curriculum(CurriculumConfig(param="target_distance", levels=[0.1, 0.2, 0.4], promote_at=0.75,
                                      demote_at=0.25, window=4), envs=[env])
    assert env.target_distance == 0.1
    import logging

    with caplog.at_level(logging.INFO, "tinker.curriculum"):
        changed = [cur.record(s) for s in [True, True, False, True]]
    assert changed == [False, False, False, True] and env.target_distance == 0.2
    assert "target_distance 0.1 -> 0.2" in caplog.text
    for s in [False, False, False, False]:
        cur.record(s)
    assert env.target_distance == 0.1 and cur.history[-1]["to"] == 0.1
    with pytest.raises(ConfigError, match="promote_at"):
        CurriculumConfig(promote_at=0.0)
