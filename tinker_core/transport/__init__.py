"""ZeroMQ transport for the tinker bus: transitions, weight blobs and control requests between processes.

One module a job: `curve` (key files and CURVE settings), `endpoints` (sockets and free ports), `codec` (the
wire format below), and one module per channel: `transitions`, `weights`, `control`.

Three channels, each a pair of small classes:

* `TransitionSender` (PUSH) / `TransitionReceiver` (PULL): `Transition` and `TransitionBatch` values.
  The sender never waits by default: its queue is bounded (``hwm``) and a full queue drops the
  message and counts it in ``dropped``. The receiver never crashes on bad input: a malformed message
  is counted in ``rejected`` and skipped.
* `WeightsPublisher` (PUB) / `WeightsSubscriber` (SUB, conflated): versioned weight blobs; a slow
  subscriber only ever sees the latest version.
* `ControlServer` (REP) / `ControlClient` (REQ): msgpack dict requests with timeouts (never blocks forever).

Wire format of a transition message (multipart)::

    frame 0   u32 n | msgpack layout [1, kind, [[path, dtype, shape, lz4, offset, size], ...]]
              u32 m | msgpack scalars ([reward, terminated, truncated, info] or [infos])
              pad to 8 | the small arrays, each 8-byte aligned at its offset
    frame 1.. one frame per array of FRAME_MIN_BYTES (64 KiB) or more (offset -1), in layout order

kind is ``t`` (a Transition), ``b`` (a TransitionBatch) or ``m`` (a stacked ``send_many`` batch
the receiver hands out as single transitions again). The layout repeats from message to message,
so the sender caches its bytes and the receiver parses and checks it once. Small arrays cost one
memcpy into the first frame (cheaper than a frame of their own); big arrays (images) are handed to
ZeroMQ as their own frames without a copy. Either way they come back as read-only
``np.frombuffer`` views: copy one before writing into it, and do not mutate an array after ``send``
returns if it may still be queued. With ``compress=True`` arrays of 512 bytes or more are lz4
compressed when that makes them smaller (flag per array in the layout).

Send many small transitions with ``send_many``: one message per ``batch`` transitions carries far
more per second than one message each (see benchmarks/bus.py).

CURVE: `curve_keypair` creates or reads z85 key files; a `CurveServer` on the binding side lists the
client public keys it accepts (checked by a ZAP authenticator), a `CurveClient` names the server's
public key. A client with the wrong keys gets nothing through.

Endpoints: ``tcp://HOST:PORT`` (``tcp://127.0.0.1:*`` picks a free port; read ``.endpoint`` after
binding) and ``ipc:///path``. Errors are `TransportError` with the endpoint in the message.
"""


from tinker_core.transport.codec import Message, decode, encode
from tinker_core.transport.control import ControlClient, ControlServer
from tinker_core.transport.curve import CurveClient, CurveServer, curve_keypair, read_public_key
from tinker_core.transport.endpoints import free_endpoints
from tinker_core.transport.transitions import TransitionReceiver, TransitionSender
from tinker_core.transport.weights import WeightsPublisher, WeightsSubscriber

__all__ = [
    "ControlClient", "ControlServer", "CurveClient", "CurveServer", "Message", "TransitionReceiver", "TransitionSender",
    "WeightsPublisher", "WeightsSubscriber", "curve_keypair", "read_public_key", "decode", "encode", "free_endpoints",
]
