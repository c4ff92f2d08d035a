/* Finding NVRTC where serving installs it.
 *
 * Candidates, in this order, each recorded with how it was found and, if
 * it could not be used, why: a copy already loaded in the process (the one
 * PyTorch or CuPy use), $MEMRA_NVRTC_PATH, paths given to
 * memra_set_nvrtc_path(), $CUDA_HOME and $CUDA_PATH (lib64, lib), and the
 * loader path by soname, newest first. The same library found twice is
 * listed once. Which candidate an engine uses is jit.c's choice. */
#ifndef MEMRA_NVRTC_FIND_H
#define MEMRA_NVRTC_FIND_H

#include "driver.h"

/* At most this many candidates are kept (found and refused together). */
#define MEMRA_NVRTC_MAX 24

/* The candidates for table `d` (its own list for a test table, else those
 * discovered once per process plus any added since). Entries never move, so
 * pointers into the list stay valid for the process's life. */
int memra_nvrtc_candidates(const memra_driver *d, const memra_nvrtc **list);

/* Adds the NVRTC library at `path` as a candidate (origin names who asked).
 * MEMRA_ERR_NVRTC with the loader's reason when it cannot be used. */
memra_status memra_nvrtc_add(const char *path, const char *origin);

/* One line per candidate that was tried, "path (origin): reason", into buf:
 * for the error that says no NVRTC can be used. */
void memra_nvrtc_describe_failures(const memra_driver *d, char *buf, size_t len);

#endif /* MEMRA_NVRTC_FIND_H */
