"""One build at a time per EHRXQA_HOME: an advisory lock (``fcntl.flock``) on ``EHRXQA_HOME/build.lock``.

The kernel releases the lock when the process ends, however it ends (exit, exception, SIGKILL), so a lock
file left by a killed build never blocks the next one; its content (pid, host, start time, command) only
names the holder in the refusal, and tells the next build that the previous one did not finish.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

LOCK_NAME = "build.lock"
BUSY_EXIT = 75  # EX_TEMPFAIL: try again later


class BuildLocked(RuntimeError):
    """Another build holds the lock of this EHRXQA_HOME; the message names its pid."""


class BuildLock:
    def __init__(self, home: Path):
        self.path = Path(home) / LOCK_NAME
        self._fd: int | None = None
        self.previous: dict | None = None  # the record of a build that ended without releasing (killed)

    def acquire(self) -> BuildLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            who = (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}: "
                   f"{holder.get('command')}") if holder else "pid unknown"
            raise BuildLocked(f"another ehrxqa build is running on EHRXQA_HOME={self.path.parent} ({who}); "
                              f"wait for it to end, or stop it (kill {holder.get('pid', 'PID')}), then build "
                              f"again (lock: {self.path})") from None
        self.previous = _read(fd) or None  # a record left behind: that build did not end normally
        record = {"pid": os.getpid(), "host": socket.gethostname(),
                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "command": " ".join(["ehrxqa", *sys.argv[1:]])[:200]}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)  # an empty file: the build ended (a killed one leaves its record)
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> BuildLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0).decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return {}
