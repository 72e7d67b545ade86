"""A FUSE filesystem that loses what was not fsynced at a simulated power cut (as Jepsen's LazyFS).

Run as ``python -m tests.reliability.lazyfs BACKING MOUNTPOINT``: reads and writes pass through to
BACKING, while the filesystem remembers what a power cut would lose -- for each file the size and
the bytes it had at its last fsync/fdatasync, and the files and directories created since their
parent directory was last fsynced. Commands on standard input, one per line, each answered with
``ok``:

- ``cut``: power cut -- unmount, then put BACKING back as the disks would have it (un-fsynced
  writes undone, files grown since their sync cut back, entries never made durable removed), exit.
- ``eio-fsync`` / ``enospc-write`` / ``slow-fsync MS`` / ``clear``: from now on every fsync fails
  with EIO / every write fails with ENOSPC / every fsync takes MS milliseconds more / no more faults. After a failed fsync the un-fsynced data stays un-fsynced (a
  later power cut loses it), as Linux marks the dirty pages clean without writing them.

Modelled: file data and sizes, creation of files and directories. Not modelled: renames and
unlinks are durable at once (tierlog's atomic writes fsync the directory right after them anyway).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import mfusepy as fuse


class _FileState:
    __slots__ = ("durable_size", "undo")

    def __init__(self, durable_size: int) -> None:
        self.durable_size = durable_size
        #: (offset, bytes the durable file had there), in write order.
        self.undo: list[tuple[int, bytes]] = []


class LazyFS(fuse.Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, backing: str) -> None:
        self.root = backing
        self._mutex = threading.Lock()
        self.files: dict[str, _FileState] = {}
        #: Paths created since their parent directory was last fsynced.
        self.pending: set[str] = set()
        self.fail_fsync = False
        self.fail_write = False
        self.fsync_delay_s = 0.0

    def _full(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _state(self, path: str, fd: int | None = None) -> _FileState:
        st = self.files.get(path)
        if st is None:
            size = os.fstat(fd).st_size if fd is not None else os.stat(self._full(path)).st_size
            st = self.files[path] = _FileState(size)
        return st

    # -- namespace ------------------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.lstat(self._full(path))
        return {k: getattr(st, k) for k in ("st_atime_ns", "st_ctime_ns", "st_gid", "st_mode", "st_mtime_ns",
                                            "st_nlink", "st_size", "st_uid", "st_ino")} | {
            "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._full(path))]

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._full(path), mode)
        with self._mutex:
            self.pending.add(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._full(path))
        with self._mutex:
            self.pending.discard(path)

    def unlink(self, path: str) -> None:
        os.unlink(self._full(path))
        with self._mutex:
            self.files.pop(path, None)
            self.pending.discard(path)

    def rename(self, old: str, new: str) -> None:
        os.rename(self._full(old), self._full(new))
        with self._mutex:
            for table in (self.files,):
                moved = {p: s for p, s in table.items() if p == old or p.startswith(old + "/")}
                for p, s in moved.items():
                    del table[p]
                    table[new + p[len(old):]] = s
            moved_pending = {p for p in self.pending if p == old or p.startswith(old + "/")}
            self.pending -= moved_pending
            self.pending |= {new + p[len(old):] for p in moved_pending}

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._full(path))
        return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._full(path), mode)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        os.utime(self._full(path), ns=times)

    # -- files ----------------------------------------------------------------------------------

    def open(self, path: str, flags: int) -> int:
        # Read-write underneath: a write reads what it overwrites first (the undo of a power cut).
        return os.open(self._full(path), (flags & ~(os.O_APPEND | os.O_ACCMODE)) | os.O_RDWR)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        existed = os.path.exists(self._full(path))
        fd = os.open(self._full(path), os.O_RDWR | os.O_CREAT, mode)
        with self._mutex:
            if not existed:
                self.files[path] = _FileState(0)
                self.pending.add(path)
        return fd

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        if self.fail_write:
            raise fuse.FuseOSError(errno.ENOSPC)
        with self._mutex:
            st = self._state(path, fh)
            if offset < st.durable_size:
                st.undo.append((offset, os.pread(fh, min(len(data), st.durable_size - offset), offset)))
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        with self._mutex:
            st = self._state(path, fh)
            if length < st.durable_size:
                with open(self._full(path), "rb") as f:
                    f.seek(length)
                    st.undo.append((length, f.read(st.durable_size - length)))
            os.truncate(self._full(path), length)

    def fallocate(self, path: str, mode: int, offset: int, length: int, fh: int) -> None:
        os.posix_fallocate(fh, offset, length)

    def flush(self, path: str, fh: int) -> None:
        return None

    def release(self, path: str, fh: int) -> None:
        os.close(fh)

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        if self.fail_fsync:
            raise fuse.FuseOSError(errno.EIO)
        if self.fsync_delay_s:
            time.sleep(self.fsync_delay_s)  # a slow disk
        os.fdatasync(fh) if datasync else os.fsync(fh)
        with self._mutex:
            st = self._state(path, fh)
            st.durable_size = os.fstat(fh).st_size
            st.undo.clear()

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        if self.fail_fsync:
            raise fuse.FuseOSError(errno.EIO)
        prefix = path.rstrip("/") + "/"
        with self._mutex:
            self.pending = {p for p in self.pending if not (p.startswith(prefix) and "/" not in p[len(prefix):])}

    def opendir(self, path: str) -> int:
        return 0

    def releasedir(self, path: str, fh: int) -> None:
        return None

    # -- the power cut --------------------------------------------------------------------------

    def power_cut(self) -> tuple[int, int]:
        """Put the backing files back as durable; returns (bytes lost, entries lost)."""
        lost_bytes = lost_entries = 0
        with self._mutex:
            for path in sorted(self.pending, key=len):
                full = self._full(path)
                if os.path.isdir(full):
                    shutil.rmtree(full, ignore_errors=True)
                    lost_entries += 1
                elif os.path.exists(full):
                    lost_bytes += os.path.getsize(full)
                    os.unlink(full)
                    lost_entries += 1
            for path, st in self.files.items():
                full = self._full(path)
                if not os.path.exists(full):
                    continue
                size = os.path.getsize(full)
                if size == st.durable_size and not st.undo:
                    continue  # nothing written since its last sync
                lost_bytes += max(0, size - st.durable_size)
                # (No fsync of the repair: the backing disk itself never loses power here.)
                fd = os.open(full, os.O_RDWR)
                try:
                    for offset, old in reversed(st.undo):
                        os.pwrite(fd, old, offset)
                        lost_bytes += len(old)
                    os.ftruncate(fd, st.durable_size)
                finally:
                    os.close(fd)
            self.files.clear()
            self.pending.clear()
        return lost_bytes, lost_entries


def main() -> None:
    backing, mountpoint = sys.argv[1], sys.argv[2]
    fs = LazyFS(os.path.abspath(backing))
    thread = threading.Thread(target=lambda: fuse.FUSE(fs, mountpoint, foreground=True, nothreads=False,
                                                      attr_timeout=0, entry_timeout=0, negative_timeout=0),
                              daemon=True)
    thread.start()
    print("ok mounted", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "cut":
            subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)
            thread.join(30)
            lost_bytes, lost_entries = fs.power_cut()
            print(f"ok lost_bytes={lost_bytes} lost_entries={lost_entries}", flush=True)
            return
        if cmd == "eio-fsync":
            fs.fail_fsync = True
        elif cmd == "enospc-write":
            fs.fail_write = True
        elif cmd.startswith("slow-fsync "):
            fs.fsync_delay_s = int(cmd.split()[1]) / 1000.0
        elif cmd == "clear":
            fs.fail_fsync = fs.fail_write = False
            fs.fsync_delay_s = 0.0
        print("ok", flush=True)
    subprocess.run(["fusermount3", "-u", "-z", mountpoint], check=False)


if __name__ == "__main__":
    main()


def mount(backing: Path, mountpoint: Path) -> subprocess.Popen[str]:
    """Start the filesystem in a process of its own; returns it once the mount is up."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.lazyfs", str(backing), str(mountpoint)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("ok"):
        raise RuntimeError(f"lazyfs did not mount: {line!r}")
    deadline = time.monotonic() + 30
    while not os.path.ismount(mountpoint):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("lazyfs did not mount")
        time.sleep(0.05)
    return proc


def command(proc: subprocess.Popen[str], cmd: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(cmd + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()
