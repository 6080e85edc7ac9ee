"""Integrity tags for verdict records: an HMAC that code under judgement cannot compute.

The judge tags every record it writes (the results store's verdicts and reference timings, the
training verdict cache) with HMAC-SHA256 over the record's canonical JSON, under a secret key;
readers (`kernelzero report`, a resumed run, the trainer) check the tag and refuse or flag a
record whose tag does not match: one edited behind the judge's back, or written by someone
without the key.

The key: 32 random bytes in `$KZ_VERDICT_KEY_FILE`, else `$XDG_CONFIG_HOME/kernelzero/verdict.key`
(`~/.config/...`), made on first use (mode 0600 in a 0700 folder). A jailed worker never sees the
home folder, and with a uid of its own could not read the file anyway. Where workers run unjailed
(`isolation: none`), code under judgement runs as the user and can read the key: the tags then
still catch an edit made by anything that does not know it, but not a candidate that looks for
it. The tag says which key made it (an 8-hex-digit id), so a store judged elsewhere reads as
`other_key`, not as tampered.

What a tag does not catch: a record deleted whole (each record is tagged on its own).
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path

SCHEME = "hmac-sha256"
KEY_BYTES = 32
OK, TAMPERED, UNSIGNED, OTHER_KEY = "ok", "tampered", "unsigned", "other_key"


def key_path() -> Path:
    if os.environ.get("KZ_VERDICT_KEY_FILE"):
        return Path(os.environ["KZ_VERDICT_KEY_FILE"])
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "kernelzero" / "verdict.key"


def canonical(record: dict) -> bytes:
    """The bytes a tag covers: the record as JSON with sorted keys and no spaces."""
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


class VerdictKey:
    """The secret key: `tag(record)` makes a tag, `check(record, tag)` says what a tag is worth."""

    def __init__(self, secret: bytes):
        if len(secret) < 16:
            raise ValueError("a verdict key needs at least 16 bytes")
        self._secret = secret
        self.id = hashlib.sha256(b"kernelzero-verdict-key:" + secret).hexdigest()[:8]

    def tag(self, record: dict) -> str:
        mac = hmac.new(self._secret, canonical(record), hashlib.sha256).hexdigest()
        return f"{SCHEME}:{self.id}:{mac}"

    def check(self, record: dict, tag: str | None) -> str:
        """`ok`; `tampered` (made with this key, over other contents, or malformed); `unsigned`
        (no tag); `other_key` (a well-formed tag made with another key: not checkable here)."""
        if not tag:
            return UNSIGNED
        parts = tag.split(":")
        if len(parts) != 3 or parts[0] != SCHEME:
            return TAMPERED
        if parts[1] != self.id:
            return OTHER_KEY
        return OK if hmac.compare_digest(self.tag(record), tag) else TAMPERED


_KEYS: dict[str, VerdictKey] = {}
_LOCK = threading.Lock()


def load_key(create: bool = True) -> VerdictKey:
    """This user's verdict key (`key_path`), made on first use when `create`. Raises OSError
    when it cannot be read or made, ValueError when the file holds too few bytes."""
    path = key_path()
    with _LOCK:
        if str(path) not in _KEYS:
            if not path.exists() and create:
                _create(path)
            _KEYS[str(path)] = VerdictKey(path.read_bytes())
        return _KEYS[str(path)]


def _create(path: Path) -> None:
    """Write a new key atomically: another process making one at the same moment wins or loses
    whole (os.link fails if the name exists), never leaving half a key."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
