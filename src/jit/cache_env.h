/* Where the kernel cache lives and how big it may grow, from the environment.
 * Wrong settings are named in one warning each and replaced by the default,
 * never silently turned into something else. */
#ifndef MEMRA_CACHE_ENV_H
#define MEMRA_CACHE_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "base/env.h"

/* Room for the cache folder's path. */
#define MEMRA_CACHE_PATH_MAX 1024

/* The cache folder: $MEMRA_CACHE_DIR ("off" in any case disables), else
 * $XDG_CACHE_HOME/memra, else $HOME/.cache/memra. Relative paths are ignored
 * (with a warning) as the XDG spec asks; a path that does not fit turns the
 * cache off with a warning. Returns 1 with the path in buf, 0 when off. */
int memra_cache_dir(char *buf, size_t len);

/* The size cap in bytes: $MEMRA_CACHE_MAX_BYTES, an integer with an optional
 * K, M or G suffix (powers of 1024); 0 keeps nothing on disk. Anything else
 * warns and gives the default, MEMRA_CACHE_DEFAULT_CAP. */
#define MEMRA_CACHE_DEFAULT_CAP (256ull << 20)
uint64_t memra_cache_cap(void);

/* Parses a size as above into *out; 0 when it is not one. */
int memra_parse_size(const char *s, uint64_t *out);

#endif /* MEMRA_CACHE_ENV_H */
