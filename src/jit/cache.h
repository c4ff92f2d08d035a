/* The on-disk kernel cache: a second process start pays no NVRTC compile.
 *
 * It trusts nothing it finds on disk. The folder, every entry and every lock
 * file must be owned by the effective uid and not writable by group or
 * others; files are opened relative to the folder's descriptor with
 * O_NOFOLLOW|O_NONBLOCK and must be regular; temp files are created O_EXCL
 * and published with renameat; only names of memra's exact pattern whose
 * header carries memra's magic are counted or evicted. Anything else ends in
 * "compile in memory" with one warning, never in a hang, a crash, a planted
 * image in the caller's process or the loss of someone else's file. */
#ifndef MEMRA_CACHE_H
#define MEMRA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "cache_env.h"
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

/* An entry's file name: 32 hex digits of the key, then .cubin or .ptx. */
#define MEMRA_CACHE_NAME_MAX 48
void memra_cache_entry_name(const memra_cache_key *key, int is_ptx, char *buf, size_t len);

/* An entry is a 64-byte header, then the image. */
#define MEMRA_CACHE_HEADER_BYTES 64

/* Verifies an entry held in memory (magic, key, size, and the XXH3 checksum
 * over the whole header and the image) and copies its image out. 1 = valid,
 * 0 = not; an entry of an older format is never valid. */
int memra_cache_parse(const void *buf, size_t len, const memra_cache_key *key, memra_image *img);

/* The bytes of the entry that holds `img` (built by NVRTC
 * nvrtc_major.nvrtc_minor) under `key`, as publishing writes them, in a
 * malloc'd buffer: for tests and the fuzz target's seed. 0, or -1 when out
 * of memory. */
int memra_cache_entry_bytes(const memra_cache_key *key, int nvrtc_major, int nvrtc_minor,
                            const memra_image *img, unsigned char **out, size_t *len);

/* Every call names the module (its source is part of the key). */

/* The image for (arch, is_ptx) from NVRTC `nv`, from the cache when a valid entry exists,
 * else compiled and published atomically. Racing processes serialise on a
 * lock file (waiting at most memra_cache_lock_timeout_ms) and look again, so
 * only one compiles. Every failure of the folder falls back to compiling in
 * memory (one warning per kind and process). *from_cache says which
 * happened. */
memra_status memra_cache_get_image(const memra_nvrtc *nv, const memra_source *src, int arch,
                                   int is_ptx, memra_image *img, int *from_cache);

/* Replaces the entry for (arch, is_ptx) with `img`: used when the driver
 * refused a verified entry and a fresh compile loaded, so the next start
 * does not pay the compile again. Best effort, silent. */
void memra_cache_put(const memra_nvrtc *nv, const memra_source *src, int arch, int is_ptx,
                     const memra_image *img);

/* 1 if a valid entry for (arch, is_ptx) is in the cache folder; its path in
 * `path` either way (when the cache is on). Creates nothing. */
int memra_cache_has_entry(const memra_nvrtc *nv, const memra_source *src, int arch, int is_ptx,
                          char *path, size_t len);

/* An engine that no NVRTC can serve still starts from an entry that any
 * NVRTC built for this device and driver: the rank-th best (0 first) by the
 * rules of memra_jit_target, its header's NVRTC version and target in
 * *found. 1 = img filled. */
typedef struct memra_cache_found {
    int nvrtc_major, nvrtc_minor, arch, is_ptx;
} memra_cache_found;
int memra_cache_find_any(const memra_source *src, int sm, int driver_version, int rank,
                         memra_image *img, memra_cache_found *found);

/* Bytes of memra's entries and of live temp files in `dir` (0 if none or
 * untrusted). Creates and deletes nothing. */
uint64_t memra_cache_size(const char *dir);

/* How long a process waits for another's lock before compiling in memory
 * without publishing. Tests lower it. */
#define MEMRA_CACHE_LOCK_TIMEOUT_MS 5000
extern int memra_cache_lock_timeout_ms;
/* Temp files older than this are debris from a killed writer. */
#define MEMRA_CACHE_STALE_TEMP_S 300

#endif /* MEMRA_CACHE_H */
