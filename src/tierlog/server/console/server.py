"""The console's HTTP listener (``console.listener``): read-only pages rendered on its own threads.

Like the metrics endpoint it is a threaded HTTP server of the standard library, so a page is read
and rendered off the event loop; an error in a page answers that request with a 500 and is logged,
and never reaches the broker's clients.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, select_autoescape

from tierlog.config.definition import HostPort
from tierlog.server.console import reader, views
from tierlog.server.console.sampler import Sampler

if TYPE_CHECKING:
    from tierlog.server.context import BrokerContext
    from tierlog.server.metrics import RequestMetrics

log = logging.getLogger(__name__)

#: How often the sampler reads the counters (an hour of history is kept).
SAMPLE_INTERVAL_MS = 5000

_STATIC = {"console.css": "text/css; charset=utf-8"}


def _iso(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "–"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def make_environment() -> Environment:
    env = Environment(loader=PackageLoader("tierlog.server.console", "templates"),
                      autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
    env.filters.update(bytes=views.format_bytes, duration=views.format_duration_ms, iso=_iso)
    return env


def _int(params: Mapping[str, list[str]], name: str, default: int | None = None) -> int | None:
    values = params.get(name)
    if not values or values[0].strip() == "":
        return default
    try:
        return int(values[0])
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {values[0]!r}") from None


def exposure_warning(console_host: str, listener_protocols: Mapping[str, str]) -> str | None:
    """The WARNING to log when the console, which has no authentication of its own, listens beyond
    loopback while some Kafka listener requires TLS or SASL: its Messages page shows record contents
    to anyone who can reach it, which the secured listeners would refuse. None when that is not so."""
    secured = sorted(name for name, protocol in listener_protocols.items() if protocol != "PLAINTEXT")
    if not secured:
        return None
    host = console_host.strip("[]")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        return None
    return (f"console listens on {host or '0.0.0.0'} without authentication while listeners {', '.join(secured)} "
            "require TLS or SASL: anyone who reaches it can read records; bind console.listener to a loopback address")


class BadRequest(Exception):
    pass


class Console:
    """The pages, bound to one broker's state; :meth:`start` listens, :meth:`render` is the router."""

    def __init__(self, ctx: BrokerContext, requests: RequestMetrics, *, sample_interval_ms: int = SAMPLE_INTERVAL_MS
                 ) -> None:
        self.ctx = ctx
        self.started_ms = ctx.clock.wall_ms()
        rlm = ctx.remote_log_manager
        self.sampler = Sampler(ctx.clock, sample_interval_ms, totals=requests.totals,
                               group_lags=lambda: reader.group_lags(ctx),
                               tier_status=rlm.status if rlm is not None else None,
                               local_sizes=lambda now_ms: reader.local_sizes(ctx, now_ms))
        self.env = make_environment()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url: str | None = None
        self._pages: dict[str, Callable[[dict[str, list[str]]], tuple[str, dict[str, Any]]]] = {
            "/": self._overview, "/topic": self._topic, "/tiering": self._tiering, "/groups": self._groups,
            "/group": self._group, "/messages": self._messages, "/metadata": self._metadata,
        }

    # -- pages ----------------------------------------------------------------------------------

    def _overview(self, q: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
        return "overview.html", reader.overview(self.ctx, self.sampler, self.started_ms, _int(q, "page", 1) or 1)

    def _topic(self, q: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
        name = (q.get("name") or [""])[0]
        return "topic.html", reader.topic(self.ctx, name, _int(q, "page", 1) or 1)

    def _tiering(self, q: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
        return "tiering.html", reader.tiering(self.ctx, self.sampler, _int(q, "page", 1) or 1)

    def _groups(self, q: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
        return "groups.html", reader.groups(self.ctx, self.sampler, _int(q, "page", 1) or 1)

    def _group(self, q: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
        gid = (q.get("id") or [""])[0]
        return "group.html", reader.group(self.ctx, self.sampler, gid, _int(q, "page", 1) or 1)

    def _messages(self, q: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
        topic = (q.get("topic") or [""])[0]
        fmt = (q.get("format") or ["text"])[0]
        if fmt not in ("text", "json", "hex"):
            raise BadRequest("format is one of text, json, hex")
        topics = sorted(self.ctx.image.topics_by_name)
        if not topic:
            return "messages.html", {"result": None, "topics": topics, "fmt": fmt}
        max_kib = _int(q, "max_kib", reader.DEFAULT_MESSAGE_READ_BYTES // 1024) or 1
        query = reader.MessageQuery(topic, _int(q, "partition", 0) or 0, _int(q, "offset"), _int(q, "timestamp"),
                                    _int(q, "count", 10) or 10, fmt, max_kib * 1024)
        return "messages.html", {"result": reader.messages(self.ctx, query), "topics": topics, "fmt": fmt}

    def _metadata(self, q: dict[str, list[str]]) -> tuple[str, dict[str, Any]]:
        return "metadata.html", reader.metadata(self.ctx)

    def render(self, target: str) -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of ``target``."""
        url = urllib.parse.urlsplit(target)
        if url.path.startswith("/static/"):
            name = url.path.removeprefix("/static/")
            if name not in _STATIC:
                return 404, "text/plain; charset=utf-8", b"not found\n"
            body = resources.files("tierlog.server.console").joinpath("static", name).read_bytes()
            return 200, _STATIC[name], body
        if url.path == "/favicon.ico":
            return 204, "image/x-icon", b""
        page = self._pages.get(url.path)
        if page is None:
            return self._error(404, f"no page {url.path}")
        clock = self.ctx.clock
        started_ns = clock.monotonic_ns()
        try:
            template, data = page(urllib.parse.parse_qs(url.query))
            data.update(path=url.path, render_ms=lambda: (clock.monotonic_ns() - started_ns) / 1e6)
            html = self.env.get_template(template).render(**data)
        except reader.NotFound as e:
            return self._error(404, str(e))
        except BadRequest as e:
            return self._error(400, str(e))
        return 200, "text/html; charset=utf-8", html.encode()

    def _error(self, status: int, message: str) -> tuple[int, str, bytes]:
        html = self.env.get_template("error.html").render(status=status, message=message, path="")
        return status, "text/html; charset=utf-8", html.encode()

    # -- listener -------------------------------------------------------------------------------

    def start(self, address: str) -> str:
        """Listen on ``address`` (``HOST:PORT`` or ``http://HOST:PORT``); the URL. OSError when it
        cannot be bound."""
        host, port = HostPort.split(address)
        console = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "tierlog-console"

            def do_GET(self) -> None:
                self._answer(body=True)

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def _answer(self, *, body: bool) -> None:
                try:
                    status, ctype, payload = console.render(self.path)
                except Exception:
                    # The console's own bug: this request gets a 500, the broker goes on.
                    log.exception("console page %s failed", self.path)
                    status, ctype, payload = 500, "text/plain; charset=utf-8", b"internal error; see the broker log\n"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                if body:
                    self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("console %s " + format, self.client_address[0], *args)

        server = ThreadingHTTPServer((host or "0.0.0.0", port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="console-http", daemon=True)
        self._thread.start()
        self.sampler.start()
        shown = host or "0.0.0.0"
        shown = f"[{shown}]" if ":" in shown else shown
        self.url = f"http://{shown}:{server.server_port}/"
        log.info("console listening url=%s", self.url)
        protocols = {b.spec.name: self.ctx.config.security_protocol(b.spec.name) for b in self.ctx.listeners}
        warning = exposure_warning(host, protocols)
        if warning is not None:
            log.warning(warning)
        return self.url

    def close(self) -> None:
        self.sampler.close()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
