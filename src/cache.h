/* The on-disk kernel cache: a second process start pays no NVRTC compile. */
#ifndef MEMRA_CACHE_H
#define MEMRA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "jit.h"

/* Everything the compiled image depends on; each field changes the key. */
typedef struct memra_cache_key_in {
    const char *source;
    size_t source_len;
    const char *const *options; /* NULL-terminated */
    int nvrtc_major, nvrtc_minor;
    int arch;
    int is_ptx;
    const char *lib_version;
} memra_cache_key_in;

typedef struct memra_cache_key {
    unsigned char bytes[16]; /* XXH3-128, canonical (big-endian) form */
} memra_cache_key;

void memra_cache_key_of(const memra_cache_key_in *in, memra_cache_key *out);

/* The cache folder from the environment: $MEMRA_CACHE_DIR ("off" disables:
 * returns 0), else $XDG_CACHE_HOME/memra, else $HOME/.cache/memra. */
int memra_cache_dir(char *buf, size_t len);

/* Path of an entry in `dir`. */
void memra_cache_entry_path(const char *dir, const memra_cache_key *key, int is_ptx, char *buf,
                            size_t len);

/* Verifies an entry held in memory (magic, key, size, XXH3 checksum) and
 * copies its image out. 1 = valid, 0 = not. */
int memra_cache_parse(const void *buf, size_t len, const memra_cache_key *key, memra_image *img);

/* Reads and verifies an entry (magic, key, size, XXH3 checksum).
 * 1 = valid (img filled), 0 = absent or corrupt. */
int memra_cache_read(const char *path, const memra_cache_key *key, memra_image *img);

/* The image for (arch, is_ptx), from the cache when a valid entry exists,
 * else compiled and published atomically. Racing processes serialise on a
 * lock file and look again, so only one compiles. An unusable folder falls
 * back to compiling in memory (one warning per process). *from_cache says
 * which happened. */
memra_status memra_cache_get_image(const memra_driver *d, int arch, int is_ptx, memra_image *img,
                                   int *from_cache);

/* 1 if a valid entry for (arch, is_ptx) is in the cache folder; its path in
 * `path` either way (when the cache is on). */
int memra_cache_has_entry(const memra_driver *d, int arch, int is_ptx, char *path, size_t len);

/* Total bytes of entries in `dir` (0 if none). */
uint64_t memra_cache_size(const char *dir);

/* Size cap: $MEMRA_CACHE_MAX_BYTES, default 256 MiB. */
uint64_t memra_cache_cap(void);

#endif /* MEMRA_CACHE_H */
