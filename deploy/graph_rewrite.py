"""Exact graph rewrites applied to an exported ONNX model before its parity check.

onnxruntime fuses Conv+Relu and Gemm+Relu itself, but not the input scaling of an image policy:
``image.permute(0, 3, 1, 2).float() / 255`` runs a Div (or Mul) over every pixel before the first
convolution (~10 us at 84 px on one core). Since a convolution is linear in its input and pads with
zeros, ``conv(x / c, W) == conv(x, W / c)``: the scale moves into the weights at export and the Div
disappears. The result differs from torch only by float rounding (~1e-7), and the exporter's parity
check on the recorded observations still holds it to the tolerance (1e-5).

A Cast to float that comes before a Transpose is moved after it, so the layout change moves bytes of
the camera image rather than floats four times as large. Then the layout change itself goes: a
convolution over ``x[N, C, H, W]``, the transpose of a channels-last ``image[N, H, W, C]``, equals a
one-channel convolution over ``image`` seen as ``[N, 1, H, W*C]`` (a free reshape) with the kernel
``(kh, kw*C)``, strides ``(sh, sw*C)`` and pads ``(ph, pw*C)``, whose weights are the original ones laid
out channels-last. Same multiply-adds, no transpose (~9 us at 84 px on one core).

Needs onnx (the training install).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import onnx


def _consumers(graph: "onnx.GraphProto") -> dict[str, list["onnx.NodeProto"]]:
    out: dict[str, list] = {}
    for n in graph.node:
        for name in n.input:
            out.setdefault(name, []).append(n)
    return out


def _constant(graph: "onnx.GraphProto", name: str) -> np.ndarray | None:
    """The value of ``name`` when it is an initializer or a Constant node's output, else None."""
    from onnx import numpy_helper

    for init in graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for n in graph.node:
        if n.op_type == "Constant" and n.output[0] == name:
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
    return None


def _graph_outputs(graph: "onnx.GraphProto") -> set[str]:
    return {o.name for o in graph.output}


def fold_input_scale(model: "onnx.ModelProto") -> list[str]:
    """Fold ``Div(x, c)`` / ``Mul(x, c)`` by a scalar constant into the weights of the Conv nodes that
    are its only consumers (as their input X). Changes ``model`` in place; returns what it folded."""
    from onnx import numpy_helper

    g = model.graph
    consumers, outputs = _consumers(g), _graph_outputs(g)
    inits = {i.name: i for i in g.initializer}
    done = []
    for n in list(g.node):
        if n.op_type not in ("Div", "Mul"):
            continue
        pos = [i for i in ((1,) if n.op_type == "Div" else (1, 0)) if _constant(g, n.input[i]) is not None]
        if not pos:
            continue
        c = _constant(g, n.input[pos[0]])
        if c.size != 1 or not np.issubdtype(c.dtype, np.floating) or not np.isfinite(c).all() or float(c.flat[0]) == 0:
            continue
        x = n.input[1 - pos[0]]
        users = consumers.get(n.output[0], [])
        if not users or n.output[0] in outputs:
            continue
        if any(u.op_type != "Conv" or u.input[0] != n.output[0] or u.input[1] not in inits
               or list(u.input[1:]).count(n.output[0]) for u in users):
            continue
        factor = 1.0 / float(c.flat[0]) if n.op_type == "Div" else float(c.flat[0])
        for u in users:
            w = numpy_helper.to_array(inits[u.input[1]])
            scaled = numpy_helper.from_array((w.astype(np.float64) * factor).astype(w.dtype), f"{u.output[0]}_weight_x_input_scale")
            g.initializer.append(scaled)
            inits[scaled.name] = scaled
            u.input[0], u.input[1] = x, scaled.name
        g.node.remove(n)
        done.append(f"{n.op_type} {n.name or n.output[0]} (x{factor:.6g}) folded into the weights of "
                    + ", ".join(u.name or u.output[0] for u in users))
    _drop_unused(g)
    return done


def cast_after_transpose(model: "onnx.ModelProto") -> list[str]:
    """``Transpose(Cast(x))`` -> ``Cast(Transpose(x))`` when the Cast widens an integer tensor and feeds
    only the Transpose: the transpose then moves the narrow type. Changes ``model`` in place."""
    import onnx

    g = model.graph
    consumers, outputs = _consumers(g), _graph_outputs(g)
    narrow = {onnx.TensorProto.UINT8, onnx.TensorProto.INT8, onnx.TensorProto.UINT16, onnx.TensorProto.INT16}
    types = {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.value_info)}
    done = []
    for cast in list(g.node):
        if cast.op_type != "Cast" or types.get(cast.input[0]) not in narrow or cast.output[0] in outputs:
            continue
        users = consumers.get(cast.output[0], [])
        if len(users) != 1 or users[0].op_type != "Transpose":
            continue
        tr = users[0]
        mid = cast.output[0]
        # x -> Transpose -> mid -> Cast -> tr.output
        tr.input[0], cast.input[0] = cast.input[0], mid
        cast.output[0], tr.output[0], = tr.output[0], mid
        nodes = list(g.node)
        i_cast, i_tr = nodes.index(cast), nodes.index(tr)
        if i_cast < i_tr:  # keep topological order: the Transpose now runs first
            g.node.remove(tr)
            g.node.insert(i_cast, tr)
        for v in list(g.value_info):
            if v.name == mid:
                g.value_info.remove(v)
        done.append(f"Cast {cast.name or cast.output[0]} moved after Transpose {tr.name or mid}")
    return done


def _attrs(node: "onnx.NodeProto") -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def conv_reads_channels_last(model: "onnx.ModelProto") -> list[str]:
    """``Conv(Cast?(Transpose(image, perm=[0, 3, 1, 2])))`` -> ``Conv'(Cast?(Reshape(image, [-1, 1, H, W*C])))``
    for a graph input ``image[N, H, W, C]`` of known H, W, C, when every consumer of the transposed
    tensor is such a 2-D Conv (group 1, dilation 1, explicit pads). Changes ``model`` in place."""
    from onnx import helper, numpy_helper

    g = model.graph
    consumers, outputs = _consumers(g), _graph_outputs(g)
    inits = {i.name: i for i in g.initializer}
    graph_inputs = {i.name: i for i in g.input}
    done = []
    for tr in list(g.node):
        if tr.op_type != "Transpose" or tr.input[0] not in graph_inputs or list(_attrs(tr).get("perm", [])) != [0, 3, 1, 2]:
            continue
        dims = graph_inputs[tr.input[0]].type.tensor_type.shape.dim
        if len(dims) != 4 or not all(d.HasField("dim_value") for d in dims[1:]):
            continue
        h, w, c = (d.dim_value for d in dims[1:])
        users = consumers.get(tr.output[0], [])
        cast = users[0] if len(users) == 1 and users[0].op_type == "Cast" else None
        convs = consumers.get(cast.output[0], []) if cast is not None else users
        if not convs or tr.output[0] in outputs or (cast is not None and cast.output[0] in outputs):
            continue
        fed = cast.output[0] if cast is not None else tr.output[0]
        ok = True
        for conv in convs:
            a = _attrs(conv)
            ok &= (conv.op_type == "Conv" and conv.input[0] == fed and conv.input[1] in inits
                   and list(conv.input[1:]).count(fed) == 0 and a.get("group", 1) == 1
                   and all(d == 1 for d in a.get("dilations", [1, 1])) and a.get("auto_pad", b"NOTSET") in (b"NOTSET", b"VALID")
                   and len(a.get("kernel_shape", [])) == 2)
        if not ok:
            continue
        shape = numpy_helper.from_array(np.array([-1, 1, h, w * c], np.int64), f"{tr.output[0]}_channels_last_shape")
        g.initializer.append(shape)
        reshape = helper.make_node("Reshape", [tr.input[0], shape.name], [tr.output[0]], name=f"{tr.name or tr.output[0]}_as_reshape")
        i = list(g.node).index(tr)
        g.node.remove(tr)
        g.node.insert(i, reshape)
        for conv in convs:
            a = _attrs(conv)
            kh, kw = a["kernel_shape"]
            sh, sw = a.get("strides", [1, 1])
            ph0, pw0, ph1, pw1 = a.get("pads", [0, 0, 0, 0])
            wt = numpy_helper.to_array(inits[conv.input[1]])
            new_w = numpy_helper.from_array(np.ascontiguousarray(wt.transpose(0, 2, 3, 1).reshape(wt.shape[0], 1, kh, kw * c)),
                                            f"{conv.output[0]}_weight_channels_last")
            g.initializer.append(new_w)
            inits[new_w.name] = new_w
            conv.input[1] = new_w.name
            del conv.attribute[:]
            conv.attribute.extend([helper.make_attribute("kernel_shape", [kh, kw * c]),
                                   helper.make_attribute("strides", [sh, sw * c]),
                                   helper.make_attribute("pads", [ph0, pw0 * c, ph1, pw1 * c])])
        done.append(f"Transpose {tr.name or tr.output[0]} removed: "
                    + ", ".join(cv.name or cv.output[0] for cv in convs) + f" read {tr.input[0]} as [N, 1, {h}, {w * c}]")
    _drop_unused(g)
    return done


def _drop_unused(graph: "onnx.GraphProto") -> None:
    used = {i for n in graph.node for i in n.input} | _graph_outputs(graph)
    for init in list(graph.initializer):
        if init.name not in used:
            graph.initializer.remove(init)
    for n in list(graph.node):
        if n.op_type == "Constant" and n.output[0] not in used:
            graph.node.remove(n)
    produced = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    for v in list(graph.value_info):
        if v.name not in produced:
            graph.value_info.remove(v)


def flatten_channels_last(model: "onnx.ModelProto") -> list[str]:
    """``Gemm(Concat?(Flatten(x[N, C, H, W]), ...))`` -> the same with ``Flatten(Transpose(x, [0, 2, 3, 1]))``
    and the Gemm's weight columns permuted to match, when every consumer is such a Gemm (``transB=1``,
    weight an initializer). For the int8 model only: onnxruntime runs quantized convolutions in NHWC
    and would otherwise transpose back to NCHW before the Flatten; the Transpose written here cancels
    against that one. Needs the shapes of ``model`` inferred. Changes ``model`` in place."""
    from onnx import helper, numpy_helper

    g = model.graph
    consumers = _consumers(g)
    inits = {i.name: i for i in g.initializer}
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
              for v in list(g.value_info) + list(g.input)}
    done = []
    for fl in list(g.node):
        if fl.op_type != "Flatten" or _attrs(fl).get("axis", 1) != 1:
            continue
        shape = shapes.get(fl.input[0])
        if not shape or len(shape) != 4 or None in shape[1:]:
            continue
        c, h, w = shape[1:]
        users = consumers.get(fl.output[0], [])
        offset, gemm_in = 0, fl.output[0]
        if len(users) == 1 and users[0].op_type == "Concat" and _attrs(users[0]).get("axis") in (1, -1):
            cat = users[0]
            sizes = [shapes.get(i, [None, None])[1:] for i in cat.input]
            pos = list(cat.input).index(fl.output[0])
            if any(len(sz) != 1 or sz[0] is None for sz in sizes[:pos]) or list(cat.input).count(fl.output[0]) != 1:
                continue
            offset, gemm_in = sum(sz[0] for sz in sizes[:pos]), cat.output[0]
        gemms = consumers.get(gemm_in, [])
        if not gemms or not all(n.op_type == "Gemm" and n.input[0] == gemm_in and n.input[1] in inits
                                and _attrs(n).get("transB", 0) == 1 and _attrs(n).get("transA", 0) == 0 for n in gemms):
            continue
        k = c * h * w
        order = np.arange(k).reshape(c, h, w).transpose(1, 2, 0).reshape(-1) + offset
        for gm in gemms:
            wt = numpy_helper.to_array(inits[gm.input[1]])
            new = wt.copy()
            new[:, offset:offset + k] = wt[:, order]
            t = numpy_helper.from_array(new, f"{gm.output[0]}_weight_hwc")
            g.initializer.append(t)
            inits[t.name] = t
            gm.input[1] = t.name
        tr = helper.make_node("Transpose", [fl.input[0]], [f"{fl.input[0]}_hwc"], perm=[0, 2, 3, 1],
                              name=f"{fl.name or fl.output[0]}_hwc")
        g.node.insert(list(g.node).index(fl), tr)
        fl.input[0] = tr.output[0]
        done.append(f"Flatten {fl.name or fl.output[0]} reads channels-last; weights of "
                    + ", ".join(gm.name or gm.output[0] for gm in gemms) + " permuted to match")
    _drop_unused(g)
    return done


def rewrite(model_bytes: bytes, for_int8: bool = False) -> tuple[bytes, list[str]]:
    """All the rewrites above; returns the new model bytes and one line per change (none: same bytes).

    ``for_int8``: the graph that `tinker_deploy.quantize` quantizes. onnxruntime runs quantized convolutions
    in NHWC, so there the first convolution keeps its Transpose (which cancels against onnxruntime's
    own NCHW -> NHWC one; the one-channel form would cost a Reshape and a Transpose) and the Flatten
    after the last convolution reads channels-last (`flatten_channels_last`)."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load_from_string(model_bytes))  # element types of every tensor
    done = cast_after_transpose(model)
    while True:  # x * a / b: each pass folds the scale next to the Conv
        folded = fold_input_scale(model)
        if not folded:
            break
        done += folded
    done += flatten_channels_last(model) if for_int8 else conv_reads_channels_last(model)
    if not done:
        return model_bytes, done
    del model.graph.value_info[:]  # inferred for the rewrites only; onnxruntime infers its own
    return model.SerializeToString(), done
