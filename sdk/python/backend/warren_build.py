"""A PEP 517 build backend for the Warren SDK, standard library only.

The SDK is pure Python with no dependencies, so building it needs nothing
but zipfile and tarfile. Keeping the backend in tree (``backend-path``)
makes ``pip install ./sdk/python`` work offline, with build isolation, on
any Python 3.8+: setuptools would have to be downloaded into the isolated
build environment, and setuptools before 70.1 also needs the ``wheel``
package, which machines without PyPI access usually lack.

It reads name, version, description and requires-python from
pyproject.toml's ``[project]`` table, and builds:

- a wheel of ``src/warren`` (``py3-none-any``),
- an editable wheel (``pip install -e``): a ``.pth`` file naming ``src``,
- an sdist of the project directory.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "warren"
# Entries of a zip or tar get this time, so builds are reproducible.
EPOCH = (1980, 1, 1, 0, 0, 0)


def _project() -> Dict[str, str]:
    """The string fields of pyproject.toml's [project] table."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    out: Dict[str, str] = {}
    table = ""
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"^\[([^\]]+)\]$", line)
        if m:
            table = m.group(1).strip()
            continue
        m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*"([^"]*)"\s*(#.*)?$', line)
        if table == "project" and m:
            out[m.group(1)] = m.group(2)
    for key in ("name", "version"):
        if key not in out:
            raise RuntimeError("pyproject.toml: [project] has no %s" % key)
    return out


def _dist_name(p: Dict[str, str]) -> str:
    return re.sub(r"[-_.]+", "_", p["name"]).lower() + "-" + p["version"]


def _metadata(p: Dict[str, str]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + p["name"],
        "Version: " + p["version"],
    ]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    lines += [
        "License: Apache-2.0",
        "Classifier: Programming Language :: Python :: 3",
        "Classifier: Typing :: Typed",
        "Description-Content-Type: text/markdown",
    ]
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _package_files() -> List[Tuple[str, str]]:
    """(path in the wheel, path on disk) of every file of the package."""
    src = os.path.join(ROOT, "src")
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(src, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".typed")):
                full = os.path.join(dirpath, name)
                out.append((os.path.relpath(full, src).replace(os.sep, "/"), full))
    return out


def _write_wheel(directory: str, files: List[Tuple[str, bytes]]) -> str:
    p = _project()
    dist = _dist_name(p)
    info = dist + ".dist-info"
    files = list(files) + [
        (info + "/METADATA", _metadata(p).encode()),
        (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: warren_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (info + "/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "/RECORD,,")
    files.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    filename = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files:
            zi = zipfile.ZipInfo(name, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return filename


def build_wheel(
    wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None
) -> str:
    files = []
    for arc, full in _package_files():
        with open(full, "rb") as f:
            files.append((arc, f.read()))
    return _write_wheel(wheel_directory, files)


def build_editable(
    wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None
) -> str:
    p = _project()
    pth = "__editable__." + _dist_name(p) + ".pth"
    return _write_wheel(wheel_directory, [(pth, (os.path.join(ROOT, "src") + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    p = _project()
    dist = _dist_name(p)
    filename = dist + ".tar.gz"

    def add(tf: tarfile.TarFile, arc: str, data: bytes) -> None:
        ti = tarfile.TarInfo(dist + "/" + arc)
        ti.size = len(data)
        ti.mtime = 315532800  # EPOCH, UTC
        ti.mode = 0o644
        tf.addfile(ti, io.BytesIO(data))

    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for top in ("pyproject.toml", "README.md", "backend", "src", "tests"):
            full = os.path.join(ROOT, top)
            if os.path.isfile(full):
                with open(full, "rb") as f:
                    add(tf, top, f.read())
                continue
            for dirpath, dirnames, filenames in os.walk(full):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for name in sorted(filenames):
                    path = os.path.join(dirpath, name)
                    with open(path, "rb") as f:
                        add(tf, os.path.relpath(path, ROOT).replace(os.sep, "/"), f.read())
        add(tf, "PKG-INFO", _metadata(p).encode())
    return filename


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []
