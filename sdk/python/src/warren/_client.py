"""The HTTP transport: where the server is, the key, requests and errors."""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple, Union

from .errors import UnauthorizedError, UnavailableError, WarrenError, error_for

__all__ = ["Client", "DEFAULT_URL", "DEFAULT_KEY_FILE"]

DEFAULT_URL = "http://127.0.0.1:7070"
"""Where a local ``warren server`` listens."""

DEFAULT_KEY_FILE = "/var/lib/warren/admin.key"
"""Where a local server writes its admin key."""

DEFAULT_TIMEOUT = 300.0
"""Seconds a call may wait on the server (connecting, or between bytes)."""

Body = Union[bytes, Any, None]  # bytes, or a binary file object

_NOTHING: Any = object()


class Client:
    """A connection to one Warren server.

    The server and key are found the same way by every Warren client (the
    CLI, the Go SDK, the MCP server): ``api_url`` or ``WARREN_API_URL``
    (default ``http://127.0.0.1:7070``), and ``api_key`` or
    ``WARREN_API_KEY``, or else the key in ``key_file``,
    ``WARREN_KEY_FILE`` or ``/var/lib/warren/admin.key`` (when readable).

    A client holds no connection: each call opens its own, so one client may
    be shared between threads.

    Args:
        api_url: the server's URL.
        api_key: an API key.
        key_file: a file holding the API key, read when no key is given.
        timeout: seconds a call may wait on the server (to connect, or
            between two reads); calls that run commands wait as long as the
            command does.
    """

    def __init__(
        self,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        key_file: Optional[str] = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        url = api_url or os.environ.get("WARREN_API_URL") or DEFAULT_URL
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("api_url %r: want http://HOST:PORT or https://HOST" % url)
        self._url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._key_hint = ""
        key = api_key or os.environ.get("WARREN_API_KEY") or ""
        if not key:
            path = key_file or os.environ.get("WARREN_KEY_FILE") or ""
            explicit = bool(path)
            path = path or DEFAULT_KEY_FILE
            try:
                with open(path, encoding="utf-8") as f:
                    key = f.read().strip()
            except OSError as e:
                if explicit:
                    raise UnauthorizedError("reading the API key from %s: %s" % (path, e)) from None
                self._key_hint = (
                    "no API key: pass api_key=, set WARREN_API_KEY, or run as a user who can read %s" % path
                )
        self._key = key
        self.timeout = timeout

    @property
    def api_url(self) -> str:
        """The server's URL."""
        return self._url

    def __repr__(self) -> str:
        return "Client(api_url=%r)" % self._url

    # -- requests --------------------------------------------------------

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Body = None,
        json_body: Any = _NOTHING,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Any = _NOTHING,
    ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends a request and returns the open connection and its 2xx
        response; the caller reads and closes it. An error answer is raised
        as the :class:`~warren.errors.WarrenError` for its code.

        ``timeout`` overrides the client's (``None`` waits forever).
        """
        hdrs: Dict[str, str] = {"User-Agent": "warren-python/0.1"}
        if json_body is not _NOTHING:
            body = json.dumps(json_body, separators=(",", ":")).encode()
            hdrs["Content-Type"] = "application/json"
        if headers:
            hdrs.update(headers)
        if self._key:
            hdrs["Authorization"] = "Bearer " + self._key
        target = self._prefix + path
        q = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        if q:
            target += "?" + urllib.parse.urlencode(q)
        t = self.timeout if timeout is _NOTHING else timeout
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=t)
        try:
            conn.request(method, target, body=body, headers=hdrs)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self.unreachable(e) from None
        if resp.status >= 300:
            try:
                data = resp.read(1 << 20)
            except (OSError, http.client.HTTPException):
                data = b""
            finally:
                conn.close()
            raise self._error(resp.status, data)
        return conn, resp

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        body: Body = None,
        json_body: Any = _NOTHING,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Any = _NOTHING,
    ) -> Tuple[int, Dict[str, str], bytes]:
        """Sends a request and returns the status, headers and body of its
        2xx answer."""
        conn, resp = self.open(
            method, path, query=query, body=body, json_body=json_body, headers=headers, timeout=timeout
        )
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise self.unreachable(e) from None
        finally:
            conn.close()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def json(
        self,
        method: str,
        path: str,
        body: Any = _NOTHING,
        *,
        query: Optional[Mapping[str, Any]] = None,
        timeout: Any = _NOTHING,
    ) -> Any:
        """Sends a JSON request (when ``body`` is given) and decodes the JSON
        answer; ``None`` for an empty one (204)."""
        _, _, data = self.call(method, path, query=query, json_body=body, timeout=timeout)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise WarrenError("decoding the answer of %s %s: %s" % (method, path, e), status=200) from None

    def health(self) -> Dict[str, Any]:
        """The server's health (``{"status": "ok", "version": ..., "runsc": ...}``);
        needs no key."""
        return self.json("GET", "/healthz")

    # -- helpers ---------------------------------------------------------

    def unreachable(self, e: BaseException) -> UnavailableError:
        """The error for a server that did not answer (or stopped answering)."""
        if isinstance(e, socket.timeout):
            return UnavailableError("warren server at %s: no answer within %ss" % (self._url, self.timeout))
        return UnavailableError("warren server at %s: %s (is `warren server` running?)" % (self._url, e))

    def _error(self, status: int, data: bytes) -> WarrenError:
        code, message = None, ""
        try:
            detail = json.loads(data)["error"]
            code, message = detail.get("code"), detail.get("message", "")
        except (ValueError, KeyError, TypeError, AttributeError):
            message = "HTTP %d: %s" % (status, data.decode("utf-8", "replace").strip())
        err = error_for(status, code, message)
        if err.code == "unauthorized" and self._key_hint:
            err.message += "; " + self._key_hint
            err.args = (err.message,)
        return err


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def iter_lines(client: Client, resp: http.client.HTTPResponse) -> Iterator[Dict[str, Any]]:
    """Yields the JSON objects of an NDJSON answer, one per line."""
    while True:
        try:
            line = resp.readline()
        except (OSError, http.client.HTTPException) as e:
            raise client.unreachable(e) from None
        if not line:
            return
        line = line.strip()
        if not line:
            continue
        try:
            yield json.loads(line)
        except ValueError as e:
            raise WarrenError("decoding a streamed line: %s" % e, status=200) from None
