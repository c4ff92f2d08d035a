/* Finding NVRTC where serving installs it, and loading only what is needed.
 *
 * Candidates, in this order, each recorded with how it was found and, if
 * it could not be used, why: a copy already loaded in the process (the one
 * PyTorch or CuPy use), $MEMRA_NVRTC_PATH, paths given to
 * memra_set_nvrtc_path(), $CUDA_HOME and $CUDA_PATH (lib64, lib), and the
 * loader path by soname, newest first. The same library found twice (the
 * same file, st_dev and st_ino) is listed and loaded once. "Already
 * loaded" is read from the loader's list of objects, never asked of
 * dlopen(soname, RTLD_NOLOAD), which searches the loader path.
 *
 * Nothing is loaded before it is needed: a candidate is opened only when
 * none opened before it serves, the first time for any use, then for each
 * device and driver (jit.c asks for the next one until one can build a
 * CUBIN for it). A path the user names (MEMRA_NVRTC_PATH,
 * memra_set_nvrtc_path) is trusted as named; a path memra derives itself
 * (in the toolkit folders) is loaded only when the file, the toolkit
 * folder and the folders holding the file are owned by root or the
 * effective uid and writable by nobody else, as the kernel cache requires. Either way it must be a
 * regular file: opened O_NONBLOCK and checked with fstat before dlopen loads that same file
 * (through /proc/self/fd), so a FIFO or a device never blocks discovery.
 * Relative and over-long paths are refused with a warning, never resolved
 * against whatever the working directory is later, never truncated. */
#ifndef MEMRA_NVRTC_FIND_H
#define MEMRA_NVRTC_FIND_H

#include "driver.h"

/* At most this many candidates are listed (found and refused together).
 * Refused memra_set_nvrtc_path() calls are not listed (the call fails), so
 * they never use up the room. */
#define MEMRA_NVRTC_MAX 64

/* The longest path memra keeps for an NVRTC: what memra_nvrtc.path (and
 * memra_kernel_origin.nvrtc_path) hold whole. Longer ones are refused. */
#define MEMRA_NVRTC_PATH_MAX (sizeof(((memra_nvrtc *)0)->path) - 1)

/* The candidates opened so far for table `d` (its own list for a test
 * table), discovering them on the first call and opening them in order
 * until one is usable or none is left. Entries never move or change once
 * listed, so pointers into the list stay valid for the process's life. */
int memra_nvrtc_candidates(const memra_driver *d, const memra_nvrtc **list);

/* Opens the next candidate not tried yet (for a need the listed ones do
 * not serve). 1 when one was tried (it is then listed, usable or not, or
 * found to be one already listed), 0 when none is left. */
int memra_nvrtc_open_next(const memra_driver *d);

#endif /* MEMRA_NVRTC_FIND_H */
