"""Tests of the SDK against a fake server on localhost: configuration, the
requests it sends, error mapping and stream decoding. They need no Warren
server; test_sandbox.py runs the SDK against a real one."""

from __future__ import annotations

import http.server
import json
import os
import tempfile
import threading
import unittest
from typing import Any, Dict, List, Optional, Tuple
from unittest import mock

import warren
from warren import Client, Sandbox
from warren.models import parse_time


class _Fake:
    """A scripted HTTP server: answers each request with the next of
    ``answers`` and records what it was asked."""

    def __init__(self) -> None:
        self.requests: List[Dict[str, Any]] = []
        self.answers: List[Tuple[int, Dict[str, str], bytes]] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fake.requests.append(
                    {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, headers, data = fake.answers.pop(0) if fake.answers else (204, {}, b"")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def answer(self, status: int, body: Any = None, *, ctype: str = "application/json", raw: Optional[bytes] = None) -> None:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        self.answers.append((status, {"Content-Type": ctype}, data))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SANDBOX = {"id": "sb-abc", "state": "running", "created_at": "2026-01-02T03:04:05.123456789Z", "metadata": {}}


class FakeServerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.fake = _Fake()
        self.addCleanup(self.fake.close)
        self.client = Client(self.fake.url, "k1")

    def last(self) -> Dict[str, Any]:
        return self.fake.requests[-1]


class TestConfig(unittest.TestCase):
    def test_defaults_and_env(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            keyfile = os.path.join(d, "key")
            with open(keyfile, "w") as f:
                f.write("from-file\n")
            cases = [
                # (env, kwargs, want url, want key)
                ({"WARREN_KEY_FILE": keyfile}, {}, warren.DEFAULT_URL, "from-file"),
                ({"WARREN_API_URL": "http://h:1", "WARREN_API_KEY": "env"}, {}, "http://h:1", "env"),
                ({"WARREN_API_URL": "http://h:1", "WARREN_API_KEY": "env"}, {"api_url": "http://a:2/", "api_key": "arg"}, "http://a:2", "arg"),
                ({"WARREN_KEY_FILE": "/nonexistent"}, {"key_file": keyfile}, warren.DEFAULT_URL, "from-file"),
            ]
            for env, kwargs, want_url, want_key in cases:
                with mock.patch.dict(os.environ, env, clear=True):
                    c = Client(**kwargs)
                self.assertEqual(c.api_url, want_url, (env, kwargs))
                self.assertEqual(c._key, want_key, (env, kwargs))

    def test_unreadable_key_file(self) -> None:
        # The default file missing is fine (health needs no key); one named
        # explicitly must be readable.
        with mock.patch.dict(os.environ, {}, clear=True), mock.patch.object(
            warren._client, "DEFAULT_KEY_FILE", "/nonexistent/admin.key"
        ):
            self.assertEqual(Client()._key, "")
            with self.assertRaises(warren.UnauthorizedError):
                Client(key_file="/nonexistent/key")
        with mock.patch.dict(os.environ, {"WARREN_KEY_FILE": "/nonexistent/key"}, clear=True):
            with self.assertRaises(warren.UnauthorizedError):
                Client()

    def test_bad_url(self) -> None:
        with self.assertRaises(ValueError):
            Client("127.0.0.1:7070", "k")

    def test_client_and_url_together(self) -> None:
        with self.assertRaises(ValueError):
            Sandbox.get("sb-1", client=Client("http://h:1", "k"), api_url="http://h:2")


class TestErrors(FakeServerTest):
    def test_codes(self) -> None:
        cases = [
            ("invalid", 400, warren.InvalidError),
            ("unauthorized", 401, warren.UnauthorizedError),
            ("forbidden", 403, warren.ForbiddenError),
            ("not_found", 404, warren.NotFoundError),
            ("conflict", 409, warren.ConflictError),
            ("quota", 429, warren.QuotaError),
            ("unavailable", 503, warren.UnavailableError),
            ("internal", 500, warren.InternalError),
            ("brand_new", 500, warren.InternalError),
        ]
        for code, status, cls in cases:
            self.fake.answer(status, {"error": {"code": code, "message": "m-" + code}})
            with self.assertRaises(cls) as cm:
                Sandbox.get("sb-1", client=self.client)
            e = cm.exception
            self.assertIsInstance(e, warren.WarrenError)
            self.assertEqual((e.code, e.status, e.message, str(e)), (code, status, "m-" + code, "m-" + code))

    def test_status_without_body(self) -> None:
        for status, cls in [(404, warren.NotFoundError), (409, warren.ConflictError), (502, warren.InternalError)]:
            self.fake.answer(status, raw=b"proxy says no", ctype="text/plain")
            with self.assertRaises(cls) as cm:
                Sandbox.get("sb-1", client=self.client)
            self.assertIn("proxy says no", cm.exception.message)
            self.assertEqual(cm.exception.status, status)

    def test_unreachable(self) -> None:
        c = Client("http://127.0.0.1:1", "k")
        with self.assertRaises(warren.UnavailableError) as cm:
            c.health()
        self.assertIn("is `warren server` running?", str(cm.exception))
        self.assertEqual(cm.exception.status, 0)

    def test_unauthorized_hint(self) -> None:
        with mock.patch.dict(os.environ, {}, clear=True), mock.patch.object(
            warren._client, "DEFAULT_KEY_FILE", "/nonexistent/admin.key"
        ):
            c = Client(self.fake.url)
        self.fake.answer(401, {"error": {"code": "unauthorized", "message": "missing API key"}})
        with self.assertRaises(warren.UnauthorizedError) as cm:
            Sandbox.list(client=c)
        self.assertIn("set WARREN_API_KEY", str(cm.exception))
        self.assertNotIn("Authorization", self.last()["headers"])


class TestRequests(FakeServerTest):
    def test_create_sends_only_what_is_given(self) -> None:
        self.fake.answer(201, SANDBOX)
        sb = Sandbox.create(
            "python:3.12",
            name="w1",
            memory_mb=1024,
            env={"A": "1"},
            metadata={"owner": "me"},
            idle=60,
            network=["10.0.0.0/8"],
            volumes=[("data", "/data", True)],
            client=self.client,
        )
        req = self.last()
        self.assertEqual((req["method"], req["path"]), ("POST", "/v1/sandboxes"))
        self.assertEqual(req["headers"]["Authorization"], "Bearer k1")
        self.assertEqual(
            json.loads(req["body"]),
            {
                "image": "python:3.12",
                "name": "w1",
                "memory_mb": 1024,
                "env": {"A": "1"},
                "metadata": {"owner": "me"},
                "idle": {"timeout_s": 60, "action": "pause"},
                "network": {"egress": ["10.0.0.0/8"]},
                "volumes": [{"volume": "data", "path": "/data", "read_only": True}],
            },
        )
        self.assertEqual(sb.id, "sb-abc")
        self.assertEqual(sb.created_at, parse_time("2026-01-02T03:04:05.123456Z"))

        self.fake.answer(201, SANDBOX)
        Sandbox.create(client=self.client)
        self.assertEqual(json.loads(self.last()["body"]), {})

    def test_list_query(self) -> None:
        self.fake.answer(200, {"sandboxes": [SANDBOX]})
        got = Sandbox.list(state="running", metadata={"owner": "a b"}, client=self.client)
        self.assertEqual([s.id for s in got], ["sb-abc"])
        self.assertEqual(self.last()["path"], "/v1/sandboxes?state=running&metadata.owner=a+b")

    def test_exec_bodies(self) -> None:
        sb = Sandbox(self.client, SANDBOX)
        cases = [
            (("ls -l",), {}, {"command": "ls -l"}),
            ((["ls", "-l"],), {}, {"cmd": ["ls", "-l"]}),
            ((), {"command": "x", "cwd": "/w", "env": {"A": "1"}, "stdin": b"in", "timeout": 2.5},
             {"command": "x", "cwd": "/w", "env": {"A": "1"}, "stdin": "in", "timeout_s": 2.5}),
        ]
        for args, kwargs, want in cases:
            self.fake.answer(200, {"exit_code": 0, "stdout": "", "stderr": "", "duration_ms": 1})
            sb.exec(*args, **kwargs)
            self.assertEqual(json.loads(self.last()["body"]), want)
            self.assertEqual(self.last()["path"], "/v1/sandboxes/sb-abc/exec")
        with self.assertRaises(ValueError):
            sb.exec()
        with self.assertRaises(ValueError):
            sb.exec("a", command="b")

    def test_exec_stream(self) -> None:
        sb = Sandbox(self.client, SANDBOX)
        lines = b'{"stdout":"a\\n"}\n{"stderr":"b"}\n{"stdout":"c"}\n{"exit_code":3,"timed_out":true}\n'
        self.fake.answer(200, raw=lines, ctype="application/x-ndjson")
        out: List[str] = []
        err: List[str] = []
        res = sb.exec("x", on_stdout=out.append, on_stderr=err.append)
        self.assertEqual(self.last()["headers"]["Accept"], "application/x-ndjson")
        self.assertEqual((out, err), (["a\n", "c"], ["b"]))
        self.assertEqual((res.exit_code, res.stdout, res.stderr, res.timed_out), (3, "a\nc", "b", True))

        self.fake.answer(200, raw=lines, ctype="application/x-ndjson")
        st = sb.exec_stream(["x"])
        self.assertEqual([(e.stream, e.data) for e in st], [("stdout", "a\n"), ("stderr", "b"), ("stdout", "c")])
        self.assertEqual(st.exit_code, 3)

        self.fake.answer(200, raw=b'{"stdout":"a"}\n{"error":"pipe broke","exit_code":-1}\n', ctype="application/x-ndjson")
        with self.assertRaises(warren.InternalError):
            sb.exec("x", on_stdout=out.append)

        self.fake.answer(200, raw=b'{"stdout":"a"}\n', ctype="application/x-ndjson")
        with self.assertRaises(warren.WarrenError):
            sb.exec_stream("x").wait()

    def test_paths_are_escaped(self) -> None:
        sb = Sandbox(self.client, SANDBOX)
        self.fake.answer(204)
        sb.jobs.delete("job-1/../x")
        self.assertEqual(self.last()["path"], "/v1/sandboxes/sb-abc/jobs/job-1%2F..%2Fx")
        self.fake.answer(200, raw=b"bytes", ctype="application/octet-stream")
        self.assertEqual(sb.files.read("/a b/c&d"), b"bytes")
        self.assertEqual(self.last()["path"], "/v1/sandboxes/sb-abc/files?path=%2Fa+b%2Fc%26d")

    def test_file_write(self) -> None:
        sb = Sandbox(self.client, SANDBOX)
        self.fake.answer(200, {"name": "x", "path": "/x", "type": "file", "size": 2, "mode": "0755",
                               "mtime": "2026-01-02T03:04:05Z"})
        fe = sb.files.write("/x", "hé", mode=0o755)
        req = self.last()
        self.assertEqual((req["method"], req["path"], req["body"]), ("PUT", "/v1/sandboxes/sb-abc/files?path=%2Fx&mode=0755", "hé".encode()))
        self.assertEqual((fe.mode, fe.is_file), ("0755", True))

    def test_code_result(self) -> None:
        sb = Sandbox(self.client, SANDBOX)
        self.fake.answer(200, {"stdout": "", "stderr": "", "result": "",
                               "error": {"name": "ValueError", "value": "bad", "traceback": "tb"},
                               "execution_count": 2, "future_field": 1})
        res = sb.run_code("raise ValueError('bad')", context="c1", timeout=5)
        self.assertEqual(json.loads(self.last()["body"]), {"code": "raise ValueError('bad')", "context": "c1", "timeout_s": 5})
        self.assertFalse(res.ok)
        assert res.error is not None
        self.assertEqual((res.error.name, res.error.value, res.execution_count), ("ValueError", "bad", 2))


class TestParseTime(unittest.TestCase):
    def test_forms(self) -> None:
        for s, want in [
            ("2026-01-02T03:04:05Z", "2026-01-02T03:04:05+00:00"),
            ("2026-01-02T03:04:05.5Z", "2026-01-02T03:04:05.500000+00:00"),
            ("2026-01-02T03:04:05.123456789+02:00", "2026-01-02T03:04:05.123456+02:00"),
        ]:
            got = parse_time(s)
            assert got is not None
            self.assertEqual(got.isoformat(), want)
        self.assertIsNone(parse_time(""))
        with self.assertRaises(ValueError):
            parse_time("yesterday")


if __name__ == "__main__":
    unittest.main()
