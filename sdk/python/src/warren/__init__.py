"""Warren's Python SDK: persistent gVisor sandboxes for AI agents.

Standard library only. The server and key come from ``WARREN_API_URL`` and
``WARREN_API_KEY`` (or the local admin key file), or from ``api_url=`` and
``api_key=``::

    from warren import Sandbox

    with Sandbox.create() as sb:
        print(sb.exec("echo hello").stdout)
        sb.files.write("/work/x.py", "print(6 * 7)")
        print(sb.exec(["python3", "/work/x.py"]).stdout)
"""

from ._client import DEFAULT_KEY_FILE, DEFAULT_URL, Client
from .errors import (
    ConflictError,
    ForbiddenError,
    InternalError,
    InvalidError,
    NotFoundError,
    QuotaError,
    UnauthorizedError,
    UnavailableError,
    WarrenError,
)
from .models import (
    ArchiveResult,
    CodeContextInfo,
    CodeError,
    CodeResult,
    ExecResult,
    FileEntry,
    Job,
    OutputEvent,
    ShellInfo,
)
from .sandbox import CodeContext, ExecStream, Files, Jobs, Sandbox, Shell, Snapshot, Volume

__version__ = "0.1.0"

__all__ = [
    "Client",
    "DEFAULT_URL",
    "DEFAULT_KEY_FILE",
    "Sandbox",
    "Snapshot",
    "Volume",
    "Shell",
    "CodeContext",
    "Files",
    "Jobs",
    "ExecStream",
    "ExecResult",
    "OutputEvent",
    "Job",
    "ShellInfo",
    "CodeResult",
    "CodeError",
    "CodeContextInfo",
    "FileEntry",
    "ArchiveResult",
    "WarrenError",
    "InvalidError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "QuotaError",
    "UnavailableError",
    "InternalError",
]
