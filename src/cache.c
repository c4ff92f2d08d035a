#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"

/* Entry layout: header, then the image. The checksum covers the image, so a
 * torn or bit-flipped file is detected and rebuilt rather than handed to
 * cuModuleLoadData (PyTorch's kernel cache has no such check). */
#define ENTRY_MAGIC "MEMRAK01"
typedef struct entry_header {
    char magic[8];
    uint64_t size;
    unsigned char key[16];
    unsigned char checksum[16];
} entry_header;

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

static void checksum_of(const void *p, size_t n, unsigned char out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(p, n));
    memcpy(out, c.digest, 16);
}

int memra_cache_dir(char *buf, size_t len)
{
    const char *env = getenv("MEMRA_CACHE_DIR");
    if (env && strcmp(env, "off") == 0)
        return 0;
    if (env && *env)
        return snprintf(buf, len, "%s", env) < (int)len;
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg)
        return snprintf(buf, len, "%s/memra", xdg) < (int)len;
    const char *home = getenv("HOME");
    if (home && *home)
        return snprintf(buf, len, "%s/.cache/memra", home) < (int)len;
    return 0;
}

uint64_t memra_cache_cap(void)
{
    const char *env = getenv("MEMRA_CACHE_MAX_BYTES");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == '\0')
            return v;
    }
    return 256ull << 20;
}

void memra_cache_entry_path(const char *dir, const memra_cache_key *key, int is_ptx, char *buf,
                            size_t len)
{
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", key->bytes[i]);
    snprintf(buf, len, "%s/%s.%s", dir, hex, is_ptx ? "ptx" : "cubin");
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
    checksum_of(payload, h.size, sum);
    if (memcmp(sum, h.checksum, 16) != 0)
        return 0;
    if (!(img->data = malloc(h.size)))
        return 0;
    memcpy(img->data, payload, h.size);
    img->size = h.size;
    return 1;
}

int memra_cache_read(const char *path, const memra_cache_key *key, memra_image *img)
{
    memset(img, 0, sizeof *img);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    struct stat sb;
    char *buf = NULL;
    /* Entries are a few hundred KiB; anything past 64 MiB is not ours. */
    int ok = fstat(fileno(f), &sb) == 0 && sb.st_size > 0 && sb.st_size < (64 << 20) &&
             (buf = malloc((size_t)sb.st_size)) &&
             fread(buf, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size;
    fclose(f);
    ok = ok && memra_cache_parse(buf, (size_t)sb.st_size, key, img);
    free(buf);
    return ok;
}

/* Temp file in the same folder, then rename: readers see the whole entry or
 * none of it. */
static int publish(const char *path, const memra_cache_key *key, const memra_image *img)
{
    char tmp[1300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    entry_header h;
    memcpy(h.magic, ENTRY_MAGIC, 8);
    h.size = img->size;
    memcpy(h.key, key->bytes, 16);
    checksum_of(img->data, img->size, h.checksum);
    FILE *f = fdopen(fd, "wb");
    int ok = f && fwrite(&h, sizeof h, 1, f) == 1 &&
             fwrite(img->data, 1, img->size, f) == img->size && fflush(f) == 0 && fsync(fd) == 0;
    if (f)
        ok = (fclose(f) == 0) && ok;
    else
        close(fd);
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int is_entry(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && strlen(name) > 32 && (strcmp(dot, ".cubin") == 0 || strcmp(dot, ".ptx") == 0);
}

uint64_t memra_cache_size(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    uint64_t total = 0;
    struct dirent *e;
    char p[1300];
    while ((e = readdir(dp))) {
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (is_entry(e->d_name) && stat(p, &sb) == 0)
            total += (uint64_t)sb.st_size;
    }
    closedir(dp);
    return total;
}

typedef struct cache_entry {
    char path[1300];
    uint64_t size;
    struct timespec mtime;
} cache_entry;

static int older_first(const void *a, const void *b)
{
    const struct timespec *x = &((const cache_entry *)a)->mtime;
    const struct timespec *y = &((const cache_entry *)b)->mtime;
    if (x->tv_sec != y->tv_sec)
        return x->tv_sec < y->tv_sec ? -1 : 1;
    return (x->tv_nsec > y->tv_nsec) - (x->tv_nsec < y->tv_nsec);
}

/* Oldest entries (by modification time, refreshed on every hit) go first
 * until the folder is under its cap; `keep` is never evicted. One scan of the
 * folder, then deletions in age order. */
static void evict(const char *dir, const char *keep, uint64_t cap)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    cache_entry *v = NULL;
    size_t n = 0, room = 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        struct stat sb;
        char p[1300];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!is_entry(e->d_name) || stat(p, &sb) != 0)
            continue;
        total += (uint64_t)sb.st_size;
        if (strcmp(p, keep) == 0)
            continue;
        if (n == room) {
            cache_entry *grown = realloc(v, (room = room ? 2 * room : 16) * sizeof *v);
            if (!grown)
                break;
            v = grown;
        }
        snprintf(v[n].path, sizeof v[n].path, "%s", p);
        v[n].size = (uint64_t)sb.st_size;
        v[n].mtime = sb.st_mtim;
        n++;
    }
    closedir(dp);
    if (n > 1) /* qsort's array may not be NULL, even for 0 elements */
        qsort(v, n, sizeof *v, older_first);
    for (size_t i = 0; i < n && total > cap; i++)
        if (unlink(v[i].path) == 0)
            total -= v[i].size;
    free(v);
}

static int mkdir_p(const char *dir)
{
    char p[1024];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static pthread_once_t warn_once = PTHREAD_ONCE_INIT;
static char warn_text[1700];
static void print_warning(void)
{
    fprintf(stderr, "memra: warning: %s\n", warn_text);
}

static memra_status compile_in_memory(const memra_driver *d, int arch, int is_ptx, memra_image *img,
                                      const char *why)
{
    if (why) {
        snprintf(warn_text, sizeof warn_text, "%s; compiling in memory", why);
        pthread_once(&warn_once, print_warning);
    }
    return memra_jit_compile(d, arch, is_ptx, img);
}

/* The key and path of this library's entry for (arch, is_ptx). */
static void entry_for(const memra_driver *d, const char *dir, int arch, int is_ptx,
                      memra_cache_key *key, char *path, size_t len)
{
    int maj = 0, min = 0;
    d->nvrtcVersion(&maj, &min);
    memra_cache_key_in in = {memra_kernel_vrows_src,
                             memra_kernel_vrows_src_len,
                             memra_jit_options,
                             maj,
                             min,
                             arch,
                             is_ptx,
                             MEMRA_VERSION_STRING};
    memra_cache_key_of(&in, key);
    memra_cache_entry_path(dir, key, is_ptx, path, len);
}

int memra_cache_has_entry(const memra_driver *d, int arch, int is_ptx, char *path, size_t len)
{
    char dir[1024];
    memra_cache_key key;
    memra_image img;
    if (!memra_cache_dir(dir, sizeof dir))
        return 0;
    entry_for(d, dir, arch, is_ptx, &key, path, len);
    int ok = memra_cache_read(path, &key, &img);
    memra_image_free(&img);
    return ok;
}

memra_status memra_cache_get_image(const memra_driver *d, int arch, int is_ptx, memra_image *img,
                                   int *from_cache)
{
    *from_cache = 0;
    char dir[1024];
    if (!memra_cache_dir(dir, sizeof dir))
        return compile_in_memory(d, arch, is_ptx, img, NULL);

    memra_cache_key key;
    char path[1100], lock[1120];
    entry_for(d, dir, arch, is_ptx, &key, path, sizeof path);

    if (memra_cache_read(path, &key, img)) {
        utimensat(AT_FDCWD, path, NULL, 0); /* recently used: evicted last */
        img->is_ptx = is_ptx, img->arch = arch;
        *from_cache = 1;
        return MEMRA_OK;
    }
    char why[1600];
    if (mkdir_p(dir) != 0) {
        snprintf(why, sizeof why, "kernel cache folder %s cannot be created (%s)", dir,
                 strerror(errno));
        return compile_in_memory(d, arch, is_ptx, img, why);
    }
    snprintf(lock, sizeof lock, "%s.lock", path);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0) {
        snprintf(why, sizeof why, "kernel cache folder %s is not writable (%s)", dir,
                 strerror(errno));
        return compile_in_memory(d, arch, is_ptx, img, why);
    }
    /* Whoever holds the lock compiles; the others wait, then find the entry. */
    while (flock(lfd, LOCK_EX) != 0 && errno == EINTR)
        ;
    memra_status st = MEMRA_OK;
    if (memra_cache_read(path, &key, img)) {
        *from_cache = 1;
    } else {
        st = memra_jit_compile(d, arch, is_ptx, img);
        if (st == MEMRA_OK) {
            if (publish(path, &key, img) == 0) {
                evict(dir, path, memra_cache_cap());
            } else {
                snprintf(warn_text, sizeof warn_text, "kernel cache entry %s not written (%s)",
                         path, strerror(errno));
                pthread_once(&warn_once, print_warning);
            }
        }
    }
    flock(lfd, LOCK_UN);
    close(lfd);
    /* The lock file is left in place: unlinking it would let a third process
     * lock a fresh inode while a second still holds the old one. */
    img->is_ptx = is_ptx, img->arch = arch;
    return st;
}
