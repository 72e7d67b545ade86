/* The page-cache shim: an LD_PRELOAD library that lets a power cut be simulated without FUSE.
 *
 * Loaded into the broker process with TIERLOG_PAGESHIM_ROOT=<data dir>, it lets every call through
 * to the C library unchanged, but before each change under the data dir it appends to a journal
 * (TIERLOG_PAGESHIM_JOURNAL, outside the data dir) what a power cut would have to undo:
 *
 *   W  a data change of one file (write, pwrite, writev, pwritev, ftruncate, truncate, fallocate,
 *      open with O_TRUNC): its inode, offset, the file's size before and the bytes it overwrote;
 *   C M U D R  a directory entry created, made a directory, unlinked, removed, renamed -- an
 *      unlinked or replaced file is first hard-linked into TIERLOG_PAGESHIM_BACKUP so it can come
 *      back; an entry change whose call fails is cancelled by an X record;
 *   B E  an fsync/fdatasync/msync of an inode began / ended successfully (a file's data, or a
 *      directory's entries); F G  the same for syncfs/sync (everything).
 *
 * The journal is written with write(2) before the change is made, so a SIGKILL keeps it (the page
 * cache outlives the process). tests/reliability/pageshim.py reads it after the kill and undoes,
 * newest first, every change no successful sync begun after it covers -- what a machine losing its
 * page cache would lose. Data changes and the sync that covers them are ordered by one mutex, so a
 * write journalled before a sync's B record had completed before that sync began.
 *
 * TIERLOG_PAGESHIM_CONTROL names a small file the harness writes to inject faults: from then on
 * every sync fails with EIO, or every data write with ENOSPC, or each sync takes N ms more.
 *
 * Not modelled (tests/reliability/pageshim.py's docstring lists these for the reader): stores
 * through writable shared mappings (they survive a cut; an msync counts as an fdatasync of the
 * mapped file), descriptors made by dup/fcntl, sendfile/copy_file_range/splice into data files,
 * symlinks, and the ordering a real file system adds (ext4 commits every metadata change at the
 * next fsync of any file; here only a sync of the directory, or syncfs, makes an entry durable).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_FDS 65536
#define MAX_MAPS 8192

struct record {
    uint32_t kind;
    uint32_t extra_bytes;
    uint64_t seq;
    uint64_t ino;   /* W B E: the file or directory; C M U D R: the parent directory (R: the target's) */
    uint64_t ino2;  /* R: the source's parent directory; W: the bytes written (0: a truncation) */
    int64_t offset;
    int64_t size_before;
};

struct control {
    volatile int32_t fail_fsync;
    volatile int32_t fail_write;
    volatile int32_t fsync_delay_ms;
    /* While set, every sync waits (a disk that has not answered yet): a test holds a sync under way
     * for as long as it needs and lets it finish -- no timing involved. */
    volatile int32_t hold_fsync;
};

struct mapping {
    uintptr_t address;
    size_t length;
    uint64_t ino;
};

static int active;
static char root[PATH_MAX];
static size_t root_len;
static char backup_dir[PATH_MAX];
static int journal_fd = -1;
static struct control *ctl;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_seq;
static unsigned char tracked[MAX_FDS];
static struct mapping maps[MAX_MAPS];

static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_close)(int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev64)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev2)(int, const struct iovec *, int, off_t, int);
static ssize_t (*real_pwritev64v2)(int, const struct iovec *, int, off_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_ftruncate64)(int, off_t);
static int (*real_truncate)(const char *, off_t);
static int (*real_truncate64)(const char *, off_t);
static int (*real_fallocate)(int, int, off_t, off_t);
static int (*real_fallocate64)(int, int, off_t, off_t);
static int (*real_posix_fallocate)(int, off_t, off_t);
static int (*real_posix_fallocate64)(int, off_t, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_syncfs)(int);
static void (*real_sync)(void);
static int (*real_msync)(void *, size_t, int);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static void *(*real_mmap64)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
static int (*real_rename)(const char *, const char *);
static int (*real_renameat)(int, const char *, int, const char *);
static int (*real_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*real_unlink)(const char *);
static int (*real_unlinkat)(int, const char *, int);
static int (*real_mkdir)(const char *, mode_t);
static int (*real_mkdirat)(int, const char *, mode_t);
static int (*real_rmdir)(const char *);
static int (*real_link)(const char *, const char *);
static int (*real_linkat)(int, const char *, int, const char *, int);

#define RESOLVE(name) real_##name = dlsym(RTLD_NEXT, #name)

__attribute__((constructor)) static void init(void) {
    RESOLVE(open); RESOLVE(open64); RESOLVE(openat); RESOLVE(openat64); RESOLVE(close);
    RESOLVE(write); RESOLVE(pwrite); RESOLVE(pwrite64); RESOLVE(writev); RESOLVE(pwritev);
    RESOLVE(pwritev64); RESOLVE(pwritev2); RESOLVE(pwritev64v2); RESOLVE(ftruncate); RESOLVE(ftruncate64);
    RESOLVE(truncate); RESOLVE(truncate64); RESOLVE(fallocate); RESOLVE(fallocate64);
    RESOLVE(posix_fallocate); RESOLVE(posix_fallocate64); RESOLVE(fsync); RESOLVE(fdatasync);
    RESOLVE(syncfs); RESOLVE(sync); RESOLVE(msync); RESOLVE(mmap); RESOLVE(mmap64); RESOLVE(munmap);
    RESOLVE(rename); RESOLVE(renameat); RESOLVE(renameat2); RESOLVE(unlink); RESOLVE(unlinkat);
    RESOLVE(mkdir); RESOLVE(mkdirat); RESOLVE(rmdir); RESOLVE(link); RESOLVE(linkat);
    const char *r = getenv("TIERLOG_PAGESHIM_ROOT");
    const char *j = getenv("TIERLOG_PAGESHIM_JOURNAL");
    const char *b = getenv("TIERLOG_PAGESHIM_BACKUP");
    if (!r || !j || !b || !*r)
        return;
    snprintf(root, sizeof root, "%s", r);
    root_len = strlen(root);
    while (root_len > 1 && root[root_len - 1] == '/')
        root[--root_len] = 0;
    snprintf(backup_dir, sizeof backup_dir, "%s", b);
    journal_fd = real_open(j, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (journal_fd < 0) {
        fprintf(stderr, "pageshim: cannot open the journal %s: %s\n", j, strerror(errno));
        abort();
    }
    const char *c = getenv("TIERLOG_PAGESHIM_CONTROL");
    if (c && *c) {
        int fd = real_open(c, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            void *p = real_mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
            real_close(fd);
            if (p != MAP_FAILED)
                ctl = p;
        }
    }
    next_seq = ((uint64_t)getpid()) << 40;
    active = 1;
}

/* -- the journal ------------------------------------------------------------------------------ */

static void journal(uint32_t kind, uint64_t seq, uint64_t ino, uint64_t ino2, int64_t offset, int64_t size_before,
                    const void *extra, size_t extra_bytes) {
    struct record rec = {kind, (uint32_t)extra_bytes, seq, ino, ino2, offset, size_before};
    struct iovec v[2] = {{&rec, sizeof rec}, {(void *)extra, extra_bytes}};
    ssize_t want = (ssize_t)(sizeof rec + extra_bytes);
    ssize_t done = real_writev(journal_fd, v, extra_bytes ? 2 : 1);
    if (done != want) {
        fprintf(stderr, "pageshim: journal write failed (%zd of %zd): %s\n", done, want, strerror(errno));
        abort();
    }
}

/* -- paths ------------------------------------------------------------------------------------ */

/* An absolute path for (dirfd, path); returns 0 on success. */
static int resolve(int dirfd, const char *path, char *out) {
    char base[PATH_MAX];
    if (!path)
        return -1;
    if (path[0] == '/') {
        snprintf(out, PATH_MAX, "%s", path);
    } else {
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base))
                return -1;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n < 0)
                return -1;
            base[n] = 0;
        }
        const char *p = path;
        while (p[0] == '.' && p[1] == '/')
            p += 2;
        snprintf(out, PATH_MAX, "%s/%s", base, p);
    }
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = 0;
    return 0;
}

/* Whether an absolute path is the data dir (when allowed) or inside it. */
static int under_root(const char *abs, int allow_root) {
    if (strncmp(abs, root, root_len) != 0)
        return 0;
    return abs[root_len] == '/' || (allow_root && abs[root_len] == 0);
}

/* Quick test before resolving: an absolute path outside the data dir needs no more work. */
static int maybe_under_root(const char *path) {
    return path && (path[0] != '/' || strncmp(path, root, root_len) == 0);
}

static uint64_t parent_ino(const char *abs) {
    char parent[PATH_MAX];
    struct stat st;
    snprintf(parent, sizeof parent, "%s", abs);
    char *slash = strrchr(parent, '/');
    if (!slash)
        return 0;
    if (slash == parent)
        slash[1] = 0;
    else
        *slash = 0;
    return stat(parent, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Hard-links an entry about to disappear into the backup dir; returns its path there or "". */
static void keep(const char *abs, uint64_t seq, char *bak) {
    struct stat st;
    bak[0] = 0;
    if (lstat(abs, &st) != 0 || S_ISDIR(st.st_mode))
        return;
    snprintf(bak, PATH_MAX, "%s/%llu", backup_dir, (unsigned long long)seq);
    if (real_link(abs, bak) != 0)
        bak[0] = 0;
}

/* Records of entry changes carry NUL-separated paths. */
static void journal_entry(uint32_t kind, uint64_t seq, uint64_t ino, uint64_t ino2, const char *a, const char *b,
                          const char *c) {
    char buf[3 * PATH_MAX];
    size_t n = 0;
    const char *parts[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        const char *s = parts[i] ? parts[i] : "";
        size_t len = strlen(s) + 1;
        memcpy(buf + n, s, len);
        n += len;
    }
    journal(kind, seq, ino, ino2, 0, 0, buf, n);
}

/* -- data changes ----------------------------------------------------------------------------- */

static int is_tracked(int fd) {
    return active && fd >= 0 && fd < MAX_FDS && tracked[fd];
}

/* Journals the undo of a change of [offset, offset + length) of fd's file, whose size becomes
 * at least offset + length (or exactly new_size when new_size >= 0: a truncation). Called locked. */
static void record_change(int fd, int64_t offset, int64_t length, int64_t written) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    int64_t size = st.st_size;
    int64_t overlap = 0;
    if (offset < size)
        overlap = (length < size - offset) ? length : size - offset;
    char *old = NULL;
    if (overlap > 0) {
        old = malloc((size_t)overlap);
        if (!old || pread(fd, old, (size_t)overlap, offset) != overlap) {
            fprintf(stderr, "pageshim: cannot read what a write overwrites: %s\n", strerror(errno));
            abort();
        }
    }
    journal('W', 0, (uint64_t)st.st_ino, (uint64_t)written, offset, size, old, (size_t)overlap);
    free(old);
}

static int64_t write_offset(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_APPEND)) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : 0;
    }
    return lseek(fd, 0, SEEK_CUR);
}

static int64_t iov_bytes(const struct iovec *iov, int count) {
    int64_t n = 0;
    for (int i = 0; i < count; i++)
        n += (int64_t)iov[i].iov_len;
    return n;
}

static int refuse_write(void) {
    if (ctl && ctl->fail_write) {
        errno = ENOSPC;
        return 1;
    }
    return 0;
}

#define DATA_CHANGE(fd, offset_expr, length_expr, written, call)         \
    do {                                                                 \
        if (!is_tracked(fd))                                             \
            return call;                                                 \
        if (refuse_write())                                              \
            return -1;                                                   \
        pthread_mutex_lock(&lock);                                       \
        record_change(fd, (offset_expr), (length_expr), (written));      \
        __typeof__(call) result_ = call;                                 \
        int errno_ = errno;                                              \
        pthread_mutex_unlock(&lock);                                     \
        errno = errno_;                                                  \
        return result_;                                                  \
    } while (0)

ssize_t write(int fd, const void *buf, size_t count) {
    DATA_CHANGE(fd, write_offset(fd), (int64_t)count, (int64_t)count, real_write(fd, buf, count));
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    DATA_CHANGE(fd, offset, (int64_t)count, (int64_t)count, real_pwrite(fd, buf, count, offset));
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    DATA_CHANGE(fd, offset, (int64_t)count, (int64_t)count, real_pwrite64(fd, buf, count, offset));
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    DATA_CHANGE(fd, write_offset(fd), iov_bytes(iov, count), iov_bytes(iov, count), real_writev(fd, iov, count));
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t offset) {
    DATA_CHANGE(fd, offset, iov_bytes(iov, count), iov_bytes(iov, count), real_pwritev(fd, iov, count, offset));
}

ssize_t pwritev64(int fd, const struct iovec *iov, int count, off_t offset) {
    DATA_CHANGE(fd, offset, iov_bytes(iov, count), iov_bytes(iov, count), real_pwritev64(fd, iov, count, offset));
}

static int64_t v2_offset(int fd, off_t offset, int flags) {
#ifdef RWF_APPEND
    if (flags & RWF_APPEND) {
        struct stat st;
        return fstat(fd, &st) == 0 ? st.st_size : 0;
    }
#endif
    (void)flags;
    return offset == -1 ? write_offset(fd) : offset;
}

ssize_t pwritev2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    DATA_CHANGE(fd, v2_offset(fd, offset, flags), iov_bytes(iov, count), iov_bytes(iov, count),
                real_pwritev2(fd, iov, count, offset, flags));
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int count, off_t offset, int flags) {
    DATA_CHANGE(fd, v2_offset(fd, offset, flags), iov_bytes(iov, count), iov_bytes(iov, count),
                real_pwritev64v2(fd, iov, count, offset, flags));
}

/* A truncation to `length` undoes as: the bytes from `length` on put back, the old size restored. */
static int64_t truncated_bytes(int fd, off_t length) {
    struct stat st;
    return (fstat(fd, &st) == 0 && st.st_size > length) ? st.st_size - length : 0;
}

int ftruncate(int fd, off_t length) {
    DATA_CHANGE(fd, length, truncated_bytes(fd, length), 0, real_ftruncate(fd, length));
}

int ftruncate64(int fd, off_t length) {
    DATA_CHANGE(fd, length, truncated_bytes(fd, length), 0, real_ftruncate64(fd, length));
}

static int truncate_path(const char *path, off_t length, int (*real)(const char *, off_t)) {
    char abs[PATH_MAX];
    if (!active || !maybe_under_root(path) || resolve(AT_FDCWD, path, abs) != 0 || !under_root(abs, 0))
        return real(path, length);
    if (refuse_write())
        return -1;
    int fd = real_open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return real(path, length);
    pthread_mutex_lock(&lock);
    record_change(fd, length, truncated_bytes(fd, length), 0);
    int result = real_ftruncate(fd, length);
    int errno_ = errno;
    pthread_mutex_unlock(&lock);
    real_close(fd);
    errno = errno_;
    return result;
}

int truncate(const char *path, off_t length) { return truncate_path(path, length, real_truncate); }
int truncate64(const char *path, off_t length) { return truncate_path(path, length, real_truncate64); }

int fallocate(int fd, int mode, off_t offset, off_t length) {
    DATA_CHANGE(fd, offset, 0, 0, real_fallocate(fd, mode, offset, length));
}

int fallocate64(int fd, int mode, off_t offset, off_t length) {
    DATA_CHANGE(fd, offset, 0, 0, real_fallocate64(fd, mode, offset, length));
}

int posix_fallocate(int fd, off_t offset, off_t length) {
    DATA_CHANGE(fd, offset, 0, 0, real_posix_fallocate(fd, offset, length));
}

int posix_fallocate64(int fd, off_t offset, off_t length) {
    DATA_CHANGE(fd, offset, 0, 0, real_posix_fallocate64(fd, offset, length));
}

/* -- opening and closing ---------------------------------------------------------------------- */

static int open_common(int dirfd, const char *path, int flags, mode_t mode, int at,
                       int (*real_plain)(const char *, int, ...), int (*real_at)(int, const char *, int, ...)) {
#define CALL_REAL(f) (at ? real_at(dirfd, path, (f), mode) : real_plain(path, (f), mode))
    char abs[PATH_MAX];
    if (!active || !maybe_under_root(path) || resolve(at ? dirfd : AT_FDCWD, path, abs) != 0 || !under_root(abs, 1))
        return CALL_REAL(flags);
    struct stat st;
    int existed = stat(abs, &st) == 0;
    int is_dir = existed && S_ISDIR(st.st_mode);
    /* Read-write underneath, so a write can read what it overwrites first. */
    if (!is_dir && (flags & O_ACCMODE) == O_WRONLY)
        flags = (flags & ~O_ACCMODE) | O_RDWR;
    if (!under_root(abs, 0) || ((flags & O_TMPFILE) == O_TMPFILE)) {
        int fd = CALL_REAL(flags);
        if (fd >= 0 && fd < MAX_FDS)
            tracked[fd] = 1;
        return fd;
    }
    pthread_mutex_lock(&lock);
    uint64_t seq = ++next_seq;
    int creates = (flags & O_CREAT) && !existed;
    if (creates)
        journal_entry('C', seq, parent_ino(abs), 0, abs, NULL, NULL);
    if ((flags & O_TRUNC) && existed && S_ISREG(st.st_mode) && st.st_size > 0) {
        int rfd = real_open(abs, O_RDONLY | O_CLOEXEC);
        if (rfd >= 0) {
            record_change(rfd, 0, st.st_size, 0);
            real_close(rfd);
        }
    }
    int fd = CALL_REAL(flags);
    int errno_ = errno;
    if (fd < 0 && creates)
        journal('X', seq, 0, 0, 0, 0, NULL, 0);
    if (fd >= 0 && fd < MAX_FDS)
        tracked[fd] = 1;
    pthread_mutex_unlock(&lock);
    errno = errno_;
    return fd;
#undef CALL_REAL
}

static mode_t mode_arg(int flags, va_list ap) {
    return ((flags & O_CREAT) || ((flags & O_TMPFILE) == O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return open_common(AT_FDCWD, path, flags, mode, 0, real_open, NULL);
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return open_common(AT_FDCWD, path, flags, mode, 0, real_open64, NULL);
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return open_common(dirfd, path, flags, mode, 1, NULL, real_openat);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return open_common(dirfd, path, flags, mode, 1, NULL, real_openat64);
}

int close(int fd) {
    if (fd >= 0 && fd < MAX_FDS)
        tracked[fd] = 0;
    return real_close(fd);
}

/* -- syncs ------------------------------------------------------------------------------------ */

static int sync_fault(void) {
    if (!ctl)
        return 0;
    while (ctl->hold_fsync) {
        struct timespec t = {0, 1000000L};
        nanosleep(&t, NULL);
    }
    if (ctl->fsync_delay_ms > 0) {
        struct timespec t = {ctl->fsync_delay_ms / 1000, (long)(ctl->fsync_delay_ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    if (ctl->fail_fsync) {
        errno = EIO;
        return 1;
    }
    return 0;
}

static int synced(uint32_t begin, uint32_t end, uint64_t ino, int (*call)(int), int fd) {
    if (sync_fault())
        return -1;
    pthread_mutex_lock(&lock);
    uint64_t seq = ++next_seq;
    journal(begin, seq, ino, 0, 0, 0, NULL, 0);
    pthread_mutex_unlock(&lock);
    int result = call(fd);
    int errno_ = errno;
    if (result == 0) {
        pthread_mutex_lock(&lock);
        journal(end, seq, ino, 0, 0, 0, NULL, 0);
        pthread_mutex_unlock(&lock);
    }
    errno = errno_;
    return result;
}

static int file_sync(int fd, int (*call)(int)) {
    struct stat st;
    if (!is_tracked(fd) || fstat(fd, &st) != 0)
        return call(fd);
    return synced('B', 'E', (uint64_t)st.st_ino, call, fd);
}

int fsync(int fd) { return file_sync(fd, real_fsync); }
int fdatasync(int fd) { return file_sync(fd, real_fdatasync); }

int syncfs(int fd) {
    if (!active)
        return real_syncfs(fd);
    return synced('F', 'G', 0, real_syncfs, fd);
}

static int call_sync(int fd) {
    (void)fd;
    real_sync();
    return 0;
}

void sync(void) {
    if (!active) {
        real_sync();
        return;
    }
    synced('F', 'G', 0, call_sync, 0);
}

static void *map_common(void *addr, size_t length, int prot, int flags, int fd, off_t offset,
                        void *(*real)(void *, size_t, int, int, int, off_t)) {
    void *p = real(addr, length, prot, flags, fd, offset);
    struct stat st;
    if (p == MAP_FAILED || !is_tracked(fd) || !(prot & PROT_WRITE) || !(flags & MAP_SHARED) || fstat(fd, &st) != 0)
        return p;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_MAPS; i++) {
        if (maps[i].address == 0) {
            maps[i] = (struct mapping){(uintptr_t)p, length, (uint64_t)st.st_ino};
            break;
        }
    }
    /* A writable shared mapping: its stores are not undone by a cut (counted for the report). */
    journal('P', 0, (uint64_t)st.st_ino, 0, offset, (int64_t)length, NULL, 0);
    pthread_mutex_unlock(&lock);
    return p;
}

void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
    return map_common(addr, length, prot, flags, fd, offset, real_mmap);
}

void *mmap64(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
    return map_common(addr, length, prot, flags, fd, offset, real_mmap64);
}

int munmap(void *addr, size_t length) {
    if (active) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_MAPS; i++)
            if (maps[i].address == (uintptr_t)addr)
                maps[i].address = 0;
        pthread_mutex_unlock(&lock);
    }
    return real_munmap(addr, length);
}

int msync(void *addr, size_t length, int flags) {
    uint64_t ino = 0;
    if (active) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < MAX_MAPS; i++)
            if (maps[i].address && (uintptr_t)addr >= maps[i].address &&
                (uintptr_t)addr < maps[i].address + maps[i].length)
                ino = maps[i].ino;
        pthread_mutex_unlock(&lock);
    }
    if (!ino || !(flags & MS_SYNC))
        return real_msync(addr, length, flags);
    if (sync_fault())
        return -1;
    pthread_mutex_lock(&lock);
    uint64_t seq = ++next_seq;
    journal('B', seq, ino, 0, 0, 0, NULL, 0);
    pthread_mutex_unlock(&lock);
    int result = real_msync(addr, length, flags);
    int errno_ = errno;
    if (result == 0) {
        pthread_mutex_lock(&lock);
        journal('E', seq, ino, 0, 0, 0, NULL, 0);
        pthread_mutex_unlock(&lock);
    }
    errno = errno_;
    return result;
}

/* -- directory entries ------------------------------------------------------------------------ */

static int entry_path(int dirfd, const char *path, char *abs) {
    return active && maybe_under_root(path) && resolve(dirfd, path, abs) == 0 && under_root(abs, 0);
}

static int removed(int dirfd, const char *path, int is_dir, int (*call)(void)) {
    char abs[PATH_MAX], bak[PATH_MAX];
    if (!entry_path(dirfd, path, abs))
        return call();
    pthread_mutex_lock(&lock);
    uint64_t seq = ++next_seq;
    bak[0] = 0;
    if (!is_dir)
        keep(abs, seq, bak);
    journal_entry(is_dir ? 'D' : 'U', seq, parent_ino(abs), 0, abs, bak, NULL);
    int result = call();
    int errno_ = errno;
    if (result != 0) {
        journal('X', seq, 0, 0, 0, 0, NULL, 0);
        if (bak[0])
            real_unlink(bak);
    }
    pthread_mutex_unlock(&lock);
    errno = errno_;
    return result;
}

static __thread const char *arg_path;
static __thread const char *arg_path2;
static __thread int arg_dirfd, arg_dirfd2, arg_flags;
static __thread mode_t arg_mode;

static int do_unlink(void) { return real_unlink(arg_path); }
static int do_rmdir(void) { return real_rmdir(arg_path); }
static int do_unlinkat(void) { return real_unlinkat(arg_dirfd, arg_path, arg_flags); }
static int do_mkdir(void) { return real_mkdir(arg_path, arg_mode); }
static int do_mkdirat(void) { return real_mkdirat(arg_dirfd, arg_path, arg_mode); }

int unlink(const char *path) {
    arg_path = path;
    return removed(AT_FDCWD, path, 0, do_unlink);
}

int rmdir(const char *path) {
    arg_path = path;
    return removed(AT_FDCWD, path, 1, do_rmdir);
}

int unlinkat(int dirfd, const char *path, int flags) {
    arg_dirfd = dirfd;
    arg_path = path;
    arg_flags = flags;
    return removed(dirfd, path, (flags & AT_REMOVEDIR) != 0, do_unlinkat);
}

static int created(int dirfd, const char *path, uint32_t kind, int (*call)(void)) {
    char abs[PATH_MAX];
    if (!entry_path(dirfd, path, abs))
        return call();
    pthread_mutex_lock(&lock);
    uint64_t seq = ++next_seq;
    journal_entry(kind, seq, parent_ino(abs), 0, abs, NULL, NULL);
    int result = call();
    int errno_ = errno;
    if (result != 0)
        journal('X', seq, 0, 0, 0, 0, NULL, 0);
    pthread_mutex_unlock(&lock);
    errno = errno_;
    return result;
}

int mkdir(const char *path, mode_t mode) {
    arg_path = path;
    arg_mode = mode;
    return created(AT_FDCWD, path, 'M', do_mkdir);
}

int mkdirat(int dirfd, const char *path, mode_t mode) {
    arg_dirfd = dirfd;
    arg_path = path;
    arg_mode = mode;
    return created(dirfd, path, 'M', do_mkdirat);
}

static int do_link(void) { return real_link(arg_path, arg_path2); }
static int do_linkat(void) { return real_linkat(arg_dirfd, arg_path, arg_dirfd2, arg_path2, arg_flags); }

int link(const char *old, const char *new) {
    arg_path = old;
    arg_path2 = new;
    return created(AT_FDCWD, new, 'C', do_link);
}

int linkat(int olddirfd, const char *old, int newdirfd, const char *new, int flags) {
    arg_dirfd = olddirfd;
    arg_path = old;
    arg_dirfd2 = newdirfd;
    arg_path2 = new;
    arg_flags = flags;
    return created(newdirfd, new, 'C', do_linkat);
}

static int renamed(int olddirfd, const char *old, int newdirfd, const char *new, int (*call)(void)) {
    char from[PATH_MAX], to[PATH_MAX], bak[PATH_MAX];
    int from_in = entry_path(olddirfd, old, from);
    int to_in = entry_path(newdirfd, new, to);
    if (!from_in && !to_in)
        return call();
    pthread_mutex_lock(&lock);
    uint64_t seq = ++next_seq;
    struct stat st;
    /* What the target was: a file (kept in the backup dir), an empty directory ("/"), or nothing. */
    bak[0] = 0;
    if (to_in && lstat(to, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            snprintf(bak, sizeof bak, "/");
        else
            keep(to, seq, bak);
    }
    journal_entry('R', seq, to_in ? parent_ino(to) : 0, from_in ? parent_ino(from) : 0, from_in ? from : "",
                  to_in ? to : "", bak);
    int result = call();
    int errno_ = errno;
    if (result != 0) {
        journal('X', seq, 0, 0, 0, 0, NULL, 0);
        if (bak[0] && bak[0] != '/')
            real_unlink(bak);
    }
    pthread_mutex_unlock(&lock);
    errno = errno_;
    return result;
}

static int do_rename(void) { return real_rename(arg_path, arg_path2); }
static int do_renameat(void) { return real_renameat(arg_dirfd, arg_path, arg_dirfd2, arg_path2); }
static int do_renameat2(void) {
    return real_renameat2(arg_dirfd, arg_path, arg_dirfd2, arg_path2, (unsigned int)arg_flags);
}

int rename(const char *old, const char *new) {
    arg_path = old;
    arg_path2 = new;
    return renamed(AT_FDCWD, old, AT_FDCWD, new, do_rename);
}

int renameat(int olddirfd, const char *old, int newdirfd, const char *new) {
    arg_dirfd = olddirfd;
    arg_path = old;
    arg_dirfd2 = newdirfd;
    arg_path2 = new;
    return renamed(olddirfd, old, newdirfd, new, do_renameat);
}

int renameat2(int olddirfd, const char *old, int newdirfd, const char *new, unsigned int flags) {
    arg_dirfd = olddirfd;
    arg_path = old;
    arg_dirfd2 = newdirfd;
    arg_path2 = new;
    arg_flags = (int)flags;
    return renamed(olddirfd, old, newdirfd, new, do_renameat2);
}
