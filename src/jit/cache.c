#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/error.h"
#include "base/warn.h"

int memra_cache_lock_timeout_ms = MEMRA_CACHE_LOCK_TIMEOUT_MS;

/* Entry layout: header, then the image. The checksum covers the whole
 * header (its own field taken as zeros) and the image, so a torn or
 * bit-flipped file is detected and rebuilt rather than handed to
 * cuModuleLoadData (PyTorch's kernel cache has no such check). It is not a
 * signature: what keeps planted images out is that nobody but the owner can
 * write the folder (see cache.h). */
#define ENTRY_MAGIC "MEMRAK03"
/* What versions 1 and 2 wrote (version 2's checksum left the last 16 header
 * bytes out): still memra's to count and evict, never read. */
#define ENTRY_MAGIC_V1 "MEMRAK01"
#define ENTRY_MAGIC_V2 "MEMRAK02"
typedef struct entry_header {
    char magic[8];
    uint64_t size;
    unsigned char key[16];
    unsigned char checksum[16];
    /* The key's inputs that vary between entries, so that an engine with no
     * NVRTC at all can recompute an entry's key and take it (find_any). */
    int32_t nvrtc_major, nvrtc_minor, arch, is_ptx;
} entry_header;
_Static_assert(sizeof(entry_header) == MEMRA_CACHE_HEADER_BYTES, "the header is 64 bytes");

/* Entries are a few hundred KiB; anything past this is not ours. */
#define ENTRY_MAX_BYTES (64 << 20)

static void hash_field(XXH3_state_t *st, const void *p, size_t n)
{
    /* Length-prefixed, so ("ab","c") and ("a","bc") differ. */
    uint64_t len = n;
    XXH3_128bits_update(st, &len, sizeof len);
    XXH3_128bits_update(st, p, n);
}

void memra_cache_key_of(const memra_cache_key_in *in, memra_cache_key *out)
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    hash_field(&st, "memra-kernel-cache-v1", 21);
    hash_field(&st, in->source, in->source_len);
    for (int i = 0; in->options[i]; i++)
        hash_field(&st, in->options[i], strlen(in->options[i]));
    const int32_t nums[4] = {in->nvrtc_major, in->nvrtc_minor, in->arch, in->is_ptx};
    hash_field(&st, nums, sizeof nums);
    hash_field(&st, in->lib_version, strlen(in->lib_version));
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(out->bytes, c.digest, sizeof out->bytes);
}

/* Over the header with its checksum field zeroed, then the image. */
static void checksum_of(const entry_header *h, const void *payload, size_t n, unsigned char out[16])
{
    entry_header z = *h;
    memset(z.checksum, 0, sizeof z.checksum);
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, &z, sizeof z);
    XXH3_128bits_update(&st, payload, n);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(out, c.digest, 16);
}

static void fill_header(entry_header *h, const memra_cache_key *key, int nvrtc_major,
                        int nvrtc_minor, const memra_image *img)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, ENTRY_MAGIC, 8);
    h->size = img->size;
    memcpy(h->key, key->bytes, 16);
    h->nvrtc_major = nvrtc_major, h->nvrtc_minor = nvrtc_minor;
    h->arch = img->arch, h->is_ptx = img->is_ptx;
    checksum_of(h, img->data, img->size, h->checksum);
}

int memra_cache_entry_bytes(const memra_cache_key *key, int nvrtc_major, int nvrtc_minor,
                            const memra_image *img, unsigned char **out, size_t *len)
{
    entry_header h;
    fill_header(&h, key, nvrtc_major, nvrtc_minor, img);
    if (!(*out = malloc(sizeof h + img->size)))
        return -1;
    memcpy(*out, &h, sizeof h);
    memcpy(*out + sizeof h, img->data, img->size);
    *len = sizeof h + img->size;
    return 0;
}

void memra_cache_entry_name(const memra_cache_key *key, int is_ptx, char *buf, size_t len)
{
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", key->bytes[i]);
    snprintf(buf, len, "%s.%s", hex, is_ptx ? "ptx" : "cubin");
}

static void key_for(const memra_source *src, int nvrtc_major, int nvrtc_minor, int arch, int is_ptx,
                    memra_cache_key *key)
{
    memra_cache_key_in in = {src->text, src->len, memra_jit_options,   nvrtc_major, nvrtc_minor,
                             arch,      is_ptx,   MEMRA_VERSION_STRING};
    memra_cache_key_of(&in, key);
}

int memra_cache_parse(const void *buf, size_t len, const memra_cache_key *key, memra_image *img)
{
    memset(img, 0, sizeof *img);
    entry_header h;
    if (len < sizeof h)
        return 0;
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, ENTRY_MAGIC, 8) != 0 || memcmp(h.key, key->bytes, 16) != 0 || h.size == 0 ||
        h.size != len - sizeof h)
        return 0;
    const unsigned char *payload = (const unsigned char *)buf + sizeof h;
    unsigned char sum[16];
    checksum_of(&h, payload, h.size, sum);
    if (memcmp(sum, h.checksum, 16) != 0)
        return 0;
    if (!(img->data = malloc(h.size)))
        return 0;
    memcpy(img->data, payload, h.size);
    img->size = h.size;
    return 1;
}

/* ---- names ---------------------------------------------------------------
 * <32 hex>.cubin|.ptx        an entry
 * <entry>.lock               its lock file
 * <entry>.tmp.<pid>[.<hex>]  a temp file being written (the bare .<pid> form
 *                            is what older versions left behind)
 * Nothing else in the folder is memra's, whatever its extension. */
typedef enum { NAME_OTHER, NAME_ENTRY, NAME_LOCK, NAME_TEMP } name_kind;

static size_t hex_run(const char *s)
{
    size_t n = 0;
    while ((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))
        n++;
    return n;
}

static name_kind classify(const char *name, long *pid)
{
    if (hex_run(name) != 32 || name[32] != '.')
        return NAME_OTHER;
    const char *ext = name + 33;
    size_t elen = strncmp(ext, "cubin", 5) == 0 ? 5 : strncmp(ext, "ptx", 3) == 0 ? 3 : 0;
    if (!elen)
        return NAME_OTHER;
    const char *rest = ext + elen;
    if (*rest == '\0')
        return NAME_ENTRY;
    if (strcmp(rest, ".lock") == 0)
        return NAME_LOCK;
    if (strncmp(rest, ".tmp.", 5) != 0 || rest[5] < '1' || rest[5] > '9')
        return NAME_OTHER;
    char *end;
    errno = 0;
    *pid = strtol(rest + 5, &end, 10);
    if (errno || *pid <= 0)
        return NAME_OTHER;
    if (*end == '\0' || (*end == '.' && hex_run(end + 1) == 16 && end[17] == '\0'))
        return NAME_TEMP;
    return NAME_OTHER;
}

/* ---- trust ---------------------------------------------------------------- */

/* Ours: the right type, owned by the effective uid, writable by nobody else. */
static int owned(const struct stat *sb, mode_t type, char *why, size_t n)
{
    if ((sb->st_mode & S_IFMT) != type) {
        snprintf(why, n, "is not a %s", type == S_IFDIR ? "folder" : "regular file");
        return 0;
    }
    if (sb->st_uid != geteuid()) {
        snprintf(why, n, "is owned by uid %u, not by this process's uid %u", (unsigned)sb->st_uid,
                 (unsigned)geteuid());
        return 0;
    }
    if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, n, "is writable by group or others (mode %03o)",
                 (unsigned)(sb->st_mode & 0777));
        return 0;
    }
    return 1;
}

/* Folders found untrusted once stay unused for the process's life. */
static pthread_mutex_t distrust_lock = PTHREAD_MUTEX_INITIALIZER;
static char distrusted[MEMRA_CACHE_PATH_MAX];

static int is_distrusted(const char *dir)
{
    pthread_mutex_lock(&distrust_lock);
    int r = strcmp(distrusted, dir) == 0;
    pthread_mutex_unlock(&distrust_lock);
    return r;
}

static void distrust(const char *dir, const char *what, const char *why)
{
    pthread_mutex_lock(&distrust_lock);
    snprintf(distrusted, sizeof distrusted, "%s", dir);
    pthread_mutex_unlock(&distrust_lock);
    memra_warn(MEMRA_WARN_CACHE_FOLDER,
               "kernel cache %s%s%s %s: the disk cache is not used by this process; compiling in "
               "memory",
               dir, what ? "/" : "", what ? what : "", why);
}

/* mkdir -p with 0700 for what it creates (the XDG spec's mode for cache
 * folders); existing components are left as they are. */
static int mkdir_p(const char *dir)
{
    char p[MEMRA_CACHE_PATH_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0700) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    }
    return mkdir(p, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

enum { OPEN_OK = 0, OPEN_ABSENT = -1, OPEN_FAILED = -2, OPEN_UNTRUSTED = -3 };

/* The cache folder as a descriptor that every later call is relative to, so
 * a path swapped after the check cannot redirect a read or a write. */
static int open_folder(const char *dir, int create, int *fd, char *why, size_t n)
{
    if (create && mkdir_p(dir) != 0) {
        snprintf(why, n, "cannot be created (%s)", strerror(errno));
        return OPEN_FAILED;
    }
    *fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0) {
        if (errno == ENOENT)
            return OPEN_ABSENT;
        /* O_NOFOLLOW|O_DIRECTORY on a link gives ELOOP or ENOTDIR. */
        struct stat lsb;
        if (errno == ELOOP || (errno == ENOTDIR && lstat(dir, &lsb) == 0 && S_ISLNK(lsb.st_mode))) {
            snprintf(why, n, "is a symbolic link, which memra does not follow");
            return OPEN_UNTRUSTED;
        }
        if (errno == ENOTDIR) {
            snprintf(why, n, "is not a folder");
            return OPEN_UNTRUSTED;
        }
        snprintf(why, n, "cannot be opened (%s)", strerror(errno));
        return OPEN_FAILED;
    }
    struct stat sb;
    if (fstat(*fd, &sb) != 0 || !owned(&sb, S_IFDIR, why, n)) {
        close(*fd);
        *fd = -1;
        return OPEN_UNTRUSTED;
    }
    return OPEN_OK;
}

/* A file in the folder: never through a symlink, never blocking on a FIFO or
 * device, only a regular file of ours. */
static int open_file(int dfd, const char *name, int flags, struct stat *sb, char *why, size_t n)
{
    int fd = openat(dfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == ENOENT)
            return OPEN_ABSENT;
        if (errno == ELOOP) {
            snprintf(why, n, "is a symbolic link, which memra does not follow");
            return OPEN_UNTRUSTED;
        }
        snprintf(why, n, "cannot be opened (%s)", strerror(errno));
        return errno == EISDIR || errno == ENXIO ? OPEN_UNTRUSTED : OPEN_FAILED;
    }
    if (fstat(fd, sb) != 0 || !owned(sb, S_IFREG, why, n)) {
        close(fd);
        return OPEN_UNTRUSTED;
    }
    return fd;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r, len -= (size_t)r;
    }
    return 0;
}

/* 1 = a valid entry (img filled), 0 = absent or corrupt (rebuild it),
 * OPEN_UNTRUSTED or OPEN_FAILED with why. */
static int read_entry(int dfd, const char *name, const memra_cache_key *key, memra_image *img,
                      char *why, size_t n)
{
    memset(img, 0, sizeof *img);
    struct stat sb;
    int fd = open_file(dfd, name, O_RDONLY, &sb, why, n);
    if (fd == OPEN_ABSENT)
        return 0;
    if (fd < 0)
        return fd;
    char *buf = NULL;
    int ok = sb.st_size > 0 && sb.st_size < ENTRY_MAX_BYTES && (buf = malloc((size_t)sb.st_size)) &&
             read_all(fd, buf, (size_t)sb.st_size) == 0 &&
             memra_cache_parse(buf, (size_t)sb.st_size, key, img);
    free(buf);
    close(fd);
    return ok;
}

/* Does the file start with memra's magic? Only such files are ever evicted. */
static int has_magic(int dfd, const char *name)
{
    struct stat sb;
    char why[160], magic[8];
    int fd = open_file(dfd, name, O_RDONLY, &sb, why, sizeof why);
    if (fd < 0)
        return 0;
    int ok = read_all(fd, magic, sizeof magic) == 0 &&
             (memcmp(magic, ENTRY_MAGIC, 8) == 0 || memcmp(magic, ENTRY_MAGIC_V2, 8) == 0 ||
              memcmp(magic, ENTRY_MAGIC_V1, 8) == 0);
    close(fd);
    return ok;
}

/* ---- publishing ------------------------------------------------------------ */

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w, len -= (size_t)w;
    }
    return 0;
}

/* A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action kills the
 * process: a serving process must lose its cache entry, not its life. The
 * signal is held for this thread during the write and a SIGXFSZ that the
 * write raised is taken off again (one already pending is left alone). */
static int write_guarded(int fd, const entry_header *h, const memra_image *img)
{
    sigset_t xfsz, old, pending;
    sigemptyset(&xfsz);
    sigaddset(&xfsz, SIGXFSZ);
    sigpending(&pending);
    const int was_pending = sigismember(&pending, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &xfsz, &old);
    int r = write_all(fd, h, sizeof *h) == 0 && write_all(fd, img->data, img->size) == 0 &&
                    fsync(fd) == 0
                ? 0
                : -1;
    const int err = errno;
    if (!was_pending && sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ)) {
        const struct timespec zero = {0, 0};
        sigtimedwait(&xfsz, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return r;
}

/* A name nobody else can predict, so a planted file or link under it cannot
 * exist already (O_EXCL refuses it if it does). */
static void temp_name(const char *entry, char *buf, size_t len)
{
    static _Atomic unsigned long long counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const unsigned long long seed[4] = {(unsigned long long)getpid(),
                                        (unsigned long long)ts.tv_nsec,
                                        (unsigned long long)ts.tv_sec, ++counter};
    snprintf(buf, len, "%s.tmp.%ld.%016llx", entry, (long)getpid(),
             (unsigned long long)XXH3_64bits_withSeed(seed, sizeof seed, (uintptr_t)buf));
}

/* Temp file in the folder, then renameat: readers see the whole entry or
 * none of it, and a link planted at the entry's name is replaced, never
 * followed. Returns 0, or -1 with errno. */
static int publish(int dfd, const char *name, const memra_cache_key *key, const memra_image *img,
                   const memra_nvrtc *nv)
{
    char tmp[MEMRA_CACHE_NAME_MAX + 48];
    int fd = -1;
    for (int attempt = 0; attempt < 8 && fd < 0; attempt++) {
        temp_name(name, tmp, sizeof tmp);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            return -1;
    }
    if (fd < 0)
        return -1;
    entry_header h;
    fill_header(&h, key, nv->major, nv->minor, img);
    int r = write_guarded(fd, &h, img);
    int err = errno;
    if (close(fd) != 0 && r == 0)
        r = -1, err = errno;
    if (r == 0 && renameat(dfd, tmp, dfd, name) != 0)
        r = -1, err = errno;
    if (r != 0)
        unlinkat(dfd, tmp, 0);
    errno = err;
    return r;
}

/* ---- the folder's contents --------------------------------------------------- */

typedef struct scan_item {
    char name[MEMRA_CACHE_NAME_MAX + 48];
    uint64_t size;
    struct timespec mtime;
} scan_item;

static int older_first(const void *a, const void *b)
{
    const struct timespec *x = &((const scan_item *)a)->mtime;
    const struct timespec *y = &((const scan_item *)b)->mtime;
    if (x->tv_sec != y->tv_sec)
        return x->tv_sec < y->tv_sec ? -1 : 1;
    return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

/* A temp file whose writer is gone, or that no live writer would take so
 * long over. */
static int stale_temp(long pid, const struct stat *sb)
{
    const time_t age = time(NULL) - sb->st_mtim.tv_sec;
    if (age > MEMRA_CACHE_STALE_TEMP_S)
        return 1;
    return age > 10 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* One pass over the folder: the bytes of memra's entries and live temp
 * files; with `evict`, stale temp files are removed and the oldest entries
 * (by modification time, refreshed on every hit) go until the folder is
 * under `cap`. `keep` is never evicted. */
static void drop_idle_lock(int dfd, const char *lock);
static uint64_t scan(int dfd, int evict, const char *keep, uint64_t cap)
{
    int dup_fd = dup(dfd);
    DIR *dp = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!dp) {
        if (dup_fd >= 0)
            close(dup_fd);
        return 0;
    }
    scan_item *v = NULL;
    size_t n = 0, room = 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        long pid = 0;
        const name_kind kind = classify(e->d_name, &pid);
        struct stat sb;
        char why[160];
        if (kind == NAME_LOCK && evict) {
            drop_idle_lock(dfd, e->d_name);
            continue;
        }
        if ((kind != NAME_ENTRY && kind != NAME_TEMP) ||
            fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
            !owned(&sb, S_IFREG, why, sizeof why))
            continue;
        if (kind == NAME_TEMP) {
            if (stale_temp(pid, &sb)) {
                if (evict)
                    unlinkat(dfd, e->d_name, 0);
                else
                    total += (uint64_t)sb.st_size; /* debris still takes room */
            } else {
                total += (uint64_t)sb.st_size;
            }
            continue;
        }
        if (!has_magic(dfd, e->d_name))
            continue;
        total += (uint64_t)sb.st_size;
        if (!evict || (keep && strcmp(e->d_name, keep) == 0))
            continue;
        if (n == room) {
            scan_item *grown = realloc(v, (room = room ? 2 * room : 16) * sizeof *v);
            if (!grown)
                break;
            v = grown;
        }
        snprintf(v[n].name, sizeof v[n].name, "%.47s", e->d_name); /* classify() bounds it */
        v[n].size = (uint64_t)sb.st_size;
        v[n].mtime = sb.st_mtim;
        n++;
    }
    closedir(dp);
    if (n > 1) /* qsort's array may not be NULL, even for 0 elements */
        qsort(v, n, sizeof *v, older_first);
    for (size_t i = 0; i < n && total > cap; i++)
        if (unlinkat(dfd, v[i].name, 0) == 0)
            total -= v[i].size;
    free(v);
    return total;
}

uint64_t memra_cache_size(const char *dir)
{
    int dfd;
    char why[256];
    if (open_folder(dir, 0, &dfd, why, sizeof why) != OPEN_OK)
        return 0;
    uint64_t total = scan(dfd, 0, NULL, 0);
    close(dfd);
    return total;
}

/* ---- the lock ------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Set when a lock wait ran out; cleared by a sign of a live peer (a lock
 * taken, a lock file its holder removed): a peer that hangs holding its
 * locks (or every lock of a shared folder) costs one full wait, not one per
 * module an engine loads (a dozen and more: each added the full timeout).
 * Meanwhile each wait is a tenth of the timeout, long enough for a live
 * peer's lock to be seen going. */
static _Atomic int lock_wait_ran_out;

/* The wait for one lock, in ms. */
static double lock_wait_ms(void)
{
    return atomic_load(&lock_wait_ran_out) ? memra_cache_lock_timeout_ms / 10.0
                                           : (double)memra_cache_lock_timeout_ms;
}

/* flock by `deadline` (now_ms()): a hung peer, or another user's process
 * holding a lock file, costs this process a compile, never its progress.
 * 0 = locked; else why not. */
static int lock_bounded(int fd, double deadline, char *why, size_t n)
{
    long pause_us = 1000;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK) {
            /* ENOLCK (NFS without a lock manager) and friends. */
            snprintf(why, n, "cannot be locked (%s)", strerror(errno));
            return -1;
        }
        if (now_ms() >= deadline) {
            atomic_store(&lock_wait_ran_out, 1);
            snprintf(why, n,
                     "is held by another process past the wait (%d ms, a tenth of it "
                     "once a wait has run out)",
                     memra_cache_lock_timeout_ms);
            return -1;
        }
        const struct timespec ts = {0, pause_us * 1000};
        nanosleep(&ts, NULL);
        if (pause_us < 50000)
            pause_us *= 2;
    }
}

/* Is `name` in the folder still the file `fd` has open? */
static int still_named(int dfd, const char *name, int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* An entry's lock file, opened (made if need be) and locked within the
 * timeout. Lock files do not pile up, one for every entry ever made: the
 * holder removes its lock file before letting go (release_lock), so a
 * process that opened the old file and locks it after finds the name gone
 * or another file there, and opens the name again. The lock only spares
 * duplicate compiles: entries are published by rename, whole, so a process
 * that locks a removed file (an older memra that does not check) costs a
 * compile, nothing more. Returns the descriptor (*held: locked) or OPEN_*
 * with why. */
static int acquire_lock(int dfd, const char *lock, int *held, char *why, size_t n)
{
    double deadline = now_ms() + lock_wait_ms();
    *held = 0;
    for (;;) {
        struct stat sb;
        const int fd = open_file(dfd, lock, O_RDWR | O_CREAT, &sb, why, n);
        if (fd < 0 || lock_bounded(fd, deadline, why, n) != 0)
            return fd;
        if (still_named(dfd, lock, fd)) {
            atomic_store(&lock_wait_ran_out, 0);
            *held = 1;
            return fd;
        }
        flock(fd, LOCK_UN);
        /* Its holder removed it: a live peer, finishing. Waits are whole
         * again, this one too. */
        if (atomic_exchange(&lock_wait_ran_out, 0))
            deadline = now_ms() + memra_cache_lock_timeout_ms;
        if (now_ms() >= deadline) {
            snprintf(why, n, "was removed and made again for more than %d ms",
                     memra_cache_lock_timeout_ms);
            return fd;
        }
        close(fd);
    }
}

/* Lets go of a held lock, removing its file first (acquire_lock says why
 * that is safe). */
static void release_lock(int dfd, const char *lock, int fd)
{
    if (still_named(dfd, lock, fd))
        unlinkat(dfd, lock, 0);
    flock(fd, LOCK_UN);
}

/* A lock file nobody holds (left by a killed process, or by a memra older
 * than release_lock): removed by taking it first, never one in use. */
static void drop_idle_lock(int dfd, const char *lock)
{
    struct stat sb;
    char why[160];
    const int fd = open_file(dfd, lock, O_RDONLY, &sb, why, sizeof why);
    if (fd < 0)
        return;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        release_lock(dfd, lock, fd);
    close(fd);
}

/* ---- the cache ------------------------------------------------------------ */

/* The key and file name of this library's entry for (arch, is_ptx) as
 * built by `nv`. */
static void entry_for(const memra_nvrtc *nv, const memra_source *src, int arch, int is_ptx,
                      memra_cache_key *key, char *name, size_t len)
{
    key_for(src, nv->major, nv->minor, arch, is_ptx, key);
    memra_cache_entry_name(key, is_ptx, name, len);
}

/* Opens the cache folder for use, or says (once) why it cannot be used.
 * OPEN_OK with *dfd, else the caller compiles in memory. */
static int use_folder(const char *dir, int create, int *dfd)
{
    if (is_distrusted(dir))
        return OPEN_UNTRUSTED;
    char why[256];
    const int r = open_folder(dir, create, dfd, why, sizeof why);
    if (r == OPEN_UNTRUSTED)
        distrust(dir, NULL, why);
    else if (r == OPEN_FAILED)
        memra_warn(MEMRA_WARN_CACHE_FOLDER, "kernel cache folder %s %s; compiling in memory", dir,
                   why);
    return r;
}

/* Takes the entry if it is valid; says whether to go on with the folder. */
static int take_entry(const char *dir, int dfd, const char *name, const memra_cache_key *key,
                      memra_image *img, int *found)
{
    char why[256];
    const int r = read_entry(dfd, name, key, img, why, sizeof why);
    *found = r == 1;
    if (r == OPEN_UNTRUSTED) {
        distrust(dir, name, why);
        return 0;
    }
    if (r == OPEN_FAILED) {
        memra_warn(MEMRA_WARN_CACHE_FOLDER, "kernel cache entry %s/%s %s; compiling in memory", dir,
                   name, why);
        return 0;
    }
    if (*found) /* recently used: evicted last */
        utimensat(dfd, name, NULL, AT_SYMLINK_NOFOLLOW);
    return 1;
}

static void finish(memra_image *img, int arch, int is_ptx)
{
    img->is_ptx = is_ptx, img->arch = arch;
}

memra_status memra_cache_get_image(const memra_nvrtc *nv, const memra_source *src, int arch,
                                   int is_ptx, memra_image *img, int *from_cache)
{
    *from_cache = 0;
    memset(img, 0, sizeof *img);
    char dir[MEMRA_CACHE_PATH_MAX];
    const uint64_t cap = memra_cache_cap();
    int dfd = -1;
    if (!memra_cache_dir(dir, sizeof dir) || use_folder(dir, cap > 0, &dfd) != OPEN_OK)
        return memra_jit_compile(nv, src, arch, is_ptx, img);

    memra_cache_key key;
    char name[MEMRA_CACHE_NAME_MAX], lock[MEMRA_CACHE_NAME_MAX + 8], why[256] = "is missing";
    entry_for(nv, src, arch, is_ptx, &key, name, sizeof name);
    memra_status st;
    int found = 0, lfd = -1;
    if (cap == 0) {
        /* 0 keeps nothing on disk: compile, and clear out what is there. */
        st = memra_jit_compile(nv, src, arch, is_ptx, img);
        scan(dfd, 1, NULL, 0);
        goto out;
    }
    if (!take_entry(dir, dfd, name, &key, img, &found) || found) {
        st = found ? MEMRA_OK : memra_jit_compile(nv, src, arch, is_ptx, img);
        *from_cache = found;
        goto out;
    }

    snprintf(lock, sizeof lock, "%s.lock", name);
    int held = 0;
    lfd = acquire_lock(dfd, lock, &held, why, sizeof why);
    if (lfd == OPEN_UNTRUSTED) {
        distrust(dir, lock, why);
    } else if (lfd < 0) {
        memra_warn(MEMRA_WARN_CACHE_FOLDER, "kernel cache lock %s/%s %s; compiling in memory", dir,
                   lock, why);
    } else if (!held) {
        /* The holder may have published while this process waited. */
        if (take_entry(dir, dfd, name, &key, img, &found) && !found)
            memra_warn(MEMRA_WARN_CACHE_LOCK,
                       "kernel cache lock %s/%s %s; compiling in memory without publishing", dir,
                       lock, why);
    } else if (take_entry(dir, dfd, name, &key, img, &found) && !found) {
        /* Whoever holds the lock compiles; the others waited and now read. */
        st = memra_jit_compile(nv, src, arch, is_ptx, img);
        if (st == MEMRA_OK) {
            if (publish(dfd, name, &key, img, nv) == 0)
                scan(dfd, 1, name, cap);
            else
                memra_warn(MEMRA_WARN_CACHE_WRITE, "kernel cache entry %s/%s not written (%s)", dir,
                           name, strerror(errno));
        }
        release_lock(dfd, lock, lfd);
        goto out;
    }
    if (held)
        release_lock(dfd, lock, lfd);
    st = found ? MEMRA_OK : memra_jit_compile(nv, src, arch, is_ptx, img);
    *from_cache = found;
out:
    if (lfd >= 0)
        close(lfd);
    close(dfd);
    finish(img, arch, is_ptx);
    return st;
}

void memra_cache_put(const memra_nvrtc *nv, const memra_source *src, int arch, int is_ptx,
                     const memra_image *img)
{
    char dir[MEMRA_CACHE_PATH_MAX], name[MEMRA_CACHE_NAME_MAX];
    const uint64_t cap = memra_cache_cap();
    int dfd;
    if (cap == 0 || !memra_cache_dir(dir, sizeof dir) || use_folder(dir, 1, &dfd) != OPEN_OK)
        return;
    memra_cache_key key;
    entry_for(nv, src, arch, is_ptx, &key, name, sizeof name);
    if (publish(dfd, name, &key, img, nv) == 0)
        scan(dfd, 1, name, cap);
    close(dfd);
}

int memra_cache_has_entry(const memra_nvrtc *nv, const memra_source *src, int arch, int is_ptx,
                          char *path, size_t len)
{
    char dir[MEMRA_CACHE_PATH_MAX], name[MEMRA_CACHE_NAME_MAX], why[256];
    memra_cache_key key;
    if (!memra_cache_dir(dir, sizeof dir))
        return 0;
    entry_for(nv, src, arch, is_ptx, &key, name, sizeof name);
    snprintf(path, len, "%s/%s", dir, name);
    int dfd;
    if (open_folder(dir, 0, &dfd, why, sizeof why) != OPEN_OK)
        return 0;
    memra_image img;
    const int ok = read_entry(dfd, name, &key, &img, why, sizeof why) == 1;
    memra_image_free(&img);
    close(dfd);
    return ok;
}

typedef struct any_entry {
    char name[MEMRA_CACHE_NAME_MAX];
    int score;
    entry_header h;
} any_entry;

static int better_first(const void *a, const void *b)
{
    const any_entry *x = a, *y = b;
    /* Comparisons, not differences: the fields come from files. */
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    if (x->h.arch != y->h.arch)
        return x->h.arch < y->h.arch ? 1 : -1;
    if (x->h.nvrtc_major != y->h.nvrtc_major)
        return x->h.nvrtc_major < y->h.nvrtc_major ? 1 : -1;
    return x->h.nvrtc_minor < y->h.nvrtc_minor ? 1 : x->h.nvrtc_minor > y->h.nvrtc_minor ? -1 : 0;
}

/* How well an entry suits the device and driver, by the rules NVRTC
 * candidates are chosen by (jit.c): 3 exact CUBIN, 2 binary-compatible
 * CUBIN, 1 PTX, 0 unusable. */
static int entry_score(const entry_header *h, int sm, int driver_version)
{
    memra_nvrtc as_built;
    memset(&as_built, 0, sizeof as_built);
    as_built.major = h->nvrtc_major, as_built.minor = h->nvrtc_minor;
    as_built.archs[0] = h->arch, as_built.n_archs = 1;
    char why[256];
    int arch;
    if (!memra_jit_target(&as_built, sm, driver_version, h->is_ptx, &arch, why, sizeof why))
        return 0;
    return h->is_ptx ? 1 : h->arch == sm ? 3 : 2;
}

int memra_cache_find_any(const memra_source *src, int sm, int driver_version, int rank,
                         memra_image *img, memra_cache_found *found)
{
    memset(img, 0, sizeof *img);
    char dir[MEMRA_CACHE_PATH_MAX];
    int dfd;
    if (!memra_cache_dir(dir, sizeof dir) || use_folder(dir, 0, &dfd) != OPEN_OK)
        return 0;
    int dup_fd = dup(dfd);
    DIR *dp = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!dp) {
        if (dup_fd >= 0)
            close(dup_fd);
        close(dfd);
        return 0;
    }
    any_entry *v = NULL;
    size_t n = 0, room = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        long pid;
        struct stat sb;
        char why[256];
        entry_header h;
        if (classify(e->d_name, &pid) != NAME_ENTRY)
            continue;
        const int fd = open_file(dfd, e->d_name, O_RDONLY, &sb, why, sizeof why);
        if (fd < 0)
            continue;
        const int ok = read_all(fd, &h, sizeof h) == 0 && memcmp(h.magic, ENTRY_MAGIC, 8) == 0;
        close(fd);
        /* Ours only if its key recomputes from our source, options and
         * version with the NVRTC version and target it says it was built
         * with; the checksum is checked when it is read. */
        memra_cache_key key;
        char name[MEMRA_CACHE_NAME_MAX];
        if (!ok)
            continue;
        key_for(src, h.nvrtc_major, h.nvrtc_minor, h.arch, h.is_ptx, &key);
        memra_cache_entry_name(&key, h.is_ptx, name, sizeof name);
        /* ours first: a corrupt header's numbers are never scored */
        if (memcmp(key.bytes, h.key, 16) != 0 || strcmp(name, e->d_name) != 0)
            continue;
        const int score = entry_score(&h, sm, driver_version);
        if (!score)
            continue;
        if (n == room) {
            any_entry *grown = realloc(v, (room = room ? 2 * room : 8) * sizeof *v);
            if (!grown)
                break;
            v = grown;
        }
        snprintf(v[n].name, sizeof v[n].name, "%s", name);
        v[n].score = score;
        v[n].h = h;
        n++;
    }
    closedir(dp);
    if (n > 1)
        qsort(v, n, sizeof *v, better_first);
    int got = 0;
    for (size_t i = (size_t)rank; i < n && !got; i++) {
        memra_cache_key key;
        char why[256];
        key_for(src, v[i].h.nvrtc_major, v[i].h.nvrtc_minor, v[i].h.arch, v[i].h.is_ptx, &key);
        if (read_entry(dfd, v[i].name, &key, img, why, sizeof why) == 1) {
            got = 1;
            found->nvrtc_major = v[i].h.nvrtc_major, found->nvrtc_minor = v[i].h.nvrtc_minor;
            img->arch = found->arch = v[i].h.arch;
            img->is_ptx = found->is_ptx = v[i].h.is_ptx;
        }
    }
    free(v);
    close(dfd);
    return got;
}

_Static_assert(sizeof(((memra_cache_info *)0)->dir) == MEMRA_CACHE_PATH_MAX,
               "the public struct holds any cache path memra uses");

memra_status memra_cache_get_info(memra_cache_info *out)
{
    if (!out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_cache_get_info: out is NULL");
    memset(out, 0, sizeof *out);
    out->max_bytes = memra_cache_cap();
    if (!memra_cache_dir(out->dir, sizeof out->dir)) {
        out->dir[0] = 0; /* "" when off: memra_cache_dir may have left a cut or refused path */
        return MEMRA_OK;
    }
    /* Enabled as the cache itself would find it: a folder it refuses (not a
     * folder, a link, another user's; the warning says why) is off, one
     * not made yet is made by the first entry. */
    int dfd;
    const int r = use_folder(out->dir, 0, &dfd);
    if (r == OPEN_OK) { /* sized through the descriptor just checked, not a second open */
        out->bytes = scan(dfd, 0, NULL, 0);
        close(dfd);
    }
    out->enabled = r == OPEN_OK || r == OPEN_ABSENT;
    if (!out->enabled)
        out->dir[0] = 0;
    return MEMRA_OK;
}
