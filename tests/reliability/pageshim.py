"""The power-loss harness without FUSE: an ``LD_PRELOAD`` shim (``pageshim.c`` beside this file,
built with the machine's C compiler the first time it is needed) that journals, before each change
the broker makes under its data dir, what a power cut would undo -- and :meth:`PageShim.power_cut`,
run after the broker is SIGKILLed, which undoes every change no successful sync covers, newest
first, as a machine losing its page cache would lose them (lazyfs's ``cut`` does the same on FUSE).

Modelled, as in ``lazyfs.py`` and more:

- file data and sizes (write, pwrite, writev, pwritev/pwritev2, ftruncate/truncate, fallocate,
  open with O_TRUNC): a change is kept only when an fsync/fdatasync of the file (or an msync of a
  mapping of it, or a syncfs) began after the change had completed;
- directory entries: a file or directory created, a file unlinked, a directory removed, an entry
  renamed (the replaced target comes back too) is kept only when its parent directory (for a
  rename: the target's) was fsynced after it, or a syncfs ran -- lazyfs treats renames and
  unlinks as durable at once;
- faults: every sync failing with EIO, every data write failing with ENOSPC, slow syncs, syncs held
  until released. After a failed sync the change stays unsynced, as Linux marks the pages clean
  without writing them.

Not modelled (said in docs/operations.md's "Durability" too):

- stores through a writable shared mapping (tierlog's offset and time indexes) are not undone by a
  cut -- their old bytes are never seen; an msync counts as an fdatasync of the whole mapped file.
  Indexes past the recovery point are rebuilt by recovery, so a cut that kept index stores can only
  hide a bug in an index the broker trusts without fsyncing it. The number of writable mappings is
  reported (``writable_maps``);
- descriptors made by dup/fcntl(F_DUPFD) (not tracked), sendfile/copy_file_range/splice into data
  files, symlinks, entries moved out of the data dir;
- what a real file system adds: ext4 commits all metadata at the next fsync of any file, so the shim
  loses entries a real ext4 would keep (it follows POSIX, as lazyfs does).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("pageshim.c")
_RECORD = struct.Struct("<IIQQQqq")
_CONTROL = struct.Struct("<iiii")
_ENTRY_KINDS = frozenset(b"CMUDR")


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


def unavailable() -> str | None:
    """None when the shim can be built and loaded here, else why not."""
    if not sys.platform.startswith("linux"):
        return f"the page-cache shim needs Linux's LD_PRELOAD (this is {sys.platform})"
    if _compiler() is None:
        return "no C compiler (cc, gcc or clang) to build tests/reliability/pageshim.c"
    return None


def build() -> Path:
    """The shared library, compiled once per source version into the temp dir."""
    source = SOURCE.read_bytes()
    out_dir = Path(tempfile.gettempdir()) / f"tierlog-pageshim-{hashlib.sha256(source).hexdigest()[:16]}"
    library = out_dir / "pageshim.so"
    if library.exists():
        return library
    cc = _compiler()
    if cc is None:
        raise RuntimeError(unavailable())
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"pageshim.{os.getpid()}.so"
    done = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wno-format-truncation", "-o", str(tmp),
                           str(SOURCE), "-ldl", "-lpthread"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building {SOURCE.name} failed:\n{done.stderr}")
    os.replace(tmp, library)  # atomic: parallel test processes may build it at once
    return library


@dataclass
class _Record:
    pos: int
    kind: int
    seq: int
    ino: int
    ino2: int
    offset: int
    size_before: int
    extra: bytes

    def paths(self) -> list[str]:
        return [p.decode() for p in self.extra.split(b"\0")[:3]]


def read_journal(path: Path) -> list[_Record]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    records: list[_Record] = []
    at = 0
    while at + _RECORD.size <= len(data):
        kind, extra_bytes, seq, ino, ino2, offset, size_before = _RECORD.unpack_from(data, at)
        at += _RECORD.size
        if at + extra_bytes > len(data):
            break  # the broker was killed inside this journal write: the change it announces never began
        records.append(_Record(len(records), kind, seq, ino, ino2, offset, size_before, data[at:at + extra_bytes]))
        at += extra_bytes
    return records


@dataclass
class CutReport:
    bytes_lost: int = 0
    entries_lost: int = 0
    changes_undone: int = 0
    changes_kept: int = 0
    #: Writable shared mappings of data files since the last cut (their stores are not undone).
    writable_maps: int = 0


class PageShim:
    """One broker's page-cache model: ``env()`` for the broker process, ``power_cut()`` after it
    is killed, ``faults()`` while it runs."""

    def __init__(self, work: Path, root: Path) -> None:
        self.root = root.resolve()
        self.journal = work / "pageshim.journal"
        self.backup = work / "pageshim.backup"
        self.control = work / "pageshim.control"
        self.backup.mkdir(parents=True, exist_ok=True)
        self.control.write_bytes(bytes(4096))
        self.library = build()

    def env(self) -> dict[str, str]:
        return {"LD_PRELOAD": str(self.library), "TIERLOG_PAGESHIM_ROOT": str(self.root),
                "TIERLOG_PAGESHIM_JOURNAL": str(self.journal), "TIERLOG_PAGESHIM_BACKUP": str(self.backup),
                "TIERLOG_PAGESHIM_CONTROL": str(self.control)}

    def faults(self, *, fail_fsync: bool = False, fail_write: bool = False, fsync_delay_ms: int = 0,
               hold_fsync: bool = False) -> None:
        """Seen by the broker at its next sync or write (the control file is mapped shared);
        ``hold_fsync`` makes every sync wait, those under way included, until the faults change."""
        with open(self.control, "r+b") as f:
            f.write(_CONTROL.pack(int(fail_fsync), int(fail_write), fsync_delay_ms, int(hold_fsync)))

    def command(self, cmd: str) -> str:
        """lazyfs's fault commands (``eio-fsync``, ``enospc-write``, ``slow-fsync MS``, ``clear``),
        so a test drives either harness the same way, and the shim's own ``hold-fsync`` (lazyfs has
        none: every sync waits until ``clear``); answers ``ok``."""
        if cmd == "eio-fsync":
            self.faults(fail_fsync=True)
        elif cmd == "enospc-write":
            self.faults(fail_write=True)
        elif cmd.startswith("slow-fsync "):
            self.faults(fsync_delay_ms=int(cmd.split()[1]))
        elif cmd == "hold-fsync":
            self.faults(hold_fsync=True)
        elif cmd == "clear":
            self.faults()
        else:
            raise ValueError(f"unknown page-cache shim command {cmd!r}")
        return "ok"

    def power_cut(self) -> CutReport:
        """Undo what was not synced; the broker must be dead (SIGKILLed and waited for)."""
        records = read_journal(self.journal)
        report = CutReport(writable_maps=sum(1 for r in records if r.kind == ord("P")))
        completed = {r.seq for r in records if r.kind in (ord("E"), ord("G"))}
        cancelled = {r.seq for r in records if r.kind == ord("X")}
        synced_at: dict[int, int] = {}  # inode -> journal position of the last completed sync's start
        everything_at = -1
        for r in records:
            if r.kind == ord("B") and r.seq in completed:
                synced_at[r.ino] = r.pos
            elif r.kind == ord("F") and r.seq in completed:
                everything_at = r.pos

        def kept(pos: int, ino: int) -> bool:
            return pos < everything_at or (ino != 0 and pos < synced_at.get(ino, -1))

        writes: dict[int, list[_Record]] = defaultdict(list)
        entries: list[_Record] = []
        for r in records:
            if r.kind == ord("W"):
                if kept(r.pos, r.ino):
                    report.changes_kept += 1
                else:
                    writes[r.ino].append(r)
            elif r.kind in _ENTRY_KINDS and r.seq not in cancelled:
                if kept(r.pos, r.ino):
                    report.changes_kept += 1
                else:
                    entries.append(r)
        # Data first, by inode (names are put back afterwards), each file's changes newest first.
        if writes:
            paths = self._inode_paths()
            for ino, changes in writes.items():
                path = paths.get(ino)
                if path is None:
                    continue  # unlinked without a backup: nothing left to put back
                report.bytes_lost += self._undo_writes(path, changes)
                report.changes_undone += len(changes)
        for r in reversed(entries):
            report.entries_lost += self._undo_entry(r)
            report.changes_undone += 1
        shutil.rmtree(self.backup, ignore_errors=True)
        self.backup.mkdir()
        self.journal.unlink(missing_ok=True)
        return report

    def _inode_paths(self) -> dict[int, str]:
        found: dict[int, str] = {}
        for top in (self.root, self.backup):
            for dirpath, _dirs, files in os.walk(top):
                for name in files:
                    path = os.path.join(dirpath, name)
                    try:
                        st = os.lstat(path)
                    except FileNotFoundError:
                        continue
                    found.setdefault(st.st_ino, path)
        return found

    @staticmethod
    def _undo_writes(path: str, changes: list[_Record]) -> int:
        """Undo one file's changes newest first; returns the bytes written since its last sync that
        the cut discards (overwritten or appended; truncations and preallocation not counted)."""
        lost = 0
        fd = os.open(path, os.O_RDWR)
        try:
            for r in reversed(changes):
                if r.extra:
                    os.pwrite(fd, r.extra, r.offset)
                os.ftruncate(fd, r.size_before)
                lost += r.ino2  # the C side's bytes written (0 for a truncation or fallocate)
        finally:
            os.close(fd)
        return lost

    @staticmethod
    def _undo_entry(r: _Record) -> int:
        """Put one directory entry back as it was before the change; 1 when the change had happened."""
        kind = chr(r.kind)
        path, second, third = r.paths()
        if kind == "C":
            if os.path.lexists(path) and not os.path.isdir(path):
                os.unlink(path)
                return 1
        elif kind == "M":
            if os.path.isdir(path):
                shutil.rmtree(path)
                return 1
        elif kind == "U":
            if second and os.path.exists(second) and not os.path.lexists(path):
                os.rename(second, path)
                return 1
        elif kind == "D":
            if not os.path.lexists(path):
                os.mkdir(path)
                return 1
        elif kind == "R":
            source, target, replaced = path, second, third
            if not source:  # moved in from outside the data dir: it never arrived
                if os.path.lexists(target):
                    (shutil.rmtree if os.path.isdir(target) else os.unlink)(target)
                    return 1
            elif target and os.path.lexists(target) and not os.path.lexists(source):
                os.rename(target, source)
                if replaced == "/":
                    os.mkdir(target)
                elif replaced and os.path.exists(replaced):
                    os.rename(replaced, target)
                return 1
        return 0
