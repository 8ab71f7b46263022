"""Edge benchmark: installed size of the edge extra vs the full install, and cold start of the
onnxruntime policy vs the torch policy, in the same run.

    python benchmarks/edge.py [--quick]

Size: the site-packages of the clean edge venv (numpy, pyyaml, onnxruntime and what they pull in, plus
tinker; built by `tinker_deploy.edge_venv`) against the site-packages of the full install (.venv: train, ros
and dev extras), both without the installer tools (pip, setuptools, wheel). Cold start: a fresh
subprocess that imports the runtime, opens the session and runs the first inference of the MLP
10 -> 256 -> 256 -> 4 (edge venv, `OnnxPolicy`) against one that imports torch, builds the module,
loads its safetensors weights and runs the first inference (full venv); the two alternate, wall time
from spawn to exit and the time inside the process are both kept. Goals (issue 12): edge install <= 10%
of the full install; cold start >= 5x faster than torch.
Writes benchmarks/results/edge.json (``--quick``: edge.quick.json).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

from tinker_deploy.edge_venv import ensure_edge_venv  # noqa: E402

TOOLS = ("pip", "setuptools", "wheel", "_distutils_hack", "pkg_resources", "distutils-precedence.pth")

ORT_CHILD = """
import time; t0 = time.perf_counter()
import sys, numpy as np
from tinker_deploy.runtime import OnnxPolicy
p = OnnxPolicy.from_bundle(sys.argv[1])
a = p(np.zeros(10, np.float32))
print(time.perf_counter() - t0)
"""

TORCH_CHILD = """
import time; t0 = time.perf_counter()
import sys, numpy as np, torch
from safetensors.torch import load_file
torch.set_num_threads(1)
m = torch.nn.Sequential(torch.nn.Linear(10, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                        torch.nn.Linear(256, 4), torch.nn.Tanh())
m.load_state_dict(load_file(sys.argv[1]))
m.eval()
with torch.inference_mode():
    a = m(torch.from_numpy(np.zeros((1, 10), np.float32)))[0].numpy()
print(time.perf_counter() - t0)
"""


def tree_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def site_packages_bytes(site: Path) -> tuple[int, dict[str, int]]:
    """Bytes under ``site`` without installer tools, and the five largest top-level entries."""
    sizes: dict[str, int] = {}
    for entry in site.iterdir():
        name = entry.name
        if any(name == t or name.startswith(t + "-") for t in TOOLS):
            continue
        sizes[name] = tree_bytes(entry) if entry.is_dir() else entry.stat().st_size
    top = dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:5])
    return sum(sizes.values()), top


def cold_start(python: Path, code: str, arg: str, cwd: str) -> tuple[float, float]:
    """(wall seconds spawn -> exit, seconds inside the process) of one fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    t0 = time.perf_counter()
    p = subprocess.run([str(python), "-c", code, arg], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"cold-start child failed: {p.stderr[-1500:]}")
    return wall, float(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = arg_parser(__doc__.split("\n\n")[0], "fewer cold starts (about a minute once the venv exists)")
    args = ap.parse_args()
    reps = 3 if args.quick else 9

    import torch
    from safetensors.torch import save_file

    from tinker_deploy.export import export_bundle
    from tinker_deploy.reference_policies import mlp_policy

    edge_py = ensure_edge_venv(log=print)
    edge_site = Path(subprocess.run([str(edge_py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    capture_output=True, text=True, check=True).stdout.strip())
    full_site = Path(sysconfig.get_paths()["purelib"])
    edge_bytes, edge_top = site_packages_bytes(edge_site)
    full_bytes, full_top = site_packages_bytes(full_site)
    torch_bytes = tree_bytes(Path(torch.__file__).parent)

    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="tinker-bench-edge-") as d:
        module, meta = mlp_policy(10, 4, 256)
        bundle = export_bundle(module, meta, Path(d) / "mlp.onnx", log=lambda _m: None)
        weights = Path(d) / "mlp.safetensors"
        save_file({k.replace("net.", ""): v.contiguous() for k, v in module.state_dict().items()}, str(weights))
        ort_wall, ort_in, torch_wall, torch_in = [], [], [], []
        cold_start(edge_py, ORT_CHILD, str(bundle), d)  # page cache warm for both, as on a booted robot
        cold_start(Path(sys.executable), TORCH_CHILD, str(weights), d)
        for _ in range(reps):
            w, i = cold_start(edge_py, ORT_CHILD, str(bundle), d)
            ort_wall.append(w)
            ort_in.append(i)
            w, i = cold_start(Path(sys.executable), TORCH_CHILD, str(weights), d)
            torch_wall.append(w)
            torch_in.append(i)
    figures.update({
        "edge_install_bytes": edge_bytes,
        "full_install_bytes": full_bytes,
        "edge_vs_full_size_ratio": round(edge_bytes / full_bytes, 4),
        "torch_package_bytes": torch_bytes,
        "ort_cold_start_wall_ms": round(1e3 * statistics.median(ort_wall), 1),
        "ort_cold_start_wall_min_ms": round(1e3 * min(ort_wall), 1),
        "ort_cold_start_wall_max_ms": round(1e3 * max(ort_wall), 1),
        "torch_cold_start_wall_ms": round(1e3 * statistics.median(torch_wall), 1),
        "torch_cold_start_wall_min_ms": round(1e3 * min(torch_wall), 1),
        "torch_cold_start_wall_max_ms": round(1e3 * max(torch_wall), 1),
        "ort_cold_start_in_process_ms": round(1e3 * statistics.median(ort_in), 1),
        "torch_cold_start_in_process_ms": round(1e3 * statistics.median(torch_in), 1),
        "cold_start_torch_vs_ort_ratio": round(statistics.median(t / o for t, o in zip(torch_wall, ort_wall)), 2),
        "cold_start_in_process_torch_vs_ort_ratio": round(statistics.median(t / o for t, o in zip(torch_in, ort_in)), 2),
    })
    goals = {"edge_vs_full_size_ratio": "<= 0.10", "cold_start_torch_vs_ort_ratio": ">= 5.0"}
    met = {k: bool(eval(f"{figures[k]} {g}")) for k, g in goals.items()}  # noqa: S307 (our own literals)
    result = {
        **header("edge", args.quick, machine()),
        "settings": {"cold_starts_each": reps, "edge_site_packages": str(edge_site), "full_site_packages": str(full_site),
                     "edge_largest": edge_top, "full_largest": full_top,
                     "note": "sizes exclude pip/setuptools/wheel; cold start = import + session/module + first inference"},
        "figures": figures,
        "goals": goals,
        "goals_met": met,
    }
    out = write_result("edge", args.quick, result)
    print(json.dumps(figures, indent=1))
    print(json.dumps(met))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
