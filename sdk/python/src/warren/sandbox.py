"""Sandboxes, snapshots and volumes."""

from __future__ import annotations

import http.client
import io
import json
import os
import tarfile
import time
import urllib.parse
from datetime import datetime
from typing import (
    Any,
    BinaryIO,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._client import Client, iter_lines
from .errors import ConflictError, InternalError, NotFoundError, WarrenError
from .models import (
    ArchiveResult,
    CodeContextInfo,
    CodeResult,
    ExecResult,
    FileEntry,
    Job,
    OutputEvent,
    ShellInfo,
    parse_time,
)

__all__ = [
    "Sandbox",
    "Snapshot",
    "Volume",
    "Files",
    "Jobs",
    "Shell",
    "CodeContext",
    "ExecStream",
]

Command = Union[str, Sequence[str]]
"""A command: a string run by ``/bin/sh -c``, or an argv list."""

OnOutput = Callable[[str], Any]


def _q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def _client_for(client: Optional[Client], api_url: Optional[str], api_key: Optional[str]) -> Client:
    if client is not None:
        if api_url or api_key:
            raise ValueError("give either client= or api_url=/api_key=, not both")
        return client
    return Client(api_url, api_key)


def _command_body(
    cmd: Optional[Command],
    command: Optional[str],
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    stdin: Union[str, bytes, None],
    timeout: Optional[float],
) -> Dict[str, Any]:
    if (cmd is None) == (command is None):
        raise ValueError("give one command: cmd (a string for /bin/sh -c, or an argv list) or command=")
    body: Dict[str, Any] = {}
    if command is not None:
        body["command"] = command
    elif isinstance(cmd, str):
        body["command"] = cmd
    else:
        body["cmd"] = list(cmd)  # type: ignore[arg-type]
    if cwd:
        body["cwd"] = cwd
    if env:
        body["env"] = dict(env)
    if stdin is not None:
        body["stdin"] = stdin.decode("utf-8") if isinstance(stdin, bytes) else stdin
    if timeout:
        body["timeout_s"] = timeout
    return body


class Sandbox:
    """A persistent gVisor sandbox.

    Create one with :meth:`create`, or find one with :meth:`connect`. Used
    as a context manager it is deleted on exit (or paused, or kept: see
    ``on_exit``)::

        with Sandbox.create(image="debian:bookworm") as sb:
            print(sb.exec("uname -a").stdout)

    Attributes mirror the API's Sandbox object (``id``, ``name``, ``state``,
    ``image``, ...) as of the last call that returned it; :meth:`refresh`
    reads it again.
    """

    def __init__(self, client: Client, data: Mapping[str, Any], *, on_exit: str = "delete") -> None:
        if on_exit not in ("delete", "pause", "keep"):
            raise ValueError("on_exit: want 'delete', 'pause' or 'keep', got %r" % on_exit)
        self._client = client
        self._data: Dict[str, Any] = dict(data)
        self.on_exit = on_exit
        """What leaving a ``with`` block does: ``"delete"``, ``"pause"`` or ``"keep"``."""
        self.files = Files(self)
        """The sandbox's files."""
        self.jobs = Jobs(self)
        """The sandbox's background jobs."""

    # -- finding and making ----------------------------------------------

    @classmethod
    def create(
        cls,
        image: Optional[str] = None,
        *,
        template: Optional[str] = None,
        snapshot: Union["Snapshot", str, None] = None,
        name: Optional[str] = None,
        cpus: Optional[float] = None,
        memory_mb: Optional[int] = None,
        disk_mb: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Union[str, Sequence[str], Mapping[str, Any], None] = None,
        volumes: Optional[Sequence[Union[Mapping[str, Any], Tuple[Any, ...]]]] = None,
        idle: Union[int, Mapping[str, Any], None] = None,
        checkpoint_interval_s: Optional[int] = None,
        on_exit: str = "delete",
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "Sandbox":
        """Creates a sandbox and returns once it answers commands (about a
        second from an image; faster from a template's warm pool).

        Args:
            image: the image to boot (the server's default, Debian, when
                none of image, template and snapshot is given).
            template: start from this template: its setup already done.
            snapshot: start from this snapshot (a :class:`Snapshot` or id).
            name: a name for people, unique per team.
            cpus: vCPUs. From a template or snapshot these are fixed by it.
            memory_mb: memory in MB.
            disk_mb: disk in MB.
            env: environment variables of every command.
            metadata: labels to find the sandbox by (:meth:`list`).
            network: egress policy: ``"none"``, ``"open"``, a list of CIDRs
                and domain names, or the API's ``{"egress": ...}`` object.
            volumes: volumes to mount: ``{"volume": NAME, "path": "/data",
                "read_only": False}`` or ``(volume, path[, read_only])``.
            idle: seconds of no API activity after which the sandbox is
                paused, or ``{"timeout_s": N, "action": "pause" | "delete"}``.
            checkpoint_interval_s: how often to checkpoint it while it runs.
            on_exit: what a ``with`` block's end does: ``"delete"`` (the
                default), ``"pause"`` or ``"keep"``.
            api_url, api_key, client: which server (see :class:`Client`).
        """
        c = _client_for(client, api_url, api_key)
        body: Dict[str, Any] = {}
        for k, v in (
            ("image", image),
            ("template", template),
            ("name", name),
            ("cpus", cpus),
            ("memory_mb", memory_mb),
            ("disk_mb", disk_mb),
            ("checkpoint_interval_s", checkpoint_interval_s),
        ):
            if v is not None:
                body[k] = v
        if snapshot is not None:
            body["snapshot"] = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        if env:
            body["env"] = dict(env)
        if metadata:
            body["metadata"] = dict(metadata)
        if network is not None:
            if isinstance(network, Mapping):
                body["network"] = dict(network)
            else:
                body["network"] = {"egress": network if isinstance(network, str) else list(network)}
        if volumes:
            body["volumes"] = [_volume_mount(v) for v in volumes]
        if idle is not None:
            body["idle"] = {"timeout_s": idle, "action": "pause"} if isinstance(idle, int) else dict(idle)
        return cls(c, c.json("POST", "/v1/sandboxes", body), on_exit=on_exit)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        on_exit: str = "keep",
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "Sandbox":
        """Returns an existing sandbox by id, resumed if it was
        paused, so it is ready for commands. ``on_exit`` defaults to
        ``"keep"``: leaving a ``with`` block leaves it running."""
        sb = cls.get(sandbox_id, on_exit=on_exit, api_url=api_url, api_key=api_key, client=client)
        if sb.state == "paused":
            sb.resume()
        return sb

    @classmethod
    def get(
        cls,
        sandbox_id: str,
        *,
        on_exit: str = "keep",
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "Sandbox":
        """Returns an existing sandbox as it is (paused ones stay paused)."""
        c = _client_for(client, api_url, api_key)
        return cls(c, c.json("GET", "/v1/sandboxes/" + _q(sandbox_id)), on_exit=on_exit)

    @classmethod
    def list(
        cls,
        *,
        state: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> List["Sandbox"]:
        """Lists your sandboxes, those in ``state`` and with all of
        ``metadata`` when given."""
        c = _client_for(client, api_url, api_key)
        q: Dict[str, Any] = {"state": state}
        for k, v in (metadata or {}).items():
            q["metadata." + k] = v
        out = c.json("GET", "/v1/sandboxes", query=q)
        return [cls(c, d, on_exit="keep") for d in out.get("sandboxes") or []]

    # -- what it is ------------------------------------------------------

    @property
    def client(self) -> Client:
        """The client this sandbox talks through."""
        return self._client

    @property
    def info(self) -> Dict[str, Any]:
        """The API's Sandbox object, as of the last call that returned it."""
        return dict(self._data)

    @property
    def id(self) -> str:
        return self._data["id"]

    @property
    def name(self) -> str:
        return self._data.get("name") or ""

    @property
    def state(self) -> str:
        """``"creating"``, ``"running"``, ``"paused"`` or ``"error"``."""
        return self._data.get("state") or ""

    @property
    def error(self) -> str:
        """Why a sandbox is in state ``"error"``."""
        return self._data.get("error") or ""

    @property
    def image(self) -> str:
        return self._data.get("image") or ""

    @property
    def template(self) -> str:
        return self._data.get("template") or ""

    @property
    def from_snapshot(self) -> str:
        return self._data.get("from_snapshot") or ""

    @property
    def created_at(self) -> Optional[datetime]:
        return parse_time(self._data.get("created_at"))

    @property
    def cpus(self) -> float:
        return self._data.get("cpus") or 0.0

    @property
    def memory_mb(self) -> int:
        return self._data.get("memory_mb") or 0

    @property
    def disk_mb(self) -> int:
        return self._data.get("disk_mb") or 0

    @property
    def env(self) -> Dict[str, str]:
        return dict(self._data.get("env") or {})

    @property
    def metadata(self) -> Dict[str, str]:
        return dict(self._data.get("metadata") or {})

    @property
    def network(self) -> Dict[str, Any]:
        return dict(self._data.get("network") or {})

    @property
    def volumes(self) -> List[Dict[str, Any]]:
        return [dict(v) for v in self._data.get("volumes") or []]

    @property
    def idle(self) -> Dict[str, Any]:
        return dict(self._data.get("idle") or {})

    @property
    def checkpoint_interval_s(self) -> int:
        return self._data.get("checkpoint_interval_s") or 0

    @property
    def last_checkpoint_at(self) -> Optional[datetime]:
        return parse_time(self._data.get("last_checkpoint_at"))

    def __repr__(self) -> str:
        return "Sandbox(id=%r, state=%r)" % (self._data.get("id"), self.state)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id and other.client.api_url == self.client.api_url

    def __hash__(self) -> int:
        return hash(self.id)

    def _path(self, rest: str = "") -> str:
        return "/v1/sandboxes/" + _q(self.id) + rest

    def _set(self, data: Mapping[str, Any]) -> "Sandbox":
        self._data = dict(data)
        return self

    # -- lifecycle -------------------------------------------------------

    def refresh(self) -> "Sandbox":
        """Reads the sandbox's state again."""
        return self._set(self._client.json("GET", self._path()))

    def pause(self) -> "Sandbox":
        """Freezes the sandbox: every process stops where it is and costs no
        CPU; its memory is kept (and, after a while, stored to disk).
        :meth:`resume` takes about 100 ms from memory."""
        return self._set(self._client.json("POST", self._path("/pause")))

    def resume(self) -> "Sandbox":
        """Brings a paused sandbox back: every process carries on as it was."""
        return self._set(self._client.json("POST", self._path("/resume")))

    def delete(self) -> None:
        """Deletes the sandbox and everything in it (volumes stay). Deleting
        one that is already gone is not an error."""
        try:
            self._client.call("DELETE", self._path())
        except NotFoundError:
            pass

    kill = delete

    def snapshot(self, name: Optional[str] = None) -> "Snapshot":
        """Saves the sandbox's memory, processes and disk while it keeps
        running. Revert to it, or start new sandboxes from it."""
        body = {"name": name} if name else {}
        return Snapshot(self._client, self._client.json("POST", self._path("/snapshots"), body))

    def snapshots(self) -> List["Snapshot"]:
        """This sandbox's snapshots (manual ones and checkpoints)."""
        return Snapshot.list(sandbox=self.id, client=self._client)

    def revert(self, snapshot: Union["Snapshot", str]) -> "Sandbox":
        """Returns the sandbox to a snapshot of it: memory, processes and
        disk as they were then; same id. What happened since is lost."""
        sid = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        return self._set(self._client.json("POST", self._path("/revert"), {"snapshot": sid}))

    def fork(self, count: int = 1) -> List["Sandbox"]:
        """Snapshots the sandbox now and starts ``count`` copies of it, each
        with the same memory, processes and files. The copies are new
        sandboxes (deleted at the end of a ``with`` block of their own)."""
        out = self._client.json("POST", self._path("/fork"), {"count": count})
        return [Sandbox(self._client, d) for d in out.get("sandboxes") or []]

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.on_exit == "delete":
            self.delete()
        elif self.on_exit == "pause":
            self.pause()

    # -- commands --------------------------------------------------------

    def exec(
        self,
        cmd: Optional[Command] = None,
        *,
        command: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        shell: Optional[str] = None,
        on_stdout: Optional[OnOutput] = None,
        on_stderr: Optional[OnOutput] = None,
    ) -> ExecResult:
        """Runs a command to completion and returns its exit code and output.

        ``cmd`` is a string run by ``/bin/sh -c`` (as is ``command=``), or
        an argv list run as is. A non-zero exit is not an exception: look at
        ``exit_code`` (or ``ok``).

        Args:
            cwd: the working directory.
            env: extra environment variables.
            stdin: what the command reads on stdin (text).
            timeout: seconds; the command is killed then and exits 124 with
                ``timed_out``.
            shell: run the command in this named shell (see :meth:`shell`).
            on_stdout, on_stderr: called with each piece of output as the
                command writes it (the output is streamed); the result holds
                all of it too.
        """
        body = _command_body(cmd, command, cwd, env, stdin, timeout)
        if shell:
            body["shell"] = shell
        if on_stdout is None and on_stderr is None:
            data = self._client.json("POST", self._path("/exec"), body, timeout=None)
            return ExecResult.from_json(data)
        start = time.monotonic()
        out: List[str] = []
        err: List[str] = []
        with self._stream(body) as st:
            for ev in st:
                if ev.stream == "stdout":
                    out.append(ev.data)
                    if on_stdout is not None:
                        on_stdout(ev.data)
                else:
                    err.append(ev.data)
                    if on_stderr is not None:
                        on_stderr(ev.data)
        return ExecResult(
            exit_code=st.exit_code if st.exit_code is not None else -1,
            stdout="".join(out),
            stderr="".join(err),
            duration_ms=int((time.monotonic() - start) * 1000),
            timed_out=st.timed_out,
        )

    def exec_stream(
        self,
        cmd: Optional[Command] = None,
        *,
        command: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        shell: Optional[str] = None,
    ) -> "ExecStream":
        """Starts a command and returns its output as an iterator of
        :class:`~warren.models.OutputEvent`; ``exit_code`` is set once the
        iteration ends. Closing the stream early kills the command::

            with sb.exec_stream("make -j2") as st:
                for ev in st:
                    print(ev.stream, ev.data, end="")
            print(st.exit_code)
        """
        body = _command_body(cmd, command, cwd, env, stdin, timeout)
        if shell:
            body["shell"] = shell
        return self._stream(body)

    def _stream(self, body: Dict[str, Any]) -> "ExecStream":
        conn, resp = self._client.open(
            "POST",
            self._path("/exec"),
            json_body=body,
            headers={"Accept": "application/x-ndjson"},
            timeout=None,
        )
        return ExecStream(self._client, conn, resp, self.id)

    def shell(
        self, name: str = "default", *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None
    ) -> "Shell":
        """Returns the named shell, starting it if it does not exist yet.

        A named shell is a long-lived bash: ``cd``, exported variables,
        functions and ``&`` jobs persist from one :meth:`Shell.run` to the
        next, and across pause, resume and fork. ``cwd`` and ``env`` apply
        when the shell is started.
        """
        body: Dict[str, Any] = {"name": name}
        if cwd:
            body["cwd"] = cwd
        if env:
            body["env"] = dict(env)
        try:
            self._client.json("POST", self._path("/shells"), body)
        except ConflictError:
            if name not in [s.name for s in self.shells()]:
                raise
        return Shell(self, name)

    def shells(self) -> List[ShellInfo]:
        """The sandbox's named shells."""
        out = self._client.json("GET", self._path("/shells"))
        return [ShellInfo.from_json(d) for d in out.get("shells") or []]

    def run_code(
        self,
        code: str,
        *,
        language: Optional[str] = None,
        context: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> CodeResult:
        """Runs code in a persistent interpreter, like a notebook cell:
        variables and imports persist within a context (``"default"`` when
        none is named). ``result`` is the repr of the last expression; an
        exception in the code is ``error``, not raised.

        Args:
            language: ``"python"`` (the default).
            context: the code context to run in (made on first use).
            timeout: seconds, after which the code is interrupted
                (KeyboardInterrupt); the context keeps its state.
        """
        body: Dict[str, Any] = {"code": code}
        if language:
            body["language"] = language
        if context:
            body["context"] = context
        if timeout:
            body["timeout_s"] = timeout
        return CodeResult.from_json(self._client.json("POST", self._path("/code"), body, timeout=None))

    def code_context(
        self,
        name: str,
        *,
        language: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> "CodeContext":
        """Returns the named code context, starting it if it does not exist."""
        body: Dict[str, Any] = {"name": name}
        if language:
            body["language"] = language
        if cwd:
            body["cwd"] = cwd
        if env:
            body["env"] = dict(env)
        try:
            self._client.json("POST", self._path("/code/contexts"), body)
        except ConflictError:
            if name not in [c.name for c in self.code_contexts()]:
                raise
        return CodeContext(self, name)

    def code_contexts(self) -> List[CodeContextInfo]:
        """The sandbox's code contexts."""
        out = self._client.json("GET", self._path("/code/contexts"))
        return [CodeContextInfo.from_json(d) for d in out.get("contexts") or []]


def _volume_mount(v: Union[Mapping[str, Any], Tuple[Any, ...]]) -> Dict[str, Any]:
    if isinstance(v, Mapping):
        m = dict(v)
        if isinstance(m.get("volume"), Volume):
            m["volume"] = m["volume"].name
        return m
    vol, path = v[0], v[1]
    m = {"volume": vol.name if isinstance(vol, Volume) else vol, "path": path}
    if len(v) > 2 and v[2]:
        m["read_only"] = True
    return m


class ExecStream:
    """The output of a running command, as an iterator of
    :class:`~warren.models.OutputEvent`. ``exit_code`` and ``timed_out`` are
    set once it is exhausted. Closing it before kills the command."""

    def __init__(
        self, client: Client, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, sandbox_id: str
    ) -> None:
        self._client = client
        self._conn = conn
        self._lines = iter_lines(client, resp)
        self._sandbox_id = sandbox_id
        self.exit_code: Optional[int] = None
        self.timed_out = False

    def __iter__(self) -> Iterator[OutputEvent]:
        return self

    def __next__(self) -> OutputEvent:
        for ev in self._lines:
            if ev.get("error"):
                self.close()
                raise InternalError("sandbox %s: exec: %s" % (self._sandbox_id, ev["error"]), status=200)
            if ev.get("stdout") is not None:
                return OutputEvent("stdout", ev["stdout"])
            if ev.get("stderr") is not None:
                return OutputEvent("stderr", ev["stderr"])
            if ev.get("exit_code") is not None:
                self.exit_code = ev["exit_code"]
                self.timed_out = bool(ev.get("timed_out"))
                self.close()
                raise StopIteration
        self.close()
        if self.exit_code is None:
            raise WarrenError(
                "sandbox %s: the exec stream ended without an exit code" % self._sandbox_id,
                code="unavailable",
            )
        raise StopIteration

    def wait(self) -> ExecResult:
        """Reads the rest of the output and returns the result."""
        out: List[str] = []
        err: List[str] = []
        for ev in self:
            (out if ev.stream == "stdout" else err).append(ev.data)
        return ExecResult(
            exit_code=self.exit_code if self.exit_code is not None else -1,
            stdout="".join(out),
            stderr="".join(err),
            timed_out=self.timed_out,
        )

    def close(self) -> None:
        """Ends the stream; a command still running is killed."""
        self._conn.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Shell:
    """A named, long-lived shell in a sandbox (see :meth:`Sandbox.shell`)."""

    def __init__(self, sandbox: Sandbox, name: str) -> None:
        self.sandbox = sandbox
        self.name = name

    def __repr__(self) -> str:
        return "Shell(sandbox=%r, name=%r)" % (self.sandbox.id, self.name)

    def run(
        self,
        command: Command,
        *,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[OnOutput] = None,
        on_stderr: Optional[OnOutput] = None,
    ) -> ExecResult:
        """Runs one command line in the shell. ``cwd`` changes the shell's
        directory (as ``cd`` would); ``env`` applies to this call only; a
        timeout interrupts the command (as ^C would) and the shell lives on.
        Calls to one shell run one at a time."""
        return self.sandbox.exec(
            command,
            cwd=cwd,
            env=env,
            stdin=stdin,
            timeout=timeout,
            shell=self.name,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
        )

    def info(self) -> ShellInfo:
        """The shell as the server describes it."""
        for s in self.sandbox.shells():
            if s.name == self.name:
                return s
        raise NotFoundError("sandbox %s has no shell %r" % (self.sandbox.id, self.name), status=404)

    def close(self) -> None:
        """Kills the shell and what runs in it."""
        self.sandbox.client.call("DELETE", self.sandbox._path("/shells/" + _q(self.name)))

    def __enter__(self) -> "Shell":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class CodeContext:
    """A persistent interpreter in a sandbox (see :meth:`Sandbox.code_context`)."""

    def __init__(self, sandbox: Sandbox, name: str) -> None:
        self.sandbox = sandbox
        self.name = name

    def __repr__(self) -> str:
        return "CodeContext(sandbox=%r, name=%r)" % (self.sandbox.id, self.name)

    def run(self, code: str, *, timeout: Optional[float] = None) -> CodeResult:
        """Runs code in this context (see :meth:`Sandbox.run_code`)."""
        return self.sandbox.run_code(code, context=self.name, timeout=timeout)

    def restart(self) -> CodeContextInfo:
        """Gives the context a fresh interpreter: its state is gone."""
        path = self.sandbox._path("/code/contexts/" + _q(self.name) + "/restart")
        return CodeContextInfo.from_json(self.sandbox.client.json("POST", path))

    def delete(self) -> None:
        """Ends the context."""
        self.sandbox.client.call("DELETE", self.sandbox._path("/code/contexts/" + _q(self.name)))


class Files:
    """The files of a sandbox (``sb.files``). Paths are absolute."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _call(self, method: str, rest: str, **kw: Any) -> Tuple[int, Dict[str, str], bytes]:
        return self._sb.client.call(method, self._sb._path(rest), **kw)

    def read(self, path: str) -> bytes:
        """The file's bytes."""
        return self._call("GET", "/files", query={"path": path})[2]

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file's text."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: Union[bytes, str, BinaryIO], *, mode: Optional[int] = None) -> FileEntry:
        """Writes a file (text is written as UTF-8), creating its parent
        directories. ``mode`` (like ``0o755``) sets its permissions; without
        it an existing file keeps its mode and a new one is 0644."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        q: Dict[str, Any] = {"path": path}
        if mode is not None:
            q["mode"] = "0%o" % mode
        headers = {"Content-Type": "application/octet-stream"}
        if not isinstance(data, (bytes, bytearray)):
            data = data.read()
        _, _, out = self._call("PUT", "/files", query=q, body=bytes(data), headers=headers)
        return FileEntry.from_json(_loads(out))

    def list(self, path: str = "/", *, depth: int = 1) -> List[FileEntry]:
        """The entries of a directory, down to ``depth`` levels."""
        _, _, out = self._call("GET", "/files/list", query={"path": path, "depth": max(depth, 1)})
        return [FileEntry.from_json(d) for d in _loads(out).get("entries") or []]

    def stat(self, path: str) -> FileEntry:
        """Describes one path (a symlink as itself, not followed)."""
        return FileEntry.from_json(_loads(self._call("GET", "/files/stat", query={"path": path})[2]))

    def exists(self, path: str) -> bool:
        """Whether the path exists."""
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Deletes a file, or a directory and all it holds with ``recursive``."""
        q: Dict[str, Any] = {"path": path}
        if recursive:
            q["recursive"] = True
        self._call("DELETE", "/files", query=q)

    def upload_dir(self, local_dir: str, remote_dir: str) -> ArchiveResult:
        """Copies a local directory into ``remote_dir`` (created if missing;
        files of the same names there are replaced)."""
        if not os.path.isdir(local_dir):
            raise ValueError("%s is not a directory" % local_dir)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for entry in sorted(os.listdir(local_dir)):
                tf.add(os.path.join(local_dir, entry), arcname=entry)
        _, _, out = self._call(
            "PUT",
            "/files/archive",
            query={"path": remote_dir},
            body=buf.getvalue(),
            headers={"Content-Type": "application/x-tar"},
        )
        return ArchiveResult.from_json(_loads(out))

    def download_dir(self, remote_dir: str, local_dir: str) -> ArchiveResult:
        """Copies the sandbox's ``remote_dir`` into a local directory
        (created if missing)."""
        _, _, data = self._call("GET", "/files/archive", query={"path": remote_dir})
        os.makedirs(local_dir, exist_ok=True)
        entries = 0
        size = 0
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
            members = tf.getmembers()
            root = os.path.realpath(local_dir)
            for m in members:
                dest = os.path.realpath(os.path.join(root, m.name))
                if dest != root and not dest.startswith(root + os.sep):
                    raise WarrenError("archive entry %r would land outside %s" % (m.name, local_dir))
                entries += 1
                size += m.size if m.isfile() else 0
            if hasattr(tarfile, "data_filter"):
                tf.extractall(root, members=members, filter="data")
            else:  # Python before 3.12 (and its backports)
                tf.extractall(root, members=members)
        return ArchiveResult(path=local_dir, entries=entries, bytes=size)


class Jobs:
    """Background jobs of a sandbox (``sb.jobs``): commands that keep
    running whatever the client does. Their output is kept inside the
    sandbox, so it stays readable after the client goes away, across pause
    and resume, and in forks."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def _path(self, job: Union[Job, str], rest: str = "") -> str:
        jid = job.id if isinstance(job, Job) else job
        return self._sb._path("/jobs/" + _q(jid) + rest)

    def start(
        self,
        cmd: Optional[Command] = None,
        *,
        command: Optional[str] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
    ) -> Job:
        """Starts a command in the background and returns its job at once.
        Its stdin stays open for :meth:`write_stdin` unless ``stdin`` is
        given; ``timeout`` kills it after that many seconds."""
        body = _command_body(cmd, command, cwd, env, stdin, timeout)
        body["background"] = True
        return Job.from_json(self._sb.client.json("POST", self._sb._path("/exec"), body))

    def get(self, job: Union[Job, str]) -> Job:
        """The job now."""
        return Job.from_json(self._sb.client.json("GET", self._path(job)))

    def list(self) -> List[Job]:
        """The sandbox's jobs, oldest first."""
        out = self._sb.client.json("GET", self._sb._path("/jobs"))
        return [Job.from_json(d) for d in out.get("jobs") or []]

    def output_bytes(self, job: Union[Job, str], *, stream: str = "stdout", offset: int = 0) -> bytes:
        """The job's output so far, from byte ``offset`` of ``stream``
        (``"stdout"`` or ``"stderr"``), binary intact."""
        q = {"stream": stream, "offset": offset or None}
        return self._sb.client.call("GET", self._path(job, "/output"), query=q)[2]

    def output(self, job: Union[Job, str], *, stream: str = "stdout", offset: int = 0) -> str:
        """The job's output so far as text (see :meth:`output_bytes`)."""
        return self.output_bytes(job, stream=stream, offset=offset).decode("utf-8", "replace")

    def follow(self, job: Union[Job, str], *, stream: str = "stdout", offset: int = 0) -> Iterator[bytes]:
        """Yields the job's output as it is written, until the job has ended
        and all of it has been read."""
        q = {"stream": stream, "offset": offset or None, "follow": True}
        conn, resp = self._sb.client.open("GET", self._path(job, "/output"), query=q, timeout=None)
        try:
            while True:
                try:
                    chunk = resp.read1(65536)
                except (OSError, http.client.HTTPException) as e:
                    raise self._sb.client.unreachable(e) from None
                if not chunk:
                    return
                yield chunk
        finally:
            conn.close()

    def wait(self, job: Union[Job, str], *, timeout: Optional[float] = None) -> Job:
        """Waits for the job to end and returns it. Raises TimeoutError
        after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.05
        while True:
            j = self.get(job)
            if not j.running:
                return j
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("job %s still running after %ss" % (j.id, timeout))
            time.sleep(delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 1.0)

    def kill(self, job: Union[Job, str], signal: Optional[str] = None) -> Job:
        """Sends a signal (``"TERM"`` by default, ``"KILL"``, ``"9"``) to the
        job and everything it started."""
        body = {"signal": signal} if signal else {}
        return Job.from_json(self._sb.client.json("POST", self._path(job, "/kill"), body))

    def write_stdin(self, job: Union[Job, str], data: Union[bytes, str], *, close: bool = False) -> Job:
        """Writes to the job's stdin, then closes it with ``close``."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        _, _, out = self._sb.client.call(
            "POST",
            self._path(job, "/stdin"),
            query={"close": True if close else None},
            body=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        return Job.from_json(_loads(out))

    def delete(self, job: Union[Job, str]) -> None:
        """Forgets an ended job and removes its output."""
        self._sb.client.call("DELETE", self._path(job))


class Snapshot:
    """An immutable save point of a sandbox: memory, processes and disk.
    Revert a sandbox to it (:meth:`Sandbox.revert`), or start new sandboxes
    from it (:meth:`fork`, or ``Sandbox.create(snapshot=...)``)."""

    def __init__(self, client: Client, data: Mapping[str, Any]) -> None:
        self._client = client
        self._data = dict(data)

    @property
    def info(self) -> Dict[str, Any]:
        """The API's Snapshot object."""
        return dict(self._data)

    @property
    def id(self) -> str:
        return self._data["id"]

    @property
    def name(self) -> str:
        return self._data.get("name") or ""

    @property
    def sandbox_id(self) -> str:
        return self._data.get("sandbox_id") or ""

    @property
    def parent_id(self) -> str:
        return self._data.get("parent_id") or ""

    @property
    def kind(self) -> str:
        """``"manual"``, ``"checkpoint"`` or ``"template"``."""
        return self._data.get("kind") or ""

    @property
    def created_at(self) -> Optional[datetime]:
        return parse_time(self._data.get("created_at"))

    @property
    def size_bytes(self) -> int:
        return self._data.get("size_bytes") or 0

    def __repr__(self) -> str:
        return "Snapshot(id=%r, sandbox_id=%r, kind=%r)" % (self.id, self.sandbox_id, self.kind)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Snapshot) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    @classmethod
    def get(
        cls,
        snapshot_id: str,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "Snapshot":
        """Returns a snapshot by id."""
        c = _client_for(client, api_url, api_key)
        return cls(c, c.json("GET", "/v1/snapshots/" + _q(snapshot_id)))

    @classmethod
    def list(
        cls,
        *,
        sandbox: Union[Sandbox, str, None] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> List["Snapshot"]:
        """Lists your snapshots, of one sandbox when ``sandbox`` is given."""
        c = _client_for(client, api_url, api_key)
        sid = sandbox.id if isinstance(sandbox, Sandbox) else sandbox
        out = c.json("GET", "/v1/snapshots", query={"sandbox": sid})
        return [cls(c, d) for d in out.get("snapshots") or []]

    def fork(self, count: int = 1) -> List[Sandbox]:
        """Starts ``count`` new sandboxes from this snapshot."""
        out = self._client.json("POST", "/v1/snapshots/" + _q(self.id) + "/fork", {"count": count})
        return [Sandbox(self._client, d) for d in out.get("sandboxes") or []]

    def delete(self) -> None:
        """Deletes the snapshot."""
        self._client.call("DELETE", "/v1/snapshots/" + _q(self.id))


class Volume:
    """A named, persistent disk that outlives sandboxes. Mount it at create:
    ``Sandbox.create(volumes=[(vol, "/data")])``."""

    def __init__(self, client: Client, data: Mapping[str, Any]) -> None:
        self._client = client
        self._data = dict(data)

    @property
    def info(self) -> Dict[str, Any]:
        """The API's Volume object."""
        return dict(self._data)

    @property
    def name(self) -> str:
        return self._data["name"]

    @property
    def size_mb(self) -> int:
        return self._data.get("size_mb") or 0

    @property
    def created_at(self) -> Optional[datetime]:
        return parse_time(self._data.get("created_at"))

    @property
    def used_bytes(self) -> int:
        """What its filesystem holds, as of the last call that returned it."""
        return self._data.get("used_bytes") or 0

    @property
    def available_bytes(self) -> int:
        return self._data.get("available_bytes") or 0

    @property
    def used_by(self) -> List[str]:
        """The ids of the sandboxes that mount it."""
        return list(self._data.get("used_by") or [])

    def refresh(self) -> "Volume":
        """Reads the volume again."""
        self._data = dict(self._client.json("GET", "/v1/volumes/" + _q(self.name)))
        return self

    def __repr__(self) -> str:
        return "Volume(name=%r)" % self._data.get("name")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Volume) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    @classmethod
    def create(
        cls,
        name: str,
        *,
        size_mb: Optional[int] = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "Volume":
        """Creates a volume."""
        c = _client_for(client, api_url, api_key)
        body: Dict[str, Any] = {"name": name}
        if size_mb is not None:
            body["size_mb"] = size_mb
        return cls(c, c.json("POST", "/v1/volumes", body))

    @classmethod
    def get(
        cls,
        name: str,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> "Volume":
        """Returns a volume by name."""
        c = _client_for(client, api_url, api_key)
        return cls(c, c.json("GET", "/v1/volumes/" + _q(name)))

    @classmethod
    def list(
        cls,
        *,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        client: Optional[Client] = None,
    ) -> List["Volume"]:
        """Lists your volumes."""
        c = _client_for(client, api_url, api_key)
        out = c.json("GET", "/v1/volumes")
        return [cls(c, d) for d in out.get("volumes") or []]

    def delete(self) -> None:
        """Deletes the volume and its data; a ConflictError while a sandbox
        uses it."""
        self._client.call("DELETE", "/v1/volumes/" + _q(self.name))


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data) if data else {}
    except ValueError as e:
        raise WarrenError("decoding an answer: %s" % e, status=200) from None
