"""``tinker view RUN.mcap``: a recording replayed into the live view (Foxglove WebSocket and the browser page)."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 42


def register(sub: Any) -> None:
    p = sub.add_parser("view", help="replay a recording into the live view (Foxglove WebSocket + browser page)",
                       description="Serve RUN.mcap (from 'tinker bringup --record' or 'tinker record') over the Foxglove "
                                   "WebSocket protocol with the same channels as the live graph's view node: the arm's "
                                   "transforms, joint states, commands, camera, the SafetyWrapper's outcome per cycle, "
                                   "latency, policy version and /diagnostics. Connect Foxglove or Lichtblick to "
                                   "ws://HOST:PORT, or open the page http://HOST:HTTP_PORT/.",
                       epilog="examples:\n"
                              "  tinker view run1.mcap                      at the recorded pace, until Ctrl-C\n"
                              "  tinker view run1.mcap --speed 4 --loop     four times as fast, over and over",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mcap", metavar="RUN.mcap")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="Foxglove WebSocket port (0: any free port)")
    p.add_argument("--http-port", type=int, default=8766, help="the browser page's port (-1: none)")
    p.add_argument("--speed", type=float, default=1.0, help="times the recorded pace (0: as fast as it reads)")
    p.add_argument("--loop", action="store_true", help="start over at the end")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: at the end, or Ctrl-C)")
    p.add_argument("--wait-client", type=float, default=0.0, metavar="S",
                   help="wait this many seconds before the first message (for a client to connect)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import signal
    import threading
    import time
    from pathlib import Path

    from tinker.live_view import LiveView, replay
    from tinker.view import serve_page
    from tinker_core.errors import ConfigError

    if not Path(args.mcap).is_file():
        raise ConfigError(f"view: recording not found: {args.mcap}")
    if args.speed < 0:
        raise ConfigError(f"view --speed: expected >= 0, got {args.speed}")
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    if args.duration > 0:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    from tinker.recording import read_metadata

    live = LiveView(args.host, args.port, read_metadata(args.mcap).get("urdf") or None)
    httpd = serve_page(args.http_port, live.port, args.host) if args.http_port >= 0 else None
    print(f"tinker view: ws://{args.host}:{live.port}" + (f", page http://{args.host}:{httpd.server_port}/" if httpd else ""),
          flush=True)
    try:
        if args.wait_client > 0:
            stop.wait(args.wait_client)
        while not stop.is_set():
            t0 = time.monotonic()
            n = replay(args.mcap, live, args.speed, stop)
            print(f"tinker view: replayed {n} messages in {time.monotonic() - t0:.1f} s", flush=True)
            if not args.loop:
                break
    finally:
        stop.set()
        live.close()
        if httpd is not None:
            httpd.shutdown()
    return 0
