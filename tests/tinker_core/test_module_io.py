"""ModuleBase save/load: round trips, and refusal of files for another spec or class, tampered or
truncated files. Nothing is ever unpickled (the format is safetensors + JSON metadata)."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np
import pytest

from tinker_core.config import load_config
from tinker_core.errors import CheckpointError, ConfigError
from tinker_core.module import ModuleBase, atomic_write_bytes, config_from_dict
from tinker_core.spec import Spec


def _outputs(policy, n=8):
    x = np.random.default_rng(0).uniform(-1, 1, (n, 3)).astype(np.float32)
    return policy(x)


def test_torch_module_round_trip(tmp_path, parts):
    a = parts.MLPPolicy(parts.MLPConfig(hidden=16, seed=1))
    path = a.save(tmp_path / "policy.safetensors", extra={"step": 123})
    b = parts.MLPPolicy(parts.MLPConfig(hidden=16, seed=2))
    assert not np.allclose(_outputs(a), _outputs(b))
    b.load(path)
    np.testing.assert_array_equal(_outputs(a), _outputs(b))
    meta, tensors = ModuleBase.read_file(path)
    assert meta["config"] == {"hidden": 16, "seed": 1, "max_action": 2.0}
    assert meta["extra"] == {"step": 123}
    assert meta["input_spec"] == parts.FEATURES.to_dict()
    assert meta["class"].endswith(".MLPPolicy") and meta["format_version"] == 1
    assert set(tensors) == set(a.state_dict())


def test_stateless_and_transition_spec_modules_round_trip(tmp_path, parts):
    n = parts.Normalize(parts.ScaleConfig(scale=0.25))
    n.load(n.save(tmp_path / "norm.safetensors"))
    learner = parts.KeepLearner()
    learner.seen.extend([None] * 5)  # type: ignore[list-item]
    path = learner.save(tmp_path / "learner.safetensors")
    fresh = parts.KeepLearner()
    fresh.load(path)
    assert fresh.loaded_count == 5


def test_refuses_a_file_for_another_spec(tmp_path, parts):
    path = parts.MLPPolicy().save(tmp_path / "p.safetensors")
    other = parts.MLPPolicy(in_spec=Spec((4,), "float32"))
    with pytest.raises(CheckpointError) as e:
        other.load(path)
    assert str(e.value) == (f"{path}: input_spec mismatch: this module expects float32[4], "
                            f"the file was saved for float32[3]")
    wide = parts.MLPPolicy(parts.MLPConfig(max_action=3.0))
    with pytest.raises(CheckpointError, match="output_spec mismatch"):
        wide.load(path)


def test_refuses_a_file_for_another_class(tmp_path, parts):
    path = parts.Normalize().save(tmp_path / "n.safetensors")
    with pytest.raises(CheckpointError, match=r"written by .*\.Normalize, cannot load into .*\.MLPPolicy"):
        parts.MLPPolicy().load(path)


def test_refuses_a_state_of_another_shape(tmp_path, parts):
    path = parts.MLPPolicy(parts.MLPConfig(hidden=16)).save(tmp_path / "p.safetensors")
    with pytest.raises(CheckpointError, match=r"MLPPolicy.net.0.weight: expected shape \(32, 3\), file has \(16, 3\)"):
        parts.MLPPolicy(parts.MLPConfig(hidden=32)).load(path)


def _header_len(raw: bytes) -> int:
    return struct.unpack("<Q", raw[:8])[0]


def test_refuses_tampered_tensor_bytes(tmp_path, parts):
    path = parts.MLPPolicy().save(tmp_path / "p.safetensors")
    raw = bytearray(path.read_bytes())
    raw[8 + _header_len(raw) + 5] ^= 0x01  # one bit inside the first tensor
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="does not match the recorded sha256: the file was modified"):
        parts.MLPPolicy().load(path)


def test_refuses_tampered_metadata(tmp_path, parts):
    path = parts.MLPPolicy().save(tmp_path / "p.safetensors")
    raw = path.read_bytes()
    n = _header_len(raw)
    header = raw[8:8 + n].decode()
    forged = header.replace('\\"max_action\\": 2.0', '\\"max_action\\": 9.0')
    assert forged != header and len(forged) == len(header)
    path.write_bytes(raw[:8] + forged.encode() + raw[8 + n:])
    with pytest.raises(CheckpointError, match="the file was modified"):
        ModuleBase.read_file(path)


def test_refuses_truncated_missing_and_foreign_files(tmp_path, parts):
    path = parts.MLPPolicy().save(tmp_path / "p.safetensors")
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) - 7])
    with pytest.raises(CheckpointError, match="not a readable tinker module file"):
        parts.MLPPolicy().load(path)
    with pytest.raises(CheckpointError, match="no such module file"):
        parts.MLPPolicy().load(tmp_path / "absent.safetensors")
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(3, np.float32)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(CheckpointError, match="safetensors file without tinker metadata"):
        parts.MLPPolicy().load(tmp_path / "foreign.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"\x00" * 3)
    with pytest.raises(CheckpointError, match="not a readable tinker module file"):
        parts.MLPPolicy().load(tmp_path / "junk.safetensors")


def test_refuses_a_newer_format(tmp_path, parts):
    from safetensors.numpy import save as st_save

    from tinker_core.module import file_digest

    meta = {"format": "tinker.module", "format_version": 99, "class": "x"}
    meta["sha256"] = file_digest(meta, {})
    (tmp_path / "new.safetensors").write_bytes(st_save({}, metadata={"tinker": json.dumps(meta)}))
    with pytest.raises(CheckpointError, match="format version 99 is newer than this tinker"):
        ModuleBase.read_file(tmp_path / "new.safetensors")


def test_atomic_write_leaves_old_or_new_never_half(tmp_path):
    p = tmp_path / "f.bin"
    atomic_write_bytes(p, b"old")
    atomic_write_bytes(p, b"new" * 1000)
    assert p.read_bytes() == b"new" * 1000
    assert [x.name for x in tmp_path.iterdir()] == ["f.bin"]  # no temporary left behind


@dataclass
class _Cfg:
    lr: float = 1e-3
    """learning rate"""
    layers: int = 2
    """number of layers"""

    def __post_init__(self):
        if self.layers < 1:
            raise ValueError(f"_Cfg.layers: expected >= 1, got {self.layers}")


def test_config_loading_names_file_and_key(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("train:\n  lr: 0.01\n  layers: 3\n")
    assert load_config(_Cfg, y, section="train") == _Cfg(0.01, 3)
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['lrr'\] for _Cfg"):
        config_from_dict(_Cfg, {"lrr": 1})
    with pytest.raises(ConfigError, match="no section 'eval'"):
        load_config(_Cfg, y, section="eval")
    with pytest.raises(ConfigError, match=r"_Cfg.layers: expected >= 1, got 0"):
        load_config(_Cfg, {"layers": 0})


def test_config_section_must_be_a_mapping(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("train: [1, 2]\n")
    with pytest.raises(ConfigError, match=r"c.yaml:train: expected a mapping, got list"):
        load_config(_Cfg, y, section="train")
    with pytest.raises(ConfigError, match="int is not a dataclass"):
        config_from_dict(int, {})
