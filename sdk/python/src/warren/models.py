"""Plain result types of the Warren API.

Each is a dataclass built from the API's JSON with :meth:`from_json`, which
ignores fields it does not know, so a newer server does not break an older
SDK. ``raw`` keeps the JSON as it came.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime
from typing import Any, Dict, Mapping, Optional, Type, TypeVar

__all__ = [
    "ExecResult",
    "OutputEvent",
    "Job",
    "ShellInfo",
    "CodeResult",
    "CodeError",
    "CodeContextInfo",
    "FileEntry",
    "ArchiveResult",
    "parse_time",
]

T = TypeVar("T")

_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def parse_time(s: Optional[str]) -> Optional[datetime]:
    """Parses an RFC 3339 time as the API writes it (nanoseconds and ``Z``
    included) into an aware datetime; ``None`` for an empty value."""
    if not s:
        return None
    m = _TIME.match(s)
    if not m:
        raise ValueError("not an RFC 3339 time: %r" % s)
    # fromisoformat before 3.11 takes neither "Z" nor more than 6 digits.
    frac = m.group(2)[:7].ljust(7, "0") if m.group(2) else ""
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(m.group(1) + frac + tz)


def _build(cls: Type[T], data: Mapping[str, Any], **extra: Any) -> T:
    kwargs: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in extra:
            kwargs[f.name] = extra[f.name]
        elif f.name == "raw":
            kwargs["raw"] = dict(data)
        elif f.name in data and data[f.name] is not None:
            v = data[f.name]
            if f.name.endswith("_at") or f.name == "mtime":
                v = parse_time(v)
            kwargs[f.name] = v
    return cls(**kwargs)  # type: ignore[call-arg]


@dataclasses.dataclass
class ExecResult:
    """What a command did: its exit code and output.

    A command killed by signal N exits 128+N; one killed at its timeout
    exits 124 with ``timed_out``. 127 means the command was not found.
    """

    exit_code: int = -1
    stdout: str = ""
    stderr: str = ""
    duration_ms: int = 0
    timed_out: bool = False
    truncated: bool = False
    """Output beyond 16 MiB per stream was dropped (not when streamed)."""

    @property
    def ok(self) -> bool:
        """The command exited 0."""
        return self.exit_code == 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ExecResult":
        return _build(cls, data)


@dataclasses.dataclass
class OutputEvent:
    """One piece of a streamed command's output."""

    stream: str
    """``"stdout"`` or ``"stderr"``."""
    data: str


@dataclasses.dataclass
class Job:
    """A background command (see :class:`~warren.sandbox.Jobs`). It keeps
    running, and its output stays readable, whatever the client does, across
    pause and resume, and is copied into forks."""

    id: str = ""
    command: str = ""
    state: str = ""
    """``"running"``, ``"exited"`` or ``"killed"``."""
    exit_code: Optional[int] = None
    """Set once the job has ended (128+N when signal N ended it)."""
    pid: int = 0
    cwd: str = ""
    signal: str = ""
    timed_out: bool = False
    started_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdin_open: bool = False
    error: str = ""
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def running(self) -> bool:
        """The job has not ended."""
        return self.state == "running"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Job":
        return _build(cls, data)


@dataclasses.dataclass
class ShellInfo:
    """A named shell as the server describes it."""

    name: str = ""
    pid: int = 0
    created_at: Optional[datetime] = None
    calls: int = 0
    busy: bool = False

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ShellInfo":
        return _build(cls, data)


@dataclasses.dataclass
class CodeError:
    """An exception the code raised."""

    name: str = ""
    """The exception's class, ``"ZeroDivisionError"``."""
    value: str = ""
    traceback: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CodeError":
        return _build(cls, data)


@dataclasses.dataclass
class CodeResult:
    """What running code did. An exception in the code is ``error``, not a
    raised exception."""

    stdout: str = ""
    stderr: str = ""
    result: str = ""
    """repr() of the last expression's value; empty when there is none."""
    error: Optional[CodeError] = None
    execution_count: int = 0
    duration_ms: int = 0
    timed_out: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        """The code ran without an exception."""
        return self.error is None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CodeResult":
        err = data.get("error")
        return _build(cls, data, error=CodeError.from_json(err) if err else None)


@dataclasses.dataclass
class CodeContextInfo:
    """A code context (a persistent interpreter) as the server describes it."""

    name: str = ""
    language: str = ""
    cwd: str = ""
    pid: int = 0
    created_at: Optional[datetime] = None
    execution_count: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CodeContextInfo":
        return _build(cls, data)


@dataclasses.dataclass
class FileEntry:
    """A file, directory or symlink inside a sandbox."""

    name: str = ""
    path: str = ""
    type: str = ""
    """``"file"``, ``"dir"``, ``"symlink"`` or ``"other"``."""
    size: int = 0
    mode: str = ""
    """Octal permission bits, ``"0644"``."""
    mtime: Optional[datetime] = None
    target: str = ""
    """Where a symlink points."""

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"

    @property
    def is_file(self) -> bool:
        return self.type == "file"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FileEntry":
        return _build(cls, data)


@dataclasses.dataclass
class ArchiveResult:
    """What a directory copy moved."""

    path: str = ""
    entries: int = 0
    bytes: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ArchiveResult":
        return _build(cls, data)
