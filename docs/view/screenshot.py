"""Screenshot of the live view in a real browser: ``python docs/view/screenshot.py [--out docs/view/live_view.png]``.

Starts ``tinker bringup --view`` with the shipped pretrained policy (episodes of 60 cycles, so the arm keeps
reaching for new targets), opens the view's page in headless Chromium (``apt-get install chromium``),
lets it run ``--seconds`` so the live plots fill, and saves what the browser shows, taken over the Chrome
DevTools protocol (``Page.captureScreenshot``). Everything runs on this machine; nothing is fetched.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float) -> bytes:
    end = time.monotonic() + timeout
    while True:
        try:
            return urllib.request.urlopen(url, timeout=2).read()
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


def capture(page_url: str, out: Path, seconds: float, size: str = "1300,1000") -> None:
    """Open ``page_url`` in headless Chromium, wait ``seconds``, write a PNG of the window to ``out``."""
    from websockets.sync.client import connect

    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise SystemExit("no chromium found: apt-get install -y chromium")
    port = free_port()
    profile = tempfile.mkdtemp(prefix="tinker-chromium-")
    proc = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
                             "--remote-allow-origins=*", f"--window-size={size}", page_url],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        targets = json.loads(wait_http(f"http://127.0.0.1:{port}/json/list", 30))
        page = next(t for t in targets if t.get("type") == "page")
        time.sleep(seconds)
        with connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            ws.send(json.dumps({"id": 1, "method": "Page.captureScreenshot", "params": {"format": "png"}}))
            while True:
                msg = json.loads(ws.recv(timeout=30))
                if msg.get("id") == 1:
                    break
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(msg["result"]["data"]))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
        shutil.rmtree(profile, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO / "docs" / "view" / "live_view.png"))
    ap.add_argument("--seconds", type=float, default=25.0, help="how long the page runs before the screenshot")
    ap.add_argument("--bundle", default=str(REPO / "pretrained" / "arm_reach" / "bundle"))
    ap.add_argument("--mcap", default="", help="replay this recording (tinker view) instead of a live graph")
    args = ap.parse_args()
    ws_port, http_port = free_port(), free_port()
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(100, 199)))
    if args.mcap:
        cmd = [sys.executable, "-m", "tinker_cli", "view", args.mcap, "--port", str(ws_port),
               "--http-port", str(http_port), "--loop"]
    else:
        cmd = [sys.executable, "-m", "tinker_cli", "bringup", "--view", "--bundle", args.bundle,
               "--set", f"view.port={ws_port}", "--set", f"view.http_port={http_port}",
               "--set", "sim_robot.episode_cycles=60"]
    graph = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{http_port}/", 120)
        capture(f"http://127.0.0.1:{http_port}/", Path(args.out), args.seconds)
    finally:
        os.killpg(graph.pid, signal.SIGINT)
        try:
            graph.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(graph.pid, signal.SIGKILL)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
