"""The embedded default's broker: kombu's filesystem transport with atomic messages.

kombu's own filesystem transport writes a message in place, in the folder readers list, and
readers move it with `shutil.move` to the system temp folder (a copy when that is another
file system). A reader can therefore see a file that is empty or half written, and the
worker dies on `JSONDecodeError` (docs/decisions.md, "Embedded broker"). Here:

- a writer writes the message under a temporary name in a folder readers never list, then
  renames it into the queue folder: a reader sees a whole message or none;
- a reader renames the message into its own folder on the same file system: exactly one
  reader wins, the others get FileNotFoundError and look at the next file;
- a file that still cannot be decoded (a disk error, a hand edit) is moved aside to `bad/`
  and logged, never fatal to the worker.

Messages a killed worker had taken are gone with it, as with any transport without
acknowledgements; the sample's lease expires and the dispatcher claims it again.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

ALIAS = "geofs"


class Channel(filesystem.Channel):
    @property
    def _root(self) -> Path:
        return Path(self.data_folder_in).parent

    def _folder(self, name: str) -> Path:
        folder = self._root / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # kombu's two base classes name the argument differently (payload / message).
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{int(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        tmp = self._folder("tmp") / name
        tmp.write_bytes(dumps(payload).encode())
        os.replace(tmp, Path(self.data_folder_out) / name)

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        wanted = f"{queue}.msg"
        taken = self._folder("taken")
        for name in sorted(os.listdir(self.data_folder_in)):
            if name.partition(".")[2] != wanted:
                continue
            mine = taken / f"{os.getpid()}-{name}"
            try:
                os.replace(Path(self.data_folder_in) / name, mine)
            except FileNotFoundError:
                continue  # another consumer took it first
            body = mine.read_bytes()
            try:
                message = loads(body.decode())
            except (UnicodeDecodeError, json.JSONDecodeError):
                os.replace(mine, self._folder("bad") / name)
                log.error("broker: undecodable message %s moved to bad/", name)
                continue
            mine.unlink()
            return message
        raise Empty()


class Transport(filesystem.Transport):
    Channel = Channel


TRANSPORT_ALIASES[ALIAS] = f"{__name__}:Transport"
