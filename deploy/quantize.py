"""Int8 dynamic quantization of a bundle's policy, with its accuracy against fp32.

Weights become int8; activations are quantized on the fly (``onnxruntime.quantization.quantize_dynamic``).
The report compares the int8 and fp32 outputs on the bundle's recorded observations, so the user sees
what the speed costs before deploying it. Needs onnx (training install); the edge runtime only runs
the result.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tinker_core.errors import BundleError
from tinker_core.spec import AnySpec, DictSpec

from deploy.manifest import spec_input_names

DEFAULT_OPS: tuple[str, ...] = ("MatMul", "Gemm")
"""operators quantized by default: the dense layers. Convolutions stay fp32 because onnxruntime's
dynamic ConvInteger kernel is several times slower than its fp32 convolution on x86 CPUs."""


def _run(model: bytes | str, obs: Any, spec: AnySpec) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    names = spec_input_names(spec)
    feed = {n: obs[n] for n in names} if isinstance(spec, DictSpec) else {names[0]: obs}
    return sess.run(None, feed)[0]


def quantize_model(fp32: bytes, recorded_obs: Any, obs_spec: AnySpec, fp32_actions: np.ndarray | None = None,
                   op_types: Sequence[str] = DEFAULT_OPS) -> tuple[bytes, dict]:
    """(int8 model bytes, accuracy report against fp32 on ``recorded_obs``)."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="tinker-quant-") as d:
        src, dst = Path(d) / "fp32.onnx", Path(d) / "int8.onnx"
        src.write_bytes(fp32)
        logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))  # its pre-processing hint
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=list(op_types))
        except Exception as e:  # quantization tool errors are plain Exceptions
            raise BundleError(f"int8 quantization failed with onnxruntime {ort.__version__}: {e}") from e
        q = dst.read_bytes()
    ref = _run(fp32, recorded_obs, obs_spec) if fp32_actions is None else fp32_actions
    got = _run(q, recorded_obs, obs_spec)
    return q, accuracy_report(ref, got, op_types)


def accuracy_report(fp32: np.ndarray, int8: np.ndarray, op_types: Sequence[str] = DEFAULT_OPS) -> dict:
    """Max/mean/p99 absolute difference, relative to the fp32 action range too."""
    d = np.abs(fp32.astype(np.float64) - int8.astype(np.float64))
    span = float(np.max(fp32) - np.min(fp32)) if fp32.size else 0.0
    return {
        "quantization": "dynamic int8 (weights QInt8, activations per call)",
        "op_types": list(op_types),
        "n_obs": int(len(fp32)),
        "max_abs_diff_vs_fp32": float(d.max()) if d.size else 0.0,
        "mean_abs_diff_vs_fp32": float(d.mean()) if d.size else 0.0,
        "p99_abs_diff_vs_fp32": float(np.percentile(d, 99)) if d.size else 0.0,
        "max_diff_rel_to_fp32_range": float(d.max() / span) if span > 0 else 0.0,
    }
