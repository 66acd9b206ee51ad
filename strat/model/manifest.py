"""A checkpoint's manifest: its `COMPLETE` marker, written last, lists every file of the checkpoint with its size
and SHA-256, so that a checkpoint damaged after it was written (a truncated copy, a network filesystem that cut a
file short, flipped bytes) is found before it is loaded.

A marker that holds only the step number was written before manifests existed: such a checkpoint still loads, but
cannot be verified. SHA-256 is the hash: on x86 with the SHA extensions hashlib's (OpenSSL's) runs at about
1.2 GB/s, over twice BLAKE2b's (docs/performance.md, "Checkpoint manifests")."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

MARKER = "COMPLETE"
"""The marker file: the manifest (JSON), written last; a directory without it is an interrupted write."""

MANIFEST_VERSION = 1
HASH = "sha256"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileEntry:
    """One file of a checkpoint: its path inside the checkpoint (with `/`), size in bytes and content hash."""

    path: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    """What a checkpoint of `step` holds."""

    step: int
    files: tuple[FileEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {"manifest": MANIFEST_VERSION, "step": self.step, "hash": HASH,
                "files": [{"path": f.path, "size": f.size, HASH: f.sha256} for f in self.files]}


@dataclass(frozen=True)
class Damage:
    """A checkpoint that failed verification: its step and folder, the file, and what was wrong with it."""

    step: int
    folder: Path
    file: str
    problem: str

    def line(self) -> str:
        return f"checkpoint step_{self.step} ({self.folder}) is damaged: {self.file} {self.problem}"


@dataclass(frozen=True)
class Verdict:
    """The outcome of `verify`: `verified`, `unverifiable` (a marker without a manifest) or `damaged` (`damage`)."""

    status: Literal["verified", "unverifiable", "damaged"]
    damage: Damage | None = None


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def build(folder: Path, step: int) -> Manifest:
    """The manifest of every file under `folder` (the marker excepted), in path order."""
    files = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if name != MARKER:
            files.append(FileEntry(name, path.stat().st_size, file_hash(path)))
    return Manifest(step, tuple(files))


def write(folder: Path, step: int) -> Manifest:
    """Write the marker of a checkpoint whose other files are all written (and flushed): its manifest, flushed."""
    manifest = build(folder, step)
    with (folder / MARKER).open("w") as handle:
        handle.write(json.dumps(manifest.to_json(), indent=1) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return manifest


def read(folder: Path, step: int) -> Manifest | Damage | None:
    """The manifest in `folder`'s marker; None for a marker that holds only a step number (written before
    manifests); a `Damage` for a marker that cannot be read as either."""
    try:
        text = (folder / MARKER).read_text()
    except (OSError, UnicodeDecodeError) as err:
        return Damage(step, folder, MARKER, f"cannot be read ({err})")
    if text.strip().isdigit():
        return None
    try:
        data = json.loads(text)
        files = tuple(FileEntry(str(f["path"]), int(f["size"]), str(f[HASH])) for f in data["files"])
        return Manifest(int(data["step"]), files)
    except (ValueError, KeyError, TypeError) as err:
        return Damage(step, folder, MARKER, f"is not a readable manifest ({type(err).__name__}: {err})")


def verify(folder: Path, step: int) -> Verdict:
    """Check every file the manifest of `folder` lists against its size, then its hash; the first file that
    differs is the damage. Files not listed are not looked at."""
    manifest = read(folder, step)
    if manifest is None:
        return Verdict("unverifiable")
    if isinstance(manifest, Damage):
        return Verdict("damaged", manifest)
    if manifest.step != step:
        return Verdict("damaged", Damage(step, folder, MARKER, f"names step {manifest.step}, not {step}"))
    for entry in manifest.files:
        damage = _check(folder, step, entry)
        if damage is not None:
            return Verdict("damaged", damage)
    return Verdict("verified")


def _check(folder: Path, step: int, entry: FileEntry) -> Damage | None:
    path = folder / entry.path
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return Damage(step, folder, entry.path, "is missing")
    except OSError as err:
        return Damage(step, folder, entry.path, f"cannot be read ({err.strerror or err})")
    if size != entry.size:
        return Damage(step, folder, entry.path, f"is {size} bytes, the manifest says {entry.size} (cut short or grown)")
    try:
        found = file_hash(path)
    except OSError as err:
        return Damage(step, folder, entry.path, f"cannot be read ({err.strerror or err})")
    if found != entry.sha256:
        return Damage(step, folder, entry.path,
                      f"has other content than the manifest says (sha256 {found[:12]}..., expected {entry.sha256[:12]}...)")
    return None
