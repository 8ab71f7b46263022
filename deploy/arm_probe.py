"""Runs inside the emulated aarch64 Python during `tinker deploy check-arm` (also usable on a real ARM box).

``python -m tinker_deploy.arm_probe BUNDLE OUT.npz [BUNDLE OUT.npz ...]`` loads the bundle with the edge runtime (sha256 of every
file, manifest format), checks byte order and opset against this machine's onnxruntime, runs the
policy on the recorded observations, saves the actions to OUT.npz and prints one JSON line. Imports
numpy, onnxruntime and tinker's pure-python packages only.
"""

from __future__ import annotations

import json
import platform
import sys
import time


def probe(bundle_path: str, out_path: str, import_s: float) -> dict:
    report: dict = {"ok": False, "bundle": bundle_path, "machine": platform.machine(), "byte_order": sys.byteorder,
                    "python": platform.python_version(), "import_s": import_s}
    try:
        import numpy as np
        import onnxruntime as ort

        report.update(numpy=np.__version__, onnxruntime=ort.__version__, providers=ort.get_available_providers())
        from tinker_deploy.bundle import load_bundle
        from tinker_deploy.manifest import check_opset_supported
        from tinker_deploy.runtime import OnnxPolicy

        bundle = load_bundle(bundle_path)
        m = bundle.manifest
        if m.byte_order != sys.byteorder:
            raise RuntimeError(f"byte order: bundle written {m.byte_order}-endian, this machine is {sys.byteorder}-endian")
        check_opset_supported(m.opset, ort.__version__)
        policy = OnnxPolicy(bundle)
        obs, ref = bundle.recorded()
        t1 = time.perf_counter()
        actions = policy.forward(obs)
        report["emulated_inference_s"] = round(time.perf_counter() - t1, 3)
        np.savez(out_path, action=actions)
        if "action" in ref:
            report["max_abs_diff_vs_reference"] = float(np.max(np.abs(actions.astype(np.float64) - ref["action"])))
        report.update(ok=True, opset=m.opset, n_obs=int(len(actions)), sha256=bundle.sha256())
    except Exception as e:  # report every failure as data: the host prints it
        report["error"] = f"{type(e).__name__}: {e}"
    return report


def main(argv: list[str]) -> int:
    """``BUNDLE OUT.npz [BUNDLE OUT.npz ...]``: one report line per bundle, in order."""
    t0 = time.perf_counter()
    try:
        import numpy  # noqa: F401
        import onnxruntime  # noqa: F401
    except Exception as e:  # an import crash is the finding (e.g. onnxruntime >= 1.28 under qemu 7.2)
        print("TINKER_ARM_REPORT " + json.dumps({"ok": False, "error": f"import failed: {type(e).__name__}: {e}"}))
        return 3
    import_s = round(time.perf_counter() - t0, 2)
    ok = True
    for bundle_path, out_path in zip(argv[0::2], argv[1::2]):
        report = probe(bundle_path, out_path, import_s)
        ok &= report["ok"]
        print("TINKER_ARM_REPORT " + json.dumps(report), flush=True)
    return 0 if ok else 3


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
