"""A hostile HTTP server for the download tests: 127.0.0.1 only, on a free port, serving what real hosts serve on a
bad day (bodies shorter than their Content-Length, chunked bodies cut mid-stream, garbage status lines, HTML sent as
octet-stream, 416 for a complete file). Bounded: every socket times out after a few seconds, and the server shuts
itself down after LIFETIME seconds even if a test forgets to; the `hostile` fixture stops it in its finalizer.

Routes are scripted per path: `server.route("/f", full(data), short(data, 100))` answers the first request to /f
with the whole file and every later one with a short body (the last behaviour repeats). `server.requests` lists
(path, Range header) of each request, for tests that check what was asked.
"""

from __future__ import annotations

import http.server
import re
import threading
import time
from collections.abc import Callable

import pytest

LIFETIME = 60  # seconds: no server outlives a test run that hangs
Behaviour = Callable[[http.server.BaseHTTPRequestHandler], None]


def _range_start(handler) -> int | None:
    match = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range") or "")
    return int(match.group(1)) if match else None


def full(data: bytes, content_type: str = "application/octet-stream", pause: float = 0.0) -> Behaviour:
    """The file, honouring `Range: bytes=N-` (206 + Content-Range; 416 + `bytes */size` past the end). `pause`:
    seconds between 1 KiB pieces (a slow host)."""

    def serve(handler):
        start = _range_start(handler)
        if start is not None and start >= len(data):
            handler.send_response(416)
            handler.send_header("Content-Range", f"bytes */{len(data)}")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        body = data[start or 0 :]
        handler.send_response(206 if start else 200)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        for i in range(0, len(body), 1024):
            handler.wfile.write(body[i : i + 1024])
            time.sleep(pause)

    return serve


def short(data: bytes, sent: int) -> Behaviour:
    """Announces the whole file (Content-Length), sends `sent` bytes of it, then closes the connection."""

    def serve(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data[:sent])
        handler.close_connection = True

    return serve


def chunked(data: bytes, sent: int | None = None, content_type: str = "application/octet-stream") -> Behaviour:
    """Transfer-Encoding: chunked, no Content-Length; with `sent`, one chunk of that many bytes and then the
    connection drops without the final chunk (http.client: IncompleteRead)."""

    def serve(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        body = data if sent is None else data[:sent]
        if body:
            handler.wfile.write(f"{len(body):x}\r\n".encode() + body + b"\r\n")
        if sent is None:
            handler.wfile.write(b"0\r\n\r\n")
        handler.close_connection = True

    return serve


def garbage(handler) -> None:
    """Not HTTP at all: a status line http.client cannot parse (BadStatusLine)."""
    handler.wfile.write(b"garbage, not HTTP\r\n\r\n")
    handler.close_connection = True


def not_found(handler) -> None:
    handler.send_error(404)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked bodies need it
    timeout = 5  # a client that stalls does not hold a thread for long

    def log_message(self, *args):
        pass

    def do_GET(self):
        server: HostileServer = self.server  # type: ignore[assignment]
        path = self.path.split("?")[0]
        with server.lock:
            server.requests.append((path, self.headers.get("Range")))
            script = server.routes.get(path, [not_found])
            count = server.counts[path] = server.counts.get(path, 0) + 1
        script[min(count, len(script)) - 1](self)


class HostileServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, list[Behaviour]] = {}
        self.counts: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def route(self, path: str, *behaviours: Behaviour) -> str:
        self.routes[path] = list(behaviours)
        return self.url + path

    def start(self) -> HostileServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._deadline = threading.Timer(LIFETIME, self.shutdown)
        self._deadline.daemon = True
        self._deadline.start()
        return self

    def stop(self) -> None:
        self._deadline.cancel()
        self.shutdown()
        self.server_close()


# Named apart from the fixture, so that a test module importing it does not see each test's `hostile` parameter
# shadow the import.
@pytest.fixture(name="hostile")
def hostile_fixture(monkeypatch):
    """A started HostileServer; downloads retry at once (no 2 s wait) so the tests stay fast."""
    from layerwise_nmt.data import fetch

    monkeypatch.setattr(fetch, "RETRY_WAIT", 0)
    server = HostileServer().start()
    yield server
    server.stop()
