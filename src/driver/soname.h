/* Loading a shared library by soname without ever blocking.
 *
 * dlopen(soname), even with RTLD_NOLOAD, searches the loader path for a
 * soname nothing loaded has, and opens what it finds there: a FIFO of that
 * name in an LD_LIBRARY_PATH folder blocks the open for ever (memra info,
 * engine creation and NVRTC discovery all hung on one). So "already
 * loaded?" is read from the loader's own list of objects, and the loader
 * path is searched only after every folder it would search was found to
 * hold no such non-file under that name. libcuda.so.1 (driver.c) and the NVRTC
 * sonames (nvrtc_find.c) are loaded this way. */
#ifndef MEMRA_SONAME_H
#define MEMRA_SONAME_H

#include <stddef.h>
#include <sys/stat.h>

/* The object the process already loaded under `soname` (its DT_SONAME): a
 * handle taken by its file name, which the loader matches among what it
 * has loaded without opening anything, the name in path[n]; NULL when none
 * is loaded (or its name does not fit). */
void *memra_soname_loaded(const char *soname, char *path, size_t n);

/* dlopen(soname) by the loader's search, unless a folder it would search
 * holds `soname` as something other than a regular file (a FIFO would
 * block dlopen, a folder or a device fail it oddly): then NULL, with why[n]
 * naming it. The folders: LD_LIBRARY_PATH's (today's value and the one the
 * loader read at the start), the RPATHs and RUNPATH that apply, the system
 * folders, as the loader lists them (dlinfo RTLD_DI_SERINFO), each with
 * the CPU subfolders the loader tries first (glibc-hwcaps/<level>/, tls/,
 * <platform>/). dlerror()'s text in why when the loader fails. */
void *memra_soname_load(const char *soname, char *why, size_t n);

/* 1 (with why[n] naming it) when a folder the loader would search for
 * `name` (as memra_soname_load's) or the folder of `origin` (a library's
 * path: its $ORIGIN, or NULL) holds `name` as something other than a
 * regular file. */
int memra_screen_name(const char *name, const char *origin, char *why, size_t n);

/* memra_screen_name for every DT_NEEDED name of the ELF file open at fd
 * (loaded from `origin`) that the process has not loaded yet: the loader
 * searches for those when the file is loaded, by path or by descriptor
 * alike, and a FIFO named after one blocks the load. */
int memra_screen_needed(int fd, const char *origin, char *why, size_t n);

/* The loader's cache of sonames (/etc/ld.so.cache; tests point it at one
 * of their own), screened by memra_screen_name too. */
extern const char *memra_ld_cache_path;

/* "a FIFO", "a folder", ...: what a non-regular file is, for messages. */
const char *memra_file_type(mode_t m);

#endif /* MEMRA_SONAME_H */
