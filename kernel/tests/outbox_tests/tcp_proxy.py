"""A TCP forwarder the tests can cut and restore, to take a real broker "off the network"."""

import contextlib
import selectors
import socket
import threading


class TcpProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target = (target_host, target_port)
        self.port = _free_port()
        self._listener: socket.socket | None = None
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._running = threading.Event()

    def up(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener = listener
        self._running.set()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def down(self) -> None:
        """Refuse new connections and cut every open one, as a broker outage would."""
        self._running.clear()
        if self._thread:
            self._thread.join(5)
        with self._lock:
            for a, b in self._pairs:
                for s in (a, b):
                    with contextlib.suppress(OSError):
                        s.close()
            self._pairs.clear()

    def _serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ)
        peers: dict[socket.socket, socket.socket] = {}
        try:
            while self._running.is_set():
                for key, _ in sel.select(timeout=0.05):
                    sock = key.fileobj
                    if sock is self._listener:
                        client, _ = self._listener.accept()
                        upstream = socket.create_connection(self.target)
                        with self._lock:
                            self._pairs.append((client, upstream))
                        peers[client], peers[upstream] = upstream, client
                        sel.register(client, selectors.EVENT_READ)
                        sel.register(upstream, selectors.EVENT_READ)
                        continue
                    try:
                        data = sock.recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        with contextlib.suppress(OSError):
                            peers[sock].sendall(data)
                        continue
                    for s in (sock, peers.pop(sock, None)):
                        if s is not None:
                            with contextlib.suppress(KeyError, ValueError):
                                sel.unregister(s)
                            peers.pop(s, None)
                            s.close()
        finally:
            sel.close()
            self._listener.close()
            for s in list(peers):
                with contextlib.suppress(OSError):
                    s.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
