"""S3 for the tests: a moto server on 127.0.0.1, and a fault-injecting HTTP proxy in front of it.

The proxy forwards real requests from s3fs/botocore to moto with `http.client`, logs each
one (with its byte range and time), and fails those its rules pick: 500 InternalError, 503
SlowDown, 429 TooManyRequests (both with a Retry-After header when `retry_after` is set), 403
AccessDenied, an abrupt connection reset, or a stall (for client read timeouts).
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest

FAULTS = {
    "500": (500, "InternalError", "We encountered an internal error. Please try again."),
    "503": (503, "SlowDown", "Please reduce your request rate."),
    "429": (429, "TooManyRequests", "Too many requests; slow down."),
    "403": (403, "AccessDenied", "Access Denied"),
}
"""HTTP faults by name: status, S3 error code, message."""

HOP_HEADERS = ("connection", "transfer-encoding", "content-length", "server", "date")
"""Response headers the proxy sets itself rather than copying from moto."""

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class MotoS3:
    """A running moto S3 server with one bucket."""

    endpoint_url: str
    bucket: str
    client: Any

    def put(self, data: bytes, key: str | None = None) -> str:
        """Upload `data` (under a fresh key unless given); its s3:// URL."""
        key = key or f"obj-{uuid.uuid4().hex}"
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
        return f"s3://{self.bucket}/{key}"

    def storage_options(self, endpoint_url: str | None = None) -> dict[str, Any]:
        """fsspec options that point s3fs at this server (or at a proxy in front of it)."""
        return {"endpoint_url": endpoint_url or self.endpoint_url}


def start_moto() -> tuple[Any, str]:
    """Start a moto server on a free loopback port; (server, endpoint URL)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


@dataclass
class Rule:
    """Fail the first `first` matching requests and every `every`-th one after (by 1-based count)."""

    fault: str
    first: int = 0
    every: int = 0
    methods: tuple[str, ...] = ("GET",)
    seen: int = 0

    def picks(self, method: str) -> bool:
        if method not in self.methods:
            return False
        self.seen += 1
        return self.seen <= self.first or (self.every > 0 and self.seen % self.every == 0)


@dataclass
class FaultProxy:
    """An HTTP proxy on 127.0.0.1 that forwards to `upstream` and injects faults by rule."""

    upstream: str
    stall_seconds: float = 2.0
    log: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, outcome)
    rule: Rule | None = None
    retry_after: float | None = None  # seconds sent as Retry-After with 429 and 503 faults
    times: list[float] = field(default_factory=list)  # time.monotonic() of each logged request
    ranges: list[tuple[str, int, int]] = field(default_factory=list)  # (path, first, last byte) of ranged GETs
    bytes_sent: int = 0  # body bytes of successful GET responses

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = _ProxyServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def inject(self, fault: str, *, first: int = 0, every: int = 0, methods: tuple[str, ...] = ("GET",)) -> None:
        """From now on, fail requests as the rule says (fault: '500', '503', '429', '403', 'reset', 'stall')."""
        with self._lock:
            self.rule = Rule(fault, first, every, methods)

    def clear(self) -> None:
        """Stop injecting faults and forget the log."""
        with self._lock:
            self.rule = None
            self.log.clear()
            self.times.clear()
            self.ranges.clear()
            self.bytes_sent = 0

    def count(self, method: str | None = None, outcome: str | None = None) -> int:
        """Requests seen, optionally of one method and one outcome ('ok' or a fault name)."""
        with self._lock:
            return sum(
                1 for m, _, o in self.log if (method is None or m == method) and (outcome is None or o == outcome)
            )

    def _decide(self, method: str, path: str, byte_range: str | None) -> str:
        with self._lock:
            outcome = self.rule.fault if self.rule is not None and self.rule.picks(method) else "ok"
            self.log.append((method, path, outcome))
            self.times.append(time.monotonic())
            first, _, last = (byte_range or "").removeprefix("bytes=").partition("-")
            if outcome == "ok" and first.isdigit() and last.isdigit():  # closed ranges only ("a-b")
                self.ranges.append((path.split("?")[0], int(first), int(last)))
            return outcome

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 drops the SYNs of a burst of new connections: 1 s retransmits


def _handler_for(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    upstream = urlsplit(proxy.upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and a small body go out at once, as from S3 (no 40 ms ACK wait)

        def log_message(self, *args: object) -> None:  # keep test output quiet
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            outcome = proxy._decide(self.command, self.path, self.headers.get("Range"))
            if outcome == "reset":
                self._reset()
                return
            if outcome == "stall":
                time.sleep(proxy.stall_seconds)
            elif outcome in FAULTS:
                self._fail(*FAULTS[outcome])
                return
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                declared = response.getheader("Content-Length")
                data = b"" if self.command == "HEAD" or declared is not None else response.read()
                self.send_response(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in HOP_HEADERS:
                        self.send_header(name, value)
                size = declared if self.command == "HEAD" or declared is not None else str(len(data))
                self.send_header("Content-Length", size or "0")
                self.end_headers()
                if self.command != "HEAD":
                    if declared is None:
                        self.wfile.write(data)
                    sent = self._relay(response) if declared is not None else len(data)
                    if self.command == "GET":
                        with proxy._lock:
                            proxy.bytes_sent += sent
            finally:
                conn.close()

        def _relay(self, response: http.client.HTTPResponse) -> int:
            """Copy the upstream body as it arrives (a large object's first bytes are not held back); bytes sent."""
            sent = 0
            while chunk := response.read(1 << 20):
                self.wfile.write(chunk)
                sent += len(chunk)
            return sent

        def _fail(self, status: int, code: str, message: str) -> None:
            xml = (
                f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>{message}</Message><RequestId>fault</RequestId></Error>"
            ).encode()
            self.send_response(status)
            if status in (429, 503) and proxy.retry_after is not None:
                self.send_header("Retry-After", f"{proxy.retry_after:g}")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(xml)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(xml)

        def _reset(self) -> None:
            """Close the connection with a TCP RST (SO_LINGER 0), as a crashed server would."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        def handle(self) -> None:
            try:
                super().handle()
            except OSError:
                pass  # the socket was reset on purpose, or the client gave up on a stall

        def finish(self) -> None:
            try:
                super().finish()
            except OSError:
                pass

    return Handler


@pytest.fixture(scope="session")
def s3() -> Iterator[MotoS3]:
    """A moto S3 server on loopback with fake credentials in the environment and one bucket."""
    import boto3

    with pytest.MonkeyPatch.context() as mp:
        for name, value in CREDENTIALS.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", os.devnull)
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        server, endpoint = start_moto()
        try:
            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            client.create_bucket(Bucket="tokenport-test")
            yield MotoS3(endpoint, "tokenport-test", client)
        finally:
            server.stop()


@pytest.fixture
def fault_proxy(s3: MotoS3) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the session's moto server, closed after the test."""
    proxy = FaultProxy(s3.endpoint_url)
    try:
        yield proxy
    finally:
        proxy.close()
