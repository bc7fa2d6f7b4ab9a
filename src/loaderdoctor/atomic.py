"""Files replaced whole: a temporary file beside the target, then a rename (stdlib only).

Every report, quarantine file, checkpoint and state file goes through here, so a reader sees the
old file or the new one, never half of one, and a failure (a full disk, an interrupt, a bug while
writing) leaves the old file whole and no temporary behind. Light enough for the bootstrapped
child of ``loaderdoctor run`` (no torch, no third-party import).
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it, racing threads)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def write_atomically(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` (text is encoded strictly as UTF-8); returns the path.

    A symlink is followed (the file it names is replaced, the link kept), and only a regular file
    is replaced: renaming over ``/dev/null`` as root would replace the device. Missing parent
    folders are made.
    """
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(payload)
        # mkstemp makes 0600; these files are as readable as any the user would create
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException:  # never leave a temporary file, whatever interrupts
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def write_json_atomically(
    path: str | os.PathLike[str], document: Any, *, indent: int | None = None
) -> Path:
    """``document`` as JSON (ASCII: undecodable file-name bytes stay ``\\udcNN`` escapes)."""
    return write_atomically(path, json.dumps(document, indent=indent, default=repr) + "\n")
