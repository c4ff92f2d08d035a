/* One-line warnings, each kind at most once per process: a serving process
 * that starts a thousand engines against a broken cache folder must not
 * print a thousand lines. They go to the callback set with
 * memra_set_log_callback(), by default to stderr as "memra: warning: ...". */
#ifndef MEMRA_WARN_H
#define MEMRA_WARN_H

/* The environment variables memra reads and may warn about, each a kind of
 * its own (MEMRA_WARN_ENV_<name>): one bad setting never silences
 * another's line. */
#define MEMRA_WARN_ENV_VARS(X)                                                                     \
    X(MEMRA_CACHE_DIR)                                                                             \
    X(XDG_CACHE_HOME)                                                                              \
    X(HOME)                                                                                        \
    X(MEMRA_FORCE_PTX)                                                                             \
    X(MEMRA_ROUTE_SPECIALIZE)                                                                      \
    X(MEMRA_NVRTC_PATH)                                                                            \
    X(CUDA_HOME)                                                                                   \
    X(CUDA_PATH)

// clang-format off
typedef enum memra_warn_kind {
    MEMRA_WARN_ENV_OTHER,    /* a variable not listed above */
#define MEMRA_X(var) MEMRA_WARN_ENV_##var,
    MEMRA_WARN_ENV_VARS(MEMRA_X)
#undef MEMRA_X
    MEMRA_WARN_CACHE_CAP,    /* MEMRA_CACHE_MAX_BYTES not a size */
    MEMRA_WARN_CACHE_FOLDER, /* the folder cannot be used: compiling in memory */
    MEMRA_WARN_CACHE_LOCK,   /* the lock could not be taken in time */
    MEMRA_WARN_CACHE_WRITE,  /* an entry could not be written */
    MEMRA_WARN_NVRTC_TRUST,  /* an NVRTC found in a folder memra does not trust */
    MEMRA_WARN_SPECIALIZE,   /* a layer spec's own module could not be built */
    MEMRA_WARN_KIND_COUNT
} memra_warn_kind;
// clang-format on

/* Sends "<message>" (control characters escaped, so always one line) to the
 * log callback unless this kind was sent already. Thread-safe. */
void memra_warn(memra_warn_kind kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* memra_warn of the kind of variable `var` (MEMRA_WARN_ENV_VARS). */
void memra_warn_env(const char *var, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The test seam: forget what was sent. Not exported. */
void memra_warn_reset(void);

/* Around every memra lock under which something may warn: hold before
 * taking the lock, release after letting it go. Messages raised on this
 * thread in between reach the log callback at the outermost release, with
 * no memra lock held, since the callback may call memra (which would wait
 * for that lock for ever). They nest. */
void memra_warn_hold(void);
void memra_warn_release(void);

/* How long memra_set_log_callback waits for the calls into the callback it
 * replaced before it returns an error instead (a callback that waits for
 * the thread swapping it out would otherwise hang both). The variable is
 * the test seam. */
#define MEMRA_LOG_SWAP_TIMEOUT_MS 5000
extern int memra_log_swap_timeout_ms;

#endif /* MEMRA_WARN_H */
