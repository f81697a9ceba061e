"""prometheus_client's multiprocess files, allocated for real before they are mapped, so a full
filesystem under PROMETHEUS_MULTIPROC_DIR costs metrics, never the process.

The library creates each file, and doubles it when a new series needs room, with `truncate`
(prometheus_client/mmap_dict.py, `MmapedDict.__init__` and `_init_value`): a sparse file whose
blocks are allocated only when a page is first written through the mmap. On a full filesystem
that write cannot be allocated and the kernel sends SIGBUS: the process dies without a log line.
Here each file, and each growth, is allocated with `posix_fallocate` before the library maps
it; on a full filesystem that raises ENOSPC instead, and the series that needed the room is
not recorded (logged once, counted in `geo_metrics_unrecorded`), while series that already
have their room go on being recorded. Once room is found again recording resumes.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import mmap_dict, values

log = logging.getLogger(__name__)

RETRY_SECONDS = 30.0  # after a failed allocation, new series wait this long before trying again
_INITIAL_SIZE = mmap_dict._INITIAL_MMAP_SIZE

_state = {"logged": False, "unrecorded": 0}
on_unrecorded: list[Callable[[], None]] = []  # geo_collect.metrics counts it


class _Unrecorded:
    """Stands in for a metrics file there was no room to create: nothing is recorded."""

    def read_value(self, key: str) -> tuple[float, float]:
        return 0.0, 0.0

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        pass

    def read_all_values(self) -> Iterator[tuple[str, float, float]]:
        return iter(())

    def close(self) -> None:
        pass


class AllocatedMmapedDict(mmap_dict.MmapedDict):
    """A MmapedDict whose file's blocks are all allocated before they are written."""

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if not read_mode:
            _allocate(filename)
        super().__init__(filename, read_mode)
        self._no_room_until = -1.0

    def read_value(self, key: str) -> tuple[float, float]:
        if key not in self._positions and not self._room_for(key):
            return 0.0, 0.0
        value: tuple[float, float] = super().read_value(key)
        return value

    def write_value(self, key: str, value: float, timestamp: float) -> None:
        if key not in self._positions and not self._room_for(key):
            return
        super().write_value(key, value, timestamp)

    def _room_for(self, key: str) -> bool:
        """Allocate what the library's `_init_value` will grow the file to (it doubles)."""
        if time.monotonic() < self._no_room_until:
            _unrecorded(None, self._fname)
            return False
        encoded = len(key.encode("utf-8"))
        entry = 4 + encoded + (8 - (encoded + 4) % 8) + 16
        capacity = self._capacity
        while self._used + entry > capacity:
            capacity *= 2
        if capacity == self._capacity:
            return True
        try:
            os.posix_fallocate(self._f.fileno(), 0, capacity)
        except OSError as error:
            self._no_room_until = time.monotonic() + RETRY_SECONDS
            _unrecorded(error, self._fname)
            return False
        return True


def _allocate(filename: str) -> None:
    """The file's blocks, all of them (a file left sparse by an older process too)."""
    fd = os.open(filename, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            os.posix_fallocate(fd, 0, max(size, _INITIAL_SIZE))
        except OSError:
            if os.fstat(fd).st_size == 0:  # an empty file would break the /metrics reader
                os.unlink(filename)
            raise
    finally:
        os.close(fd)


def _open(filename: str, read_mode: bool = False) -> Any:
    try:
        return AllocatedMmapedDict(filename, read_mode)
    except OSError as error:
        _unrecorded(error, filename)
        return _Unrecorded()


def _unrecorded(error: OSError | None, filename: str) -> None:
    _state["unrecorded"] += 1
    if _state["logged"] or error is None:
        return
    _state["logged"] = True
    log.error(
        "metrics not recorded: no room for %s (%s); this process goes on without the new "
        "series until there is room again (logged once)",
        filename,
        error,
    )
    # Counted from another thread: the caller holds prometheus_client's (non-reentrant) lock.
    for count in on_unrecorded:
        threading.Thread(target=count, name="metrics-unrecorded", daemon=True).start()


def unrecorded_count() -> int:
    """Series writes this process could not record (for tests and logs)."""
    return _state["unrecorded"]


def preallocate() -> None:
    """Make prometheus_client open its multiprocess files through AllocatedMmapedDict. Called
    by geo_collect.metrics before it declares the first family."""
    values.MmapedDict = _open  # type: ignore[misc,assignment]
