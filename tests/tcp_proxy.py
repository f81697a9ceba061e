"""A TCP proxy on loopback that a test cuts and restores: a database outage for the processes
that connect through it, without touching the machine's shared PostgreSQL.

`cut()` closes every connection through it (what a client sees when PostgreSQL restarts or
the network drops) and refuses new ones until `restore()` (what a client sees while it is
down); `hang()` keeps every connection open and moves no byte either way until `restore()`
(a server that stopped answering). bench/faults.py puts it in front of S3 and the simulator."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Self


class TcpProxy:
    def __init__(self, *, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener: socket.socket | None = None
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.hanging = threading.Event()
        self.port = _free_port()

    def start(self) -> Self:
        self.restore()
        return self

    def restore(self) -> None:
        self.hanging.clear()
        if self._listener is not None:
            return  # hung, not cut: the connections move again
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def hang(self) -> None:
        self.hanging.set()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        with self._lock:
            doomed, self._sockets = self._sockets, set()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def stop(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        _pump(source, sink, self.hanging)


def _pump(source: socket.socket, sink: socket.socket, hanging: threading.Event) -> None:
    try:
        while data := source.recv(65536):
            while hanging.is_set():
                time.sleep(0.05)
            sink.sendall(data)
    except OSError:
        pass
    for sock in (source, sink):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def proxy_to(host: str, port: int) -> Iterator[TcpProxy]:
    proxy = TcpProxy(target_host=host, target_port=port).start()
    try:
        yield proxy
    finally:
        proxy.stop()
