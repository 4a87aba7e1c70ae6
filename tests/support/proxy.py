"""A small threaded TCP proxy for fault tests: pass, blackhole or reset the traffic.

Workers connect to the proxy's port on 127.0.0.1; the proxy forwards to PostgreSQL.
``SlowProxy``: a TCP port in front of a Unix socket that holds each new connection a
while (a server slow to answer, or one that accepts and never answers) and counts them.

- ``pass``: bytes flow both ways.
- ``blackhole``: connections stay open but nothing is forwarded (a partition: reads
  hang until keepalives or timeouts notice); new connections are accepted and starve.
- ``reset``: every open connection is closed with RST and new ones are reset at once.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from typing import Literal

Mode = Literal["pass", "blackhole", "reset"]


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode: Mode = "pass"
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="fault-proxy", daemon=True)
        self._thread.start()

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            pairs = list(self._pairs) if mode == "reset" else []
            if mode == "reset":
                self._pairs.clear()
        for client, server in pairs:
            _reset(client)
            _reset(server)

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self.set_mode("reset")

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.mode == "reset":
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self._lock:
                self._pairs.append((client, server))
            threading.Thread(
                target=self._pump, args=(client, server), name="fault-proxy-pump", daemon=True
            ).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peers = {client: server, server: client}
        try:
            while not self._closed.is_set():
                if self.mode == "blackhole":
                    # Hold everything: read nothing, forward nothing (the peers' buffers fill).
                    self._closed.wait(0.05)
                    if client.fileno() < 0 or server.fileno() < 0:
                        return
                    continue
                ready, _, _ = select.select([client, server], [], [], 0.05)
                for sock in ready:
                    if self.mode != "pass":
                        break
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            with self._lock:
                if (client, server) in self._pairs:
                    self._pairs.remove((client, server))
            _reset(client)
            _reset(server)


class SlowProxy(threading.Thread):
    """A TCP port in front of the test server's Unix socket that holds each new
    connection ``delay`` seconds before passing its bytes on: a server slow to answer."""

    def __init__(self, socket_path: str, delay: float, port: int = 0) -> None:
        super().__init__(daemon=True)
        self.socket_path, self.delay = socket_path, delay
        self.listener = socket.create_server(("127.0.0.1", port))
        self.port = self.listener.getsockname()[1]
        self.closing = False
        self.accepted: list[socket.socket] = []

    def run(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        time.sleep(self.delay)
        server = socket.socket(socket.AF_UNIX)
        try:
            server.connect(self.socket_path)
        except OSError:
            server.close()
            client.close()
            return
        for source, target in ((client, server), (server, client)):
            threading.Thread(target=_pipe, args=(source, target), daemon=True).start()

    def close(self) -> None:
        """Stop listening (new connections are refused) and cut the open ones."""
        self.closing = True
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for client in self.accepted:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (source, target):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
