"""Int8 quantization of a bundle's policy, with its accuracy against fp32.

Two modes (``onnxruntime.quantization``), and ``auto`` (the default), which picks ``static`` for a
graph with convolutions and ``dynamic`` for one made of dense layers only:

- ``static``: weights int8 per output channel, activations uint8 with ranges calibrated
  on the bundle's recorded observations, in QDQ form, which onnxruntime runs as QLinearConv / QGemm
  kernels. Convolutions get quantized too, which is where a CNN policy spends its time. Weights use
  7 bits (``reduce_range``): x86 CPUs without VNNI multiply uint8 x int8 pairs with VPMADDUBSW, whose
  16-bit sums saturate with full 8-bit weights. A camera image (``uint8`` pixels cast to float, the
  /255 already folded into the first convolution by `tinker_deploy.graph_rewrite`) is quantized with scale 1
  and zero point 0, which is the image itself: its Cast and QuantizeLinear are removed, so the first
  convolution reads the camera bytes. Export hands this mode the graph rewritten for int8
  (``tinker_deploy.graph_rewrite.rewrite(for_int8=True)``: no layout transposes left in onnxruntime's NHWC graph).
- ``dynamic``: int8 weights (7 bits, for the same reason) of the dense layers only, activations
  quantized per call. With 8-bit weights the saturation cost the reference MLP 0.28 of max action
  error; with 7 bits 0.013, at the same speed. Convolutions
  stay fp32 (onnxruntime's dynamic ConvInteger is slower than its fp32 convolution on x86). For a
  small MLP at batch 1 this is the faster int8 (10.6 us vs 12.9 us static, 12.3 us fp32, on the
  2-core EPYC): static adds a QuantizeLinear and a DequantizeLinear per call and has no convolution
  to win back their cost.

The report compares the int8 and fp32 outputs on the recorded observations (the calibration set for
``static``), so the user sees what the speed costs before deploying it. Needs onnx (training install);
the edge runtime only runs the result.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from tinker_core.errors import BundleError
from tinker_core.spec import AnySpec, DictSpec

from tinker_deploy.manifest import spec_input_names

MODES = ("auto", "static", "dynamic")
"""quantization modes `quantize_model` knows"""

DYNAMIC_OPS: tuple[str, ...] = ("MatMul", "Gemm")
"""operators quantized in ``dynamic`` mode: the dense layers"""

CALIBRATION_BATCH = 32
"""recorded observations per calibration batch (the graph has a dynamic batch axis)"""


def _feed(obs: Any, spec: AnySpec, sl: slice = slice(None)) -> dict[str, np.ndarray]:
    names = spec_input_names(spec)
    if isinstance(spec, DictSpec):
        return {n: np.ascontiguousarray(obs[n][sl]) for n in names}
    return {names[0]: np.ascontiguousarray(obs[sl])}


def _run(model: bytes | str, obs: Any, spec: AnySpec) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    return sess.run(None, _feed(obs, spec))[0]


def _n_obs(obs: Any) -> int:
    return len(next(iter(obs.values()))) if isinstance(obs, dict) else len(obs)


class _Calibration:
    """`onnxruntime.quantization.CalibrationDataReader` over the recorded observations."""

    def __init__(self, obs: Any, spec: AnySpec, batch: int = CALIBRATION_BATCH):
        n = _n_obs(obs)
        self._it: Iterator[dict[str, np.ndarray]] = iter(
            [_feed(obs, spec, slice(i, i + batch)) for i in range(0, n, batch)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def _exact_image_casts(model) -> list[str]:
    """Outputs of Casts from uint8 to float that feed only Conv inputs: pixels 0..255, which uint8 with
    scale 1 and zero point 0 represents exactly."""
    import onnx

    m = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in list(m.graph.input) + list(m.graph.value_info)}
    users: dict[str, list] = {}
    for n in m.graph.node:
        for i in n.input:
            users.setdefault(i, []).append(n)
    out = []
    for n in m.graph.node:
        if n.op_type == "Cast" and types.get(n.input[0]) == onnx.TensorProto.UINT8:
            us = users.get(n.output[0], [])
            if us and all(u.op_type == "Conv" and u.input[0] == n.output[0] for u in us):
                out.append(n.output[0])
    return out


def _feed_images_directly(model, cast_outputs: Sequence[str]) -> int:
    """Remove ``Cast -> QuantizeLinear(scale 1, zero point 0, uint8)`` on ``cast_outputs``: the
    quantized tensor is the uint8 input of the Cast. Returns how many pairs went."""
    from onnx import numpy_helper

    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    removed = 0
    for q in [n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] in cast_outputs]:
        cast = producer[q.input[0]]
        scale, zp = inits.get(q.input[1]), inits.get(q.input[2]) if len(q.input) > 2 else None
        if scale is None or zp is None or zp.dtype != np.uint8 or scale.size != 1 or float(scale) != 1.0 or int(zp) != 0:
            continue
        for n in g.node:
            for i, name in enumerate(n.input):
                if name == q.output[0]:
                    n.input[i] = cast.input[0]
        g.node.remove(q)
        if not any(cast.output[0] in n.input for n in g.node):
            g.node.remove(cast)
        removed += 1
    return removed


def _static(src: Path, dst: Path, recorded_obs: Any, obs_spec: AnySpec) -> dict:
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    images = _exact_image_casts(onnx.load(str(src)))
    one = {"scale": np.array(1.0, np.float32), "zero_point": np.array(0, np.uint8)}
    quantize_static(
        src, dst, _Calibration(recorded_obs, obs_spec), quant_format=QuantFormat.QDQ, per_channel=True,
        reduce_range=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"TensorQuantOverrides": {name: [dict(one)] for name in images}})
    model = onnx.load(str(dst))
    direct = _feed_images_directly(model, images)
    onnx.save(model, str(dst))
    return {
        "quantization": "static int8, QDQ: weights int8 per channel (7-bit range), activations uint8 "
                        "per tensor, MinMax ranges calibrated on the recorded observations",
        "calibration_obs": _n_obs(recorded_obs),
        "images_fed_as_uint8": direct,
    }


def _dynamic(src: Path, dst: Path, op_types: Sequence[str]) -> dict:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=list(op_types), reduce_range=True)
    return {"quantization": "dynamic int8: weights int8 per tensor (7-bit range), activations uint8 per call",
            "op_types": list(op_types)}


def resolve_mode(fp32: bytes) -> str:
    """``static`` when the graph has a convolution, else ``dynamic`` (see the module docstring)."""
    import onnx

    ops = {n.op_type for n in onnx.load_from_string(fp32).graph.node}
    return "static" if ops & {"Conv", "ConvTranspose"} else "dynamic"


def quantize_model(fp32: bytes, recorded_obs: Any, obs_spec: AnySpec, fp32_actions: np.ndarray | None = None,
                   mode: str = "auto", op_types: Sequence[str] = DYNAMIC_OPS) -> tuple[bytes, dict]:
    """(int8 model bytes, accuracy report against fp32 on ``recorded_obs``); ``mode`` is ``static``
    (calibrated on ``recorded_obs``), ``dynamic`` (``op_types`` only) or ``auto`` (`resolve_mode`)."""
    import onnxruntime as ort

    if mode not in MODES:
        raise BundleError(f"int8 quantization mode: expected one of {MODES}, got {mode!r}")
    if mode == "auto":
        mode = resolve_mode(fp32)
    if mode == "static" and _n_obs(recorded_obs) < 1:
        raise BundleError("static int8 quantization needs recorded observations to calibrate on, got none")
    with tempfile.TemporaryDirectory(prefix="tinker-quant-") as d:
        src, dst = Path(d) / "fp32.onnx", Path(d) / "int8.onnx"
        src.write_bytes(fp32)
        root = logging.getLogger()
        level = root.level
        root.setLevel(max(level, logging.ERROR))  # its pre-processing hint
        try:
            info = _static(src, dst, recorded_obs, obs_spec) if mode == "static" else _dynamic(src, dst, op_types)
        except BundleError:
            raise
        except Exception as e:  # quantization tool errors are plain Exceptions
            raise BundleError(f"int8 {mode} quantization failed with onnxruntime {ort.__version__}: {e}") from e
        finally:
            root.setLevel(level)
        q = dst.read_bytes()
    ref = _run(fp32, recorded_obs, obs_spec) if fp32_actions is None else fp32_actions
    got = _run(q, recorded_obs, obs_spec)
    return q, {"mode": mode, **info, **accuracy_report(ref, got)}


def accuracy_report(fp32: np.ndarray, int8: np.ndarray) -> dict:
    """Max/mean/p99 absolute difference, relative to the fp32 action range too."""
    d = np.abs(fp32.astype(np.float64) - int8.astype(np.float64))
    span = float(np.max(fp32) - np.min(fp32)) if fp32.size else 0.0
    return {
        "n_obs": int(len(fp32)),
        "max_abs_diff_vs_fp32": float(d.max()) if d.size else 0.0,
        "mean_abs_diff_vs_fp32": float(d.mean()) if d.size else 0.0,
        "p99_abs_diff_vs_fp32": float(np.percentile(d, 99)) if d.size else 0.0,
        "max_diff_rel_to_fp32_range": float(d.max() / span) if span > 0 else 0.0,
    }
