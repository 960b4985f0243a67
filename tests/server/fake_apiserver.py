"""A small in-thread HTTP server that speaks the Kubernetes list/watch protocol for namespaces.

It emulates the documented apiserver behaviour ("Efficient detection of changes" and "Resource
versions" in https://kubernetes.io/docs/reference/using-api/api-concepts/) that the cache relies on:

* ``GET /api/v1/namespaces`` -> ``NamespaceList`` with ``metadata.resourceVersion`` (the collection's
  RV at the time of the list) and every item's own ``metadata.resourceVersion``.
* ``GET /api/v1/namespaces?watch=true&resourceVersion=RV`` -> ``200``, ``Transfer-Encoding: chunked``,
  one JSON event per line (``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}``) for
  every change *after* RV, then new changes as they happen, until ``timeoutSeconds`` passes.
* An RV older than the oldest retained event (history compacted) -> ``200`` with a single ERROR
  event whose object is a ``Status`` with ``code: 410``, ``reason: Expired``, message
  ``too old resource version: RV (OLDEST)``, then the stream ends. A real apiserver may also answer
  the watch request itself with HTTP 410; ``gone_http_once`` emulates that.
* ``allowWatchBookmarks=true`` -> BOOKMARK events carry only ``metadata.resourceVersion``.
* ``GET /api/v1/namespaces/NAME`` -> the Namespace as the state holds it now, or ``404`` with a
  ``Status`` (``reason: NotFound``, ``details.name``), as the apiserver answers a read of one object.

Test controls: ``add``/``modify``/``delete`` record events; ``change_silently`` changes state and
compacts history (events the client never sees, as after an etcd compaction during a disconnect);
``drop_watches`` cuts open watch connections without the terminating chunk (a dropped TCP
connection); ``fail_lists`` answers the next N lists with 500, ``fail_gets`` the next N GETs of one
object with 503; ``objects`` maps other REST paths to the object a GET of that path answers;
``hold_gets`` keeps GETs of one object unanswered until ``release_gets``. Every
request's query is recorded.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


def _namespace(name: str, labels: dict[str, str], rv: int) -> dict[str, Any]:
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "labels": {"kubernetes.io/metadata.name": name, **labels},
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


class FakeNamespaceAPI:
    """Namespaces by default; ``path``/``list_kind`` serve any other collection (``put``/``remove``)."""

    def __init__(
        self,
        namespaces: dict[str, dict[str, str]] | None = None,
        *,
        path: str = "/api/v1/namespaces",
        list_kind: str = "NamespaceList",
    ):
        self.path = path
        self.list_kind = list_kind
        self.rv = 100
        self.state: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[int, str, dict[str, Any]]] = []
        self.oldest = self.rv  # watches from an RV below this get 410
        self.requests: list[dict[str, Any]] = []
        self.fail_lists = 0
        self.fail_gets = 0
        self.held_gets = threading.Event()  # cleared by hold_gets: GETs of one object wait for release_gets
        self.held_gets.set()
        self.gone_http_once = False
        # other objects served by ``GET <their REST path>`` (a StatefulSet a Scale review scales), as
        # the apiserver reads one object; any other path is 404
        self.objects: dict[str, dict[str, Any]] = {}
        self._generation = 0  # bumped by drop_watches
        self._cond = threading.Condition()
        for name, labels in (namespaces or {}).items():
            self.rv += 1
            self.state[name] = _namespace(name, labels, self.rv)
        self.oldest = self.rv
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeNamespaceAPI:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.drop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- test controls -------------------------------------------------------------------------

    def _record(self, kind: str, obj: dict[str, Any]) -> None:
        self.events.append((self.rv, kind, obj))
        self._cond.notify_all()

    def add(self, name: str, labels: dict[str, str]) -> int:
        with self._cond:
            self.rv += 1
            self.state[name] = _namespace(name, labels, self.rv)
            self._record("ADDED", self.state[name])
            return self.rv

    def modify(self, name: str, labels: dict[str, str]) -> int:
        with self._cond:
            self.rv += 1
            self.state[name] = _namespace(name, labels, self.rv)
            self._record("MODIFIED", self.state[name])
            return self.rv

    def delete(self, name: str) -> int:
        with self._cond:
            self.rv += 1
            gone = self.state.pop(name)
            gone = {**gone, "metadata": {**gone["metadata"], "resourceVersion": str(self.rv)}}
            self._record("DELETED", gone)
            return self.rv

    def put(self, obj: dict[str, Any]) -> int:
        """Create or replace any object (ADDED or MODIFIED), stamped with the next resourceVersion."""
        with self._cond:
            self.rv += 1
            meta = obj["metadata"]
            key = f"{meta.get('namespace', '')}/{meta['name']}"
            event = "MODIFIED" if key in self.state else "ADDED"
            self.state[key] = {**obj, "metadata": {**meta, "resourceVersion": str(self.rv)}}
            self._record(event, self.state[key])
            return self.rv

    def remove(self, name: str, namespace: str = "") -> int:
        with self._cond:
            self.rv += 1
            gone = self.state.pop(f"{namespace}/{name}")
            gone = {**gone, "metadata": {**gone["metadata"], "resourceVersion": str(self.rv)}}
            self._record("DELETED", gone)
            return self.rv

    def bookmark(self) -> int:
        with self._cond:
            self.rv += 1
            obj = {"kind": "Namespace", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)}}
            self._record("BOOKMARK", obj)
            return self.rv

    def change_silently(self, name: str, labels: dict[str, str] | None) -> None:
        """Change state with the history compacted away: a watcher that was not connected cannot catch up."""
        with self._cond:
            self.rv += 1
            if labels is None:
                self.state.pop(name, None)
            else:
                self.state[name] = _namespace(name, labels, self.rv)
            self.events.clear()
            self.oldest = self.rv

    def drop_watches(self) -> None:
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def watches(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r.get("watch")]

    def lists(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if not r.get("watch") and r["path"] == self.path]

    def hold_gets(self) -> None:
        """GETs of one object arrive (and are recorded) but are not answered until ``release_gets``."""
        self.held_gets.clear()

    def release_gets(self) -> None:
        self.held_gets.set()

    def gets(self) -> list[str]:
        """Names read one at a time (``GET …/namespaces/NAME``), in order."""
        prefix = self.path + "/"
        return [r["path"][len(prefix) :] for r in self.requests if r["path"].startswith(prefix)]

    # --- HTTP ----------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                watch = query.get("watch", "").lower() in ("true", "1")
                api.requests.append({"path": url.path, "watch": watch, **query})
                if url.path in api.objects and not watch:
                    self._json(200, api.objects[url.path])
                    return
                if url.path.startswith(api.path + "/") and not watch:
                    self._get(url.path[len(api.path) + 1 :])
                    return
                if url.path != api.path:
                    self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})
                    return
                if watch:
                    self._watch(query)
                else:
                    self._list()

            def _get(self, name: str) -> None:
                """``GET /api/v1/namespaces/NAME``: the object as it is now (whatever the watches have
                delivered), or ``404`` with a ``Status`` of reason ``NotFound``, as the apiserver answers."""
                api.held_gets.wait(60)
                with api._cond:
                    if api.fail_gets > 0:
                        api.fail_gets -= 1
                        failure = {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "code": 503,
                            "reason": "ServiceUnavailable",
                            "message": "etcdserver: request timed out",
                        }
                        self._json(503, failure)
                        return
                    found = api.state.get(name)
                if found is None:
                    self._json(
                        404,
                        {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "metadata": {},
                            "status": "Failure",
                            "message": f'namespaces "{name}" not found',
                            "reason": "NotFound",
                            "details": {"name": name, "kind": "namespaces"},
                            "code": 404,
                        },
                    )
                    return
                self._json(200, found)

            def _list(self) -> None:
                with api._cond:
                    if api.fail_lists > 0:
                        api.fail_lists -= 1
                        doc = {
                            "kind": "Status",
                            "apiVersion": "v1",
                            "status": "Failure",
                            "code": 500,
                            "reason": "InternalError",
                            "message": "etcdserver: leader changed",
                        }
                        self._json(500, doc)
                        return
                    items = list(api.state.values())
                    rv = api.rv
                self._json(
                    200,
                    {
                        "kind": api.list_kind,
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(rv)},
                        "items": items,
                    },
                )

            def _chunk(self, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode() + b"\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _watch(self, query: dict[str, str]) -> None:
                since = int(query.get("resourceVersion") or 0)
                timeout = float(query.get("timeoutSeconds") or 30)
                with api._cond:
                    if api.gone_http_once:
                        api.gone_http_once = False
                        self._json(
                            410,
                            {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "status": "Failure",
                                "code": 410,
                                "reason": "Gone",
                                "message": f"too old resource version: {since}",
                            },
                        )
                        return
                    generation = api._generation
                    expired = since < api.oldest
                    oldest = api.oldest
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if expired:
                    self._chunk(
                        {
                            "type": "ERROR",
                            "object": {
                                "kind": "Status",
                                "apiVersion": "v1",
                                "metadata": {},
                                "status": "Failure",
                                "message": f"too old resource version: {since} ({oldest})",
                                "reason": "Expired",
                                "code": 410,
                            },
                        }
                    )
                    self.wfile.write(b"0\r\n\r\n")
                    self.close_connection = True
                    return
                sent = since
                deadline = threading.Event()
                timer = threading.Timer(timeout, lambda: (deadline.set(), api.drop_watches_soft()))
                timer.daemon = True
                timer.start()
                try:
                    while True:
                        with api._cond:
                            pending = [e for e in api.events if e[0] > sent]
                            if not pending and api._generation == generation and not deadline.is_set():
                                api._cond.wait(0.5)
                                pending = [e for e in api.events if e[0] > sent]
                            dropped = api._generation != generation
                        for rv, kind, obj in pending:
                            self._chunk({"type": kind, "object": obj})
                            sent = rv
                        if dropped:  # cut the connection: no terminating chunk
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        if deadline.is_set():  # timeoutSeconds: a clean end of the stream
                            self.wfile.write(b"0\r\n\r\n")
                            self.close_connection = True
                            return
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True
                finally:
                    timer.cancel()

        return Handler

    def drop_watches_soft(self) -> None:
        """Wake watch loops (used by the timeoutSeconds timer) without dropping anything."""
        with self._cond:
            self._cond.notify_all()
