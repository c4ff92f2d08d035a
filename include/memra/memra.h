/* memra — device-built MoE "verify rows" pointer and scale tables.
 *
 * A serving process dlopen()s libmemra.so. libcuda and NVRTC are loaded at
 * run time, so every function here can be called on a machine with no GPU:
 * the device functions then return MEMRA_ERR_NO_DRIVER or MEMRA_ERR_NO_DEVICE.
 *
 * Conventions:
 *  - Every fallible call returns memra_status. On failure nothing is written
 *    to the caller's outputs (except where a function says otherwise) and
 *    memra_last_error() holds a message naming the argument or call.
 *  - Every function is thread-safe. memra_engine_destroy() must not race
 *    with other calls on the same engine.
 *  - Device addresses are memra_devptr (a CUdeviceptr); streams are
 *    memra_stream (a CUstream) with CUDA's meaning: NULL is the legacy
 *    default stream (PyTorch's default stream is NULL too), and
 *    CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are accepted.
 *    memra_engine_stream() gives the engine's own non-blocking stream.
 *  - Order (docs/streams.md): memra orders its work as CUDA orders the
 *    equivalent CUDA calls. A synchronous helper without a stream behaves
 *    like cuMemcpy (after everything queued on the legacy stream, and so on
 *    blocking streams); its _on form is ordered on the stream given; both
 *    return when done. A launch is ordered after the upload of the planes it
 *    reads, on any stream, eagerly and in every replay of a captured graph;
 *    uploads of one layer land in the order they were issued.
 *  - Capture: a call that would join or break a stream capture returns
 *    MEMRA_ERR_CAPTURE and leaves the capture intact. While another thread
 *    captures in global mode (torch.cuda.graph's default), memra's
 *    allocations, copies and waits run in relaxed capture mode.
 *  - Contexts: an engine retains the device's primary context. If the
 *    application resets it (cuDevicePrimaryCtxReset, cudaDeviceReset),
 *    every later call on the engine returns MEMRA_ERR_CONTEXT_RESET and
 *    touches no stale handle; destroy it and create a new one.
 *  - Lifetimes: CUDA graphs captured from an engine's launches point at its
 *    kernel, macro planes and fault word. Destroy the engine only after
 *    every such graph (its executable instance) is destroyed: replaying one
 *    later writes freed memory.
 *  - Layers are keyed by il per engine: use one engine per model (a draft
 *    and a target model of speculative decoding get one each; engines are
 *    cheap, they share the primary context).
 */
#ifndef MEMRA_MEMRA_H
#define MEMRA_MEMRA_H

#include <stddef.h>
#include <stdint.h>

#include <memra/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MEMRA_BUILDING_LIBRARY)
#define MEMRA_API __attribute__((visibility("default")))
#else
#define MEMRA_API
#endif

typedef enum memra_status {
    MEMRA_OK = 0,
    MEMRA_ERR_NULL_ARG,        /* a required pointer was NULL */
    MEMRA_ERR_INVALID_ARG,     /* a count, index or flag out of its range */
    MEMRA_ERR_MISALIGNED,      /* a buffer not aligned to its element */
    MEMRA_ERR_SLAB_OVERFLOW,   /* base + (n_expert-1)*stride passes 2^64 */
    MEMRA_ERR_EXPERT_RANGE,    /* an expert id outside [0, n_expert) (host arm) */
    MEMRA_ERR_NONFINITE_SCALE, /* a NaN or infinite scale was produced (host arm) */
    MEMRA_ERR_NO_DRIVER,       /* libcuda could not be loaded or initialised */
    MEMRA_ERR_NO_DEVICE,       /* no CUDA device at that ordinal */
    MEMRA_ERR_NVRTC,           /* NVRTC missing, or the kernel failed to compile */
    MEMRA_ERR_MODULE_LOAD,     /* cuModuleLoadData/cuModuleGetFunction failed */
    MEMRA_ERR_OUT_OF_MEMORY,   /* host or device allocation failed */
    MEMRA_ERR_CAPTURE,         /* the call would allocate/copy/sync under capture */
    MEMRA_ERR_DRIVER,          /* any other CUDA driver failure */
    MEMRA_ERR_CONTEXT_RESET,   /* the primary context was reset under the engine */
    MEMRA_ERR_SELF_CHECK,      /* memra_engine_self_check found the device arm inexact */
    MEMRA_STATUS_COUNT
} memra_status;

typedef uint64_t memra_devptr;
typedef void *memra_stream;
typedef struct memra_engine memra_engine;

/* n_pairs limit: keeps every index of the 3*n_pairs tables inside 32 bits,
 * the kernel's thread index type. */
#define MEMRA_MAX_PAIRS (1u << 28)
/* Layers cached by the macro mirror: il in [0, MEMRA_MAX_LAYERS). Every
 * device call that takes il refuses one outside it (MEMRA_ERR_INVALID_ARG)
 * whatever the layer mirrors, but for an empty call (n_pairs or n_tokens
 * 0, no layout), which returns MEMRA_OK before the layer is looked at, as
 * memra_check judges it too; the host arms take no layer. */
#define MEMRA_MAX_LAYERS 65536
/* memra_faults.first_pair when no fault was seen. */
#define MEMRA_NO_FAULT UINT32_MAX

/* Slabs of Q8 expert weights, one per projection: gate, up, down.
 * Bases are device addresses, strides are bytes per expert. */
enum { MEMRA_GATE = 0, MEMRA_UP = 1, MEMRA_DOWN = 2 };
typedef struct memra_vrows_slabs {
    uint64_t base[3];
    uint64_t stride[3];
} memra_vrows_slabs;

/* Per-expert macro scales (host arrays of n_expert floats): all three planes
 * or none (a NULL memra_vrows_macros pointer means none). */
typedef struct memra_vrows_macros {
    const float *plane[3];
} memra_vrows_macros;

/* Faults seen by the kernel (or the host arm). Counts wrap at 2^32.
 * not_local and padded are not faults: they count the pairs that expert
 * parallelism sent to another rank (memra_vrows_options.expert_map) and the
 * pairs of a padded batch's padding rows (memra_route_spec.n_real), and
 * never set first_pair. */
typedef struct memra_faults {
    uint32_t bad_expert; /* pairs whose expert id (or map slot) was out of range */
    uint32_t nonfinite;  /* pairs that produced a NaN or infinite scale */
    uint32_t first_pair; /* lowest faulting pair index, or MEMRA_NO_FAULT */
    uint32_t not_local;  /* pairs whose expert lives on another rank (since 0.3) */
    uint32_t padded;     /* pairs of padding tokens (memra_route_spec.n_real, since 0.4) */
} memra_faults;

/* ---- version and errors ------------------------------------------------ */

/* MEMRA_VERSION_NUMBER of the library actually loaded. */
MEMRA_API uint32_t memra_version(void);
MEMRA_API const char *memra_version_string(void);
/* A static string for any status, "unknown status" outside the enum. */
MEMRA_API const char *memra_status_string(memra_status status);
/* This thread's message for its last failed call ("" if none). */
MEMRA_API const char *memra_last_error(void);

/* ---- log ---------------------------------------------------------------- *
 * memra's warnings (an unusable cache folder or setting, an NVRTC it would
 * not load, ...), each kind once per process (each environment variable a
 * kind of its own). By default they go to stderr
 * as "memra: warning: <message>"; a server can send them to its own logger. */
typedef enum memra_log_level {
    MEMRA_LOG_ERROR = 0,
    MEMRA_LOG_WARNING = 1, /* every message memra sends today */
    MEMRA_LOG_INFO = 2,
    MEMRA_LOG_DEBUG = 3
} memra_log_level;
/* `message` is one line (control characters shown as \n, \xNN), without
 * the "memra: warning:" prefix or a newline, valid during the call only.
 * Called on the thread that hit the condition, possibly from several
 * threads at once, and never with a memra lock held (a condition found
 * under one is sent once it is let go, before the call returns). It may
 * call any memra function except memra_set_log_callback, and must not wait
 * for a thread that calls it. */
typedef void (*memra_log_fn)(memra_log_level level, const char *message, void *user);
/* Sends every later message to cb(level, message, user); NULL restores
 * stderr. Thread-safe: when it returns MEMRA_OK, no thread is still inside
 * the callback it replaced, so `user` of that one may be freed. It waits
 * for those calls only (not for other swaps), and for 5 s at most: when
 * one is still running then (a callback waiting for this thread, say), it
 * returns MEMRA_ERR_INVALID_ARG with the callback replaced but its `user`
 * still in use. MEMRA_ERR_INVALID_ARG, and nothing changed, when called
 * from inside the callback. */
MEMRA_API memra_status memra_set_log_callback(memra_log_fn cb, void *user);

/* ---- the host arm ------------------------------------------------------ *
 * Outputs are plane-major, 3*n_pairs each:
 *   ptrs[k*n_pairs + p] = base[k] + (uint64)sel[p] * stride[k]
 *   scl[p], scl[n_pairs+p] = macros ? plane[0/1][sel[p]] : 1.0f
 *   scl[2*n_pairs+p]       = selw[p] * (macros ? plane[2][sel[p]] : 1.0f)
 * in binary32 round-to-nearest-even with subnormals kept (the caller's FTZ/DAZ
 * and rounding mode are set aside for the call), NaN written as 0x7fc00000.
 * A pair whose expert id is out of range gets expert 0's pointers and +0.0f
 * scales. Argument errors write nothing. Expert-range and non-finite faults
 * write the full tables, fill *faults (optional) and return
 * MEMRA_ERR_EXPERT_RANGE (takes precedence) or MEMRA_ERR_NONFINITE_SCALE. */
MEMRA_API memra_status memra_vrows_tables_host(const int32_t *sel, const float *selw,
                                               uint32_t n_pairs, uint32_t n_expert,
                                               const memra_vrows_macros *macros,
                                               const memra_vrows_slabs *slabs, uint64_t *ptrs,
                                               float *scl, memra_faults *faults);

/* Expert parallelism and fused shared experts (since 0.3): options of the
 * table arithmetic, the same in both arms. All zero (or a NULL options
 * pointer) is the arithmetic above.
 *  - expert_map: int32 per routed expert (n_expert of them): the expert's
 *    slot in this rank's slabs and macro planes, or -1 where another rank
 *    holds it. An address in the memory of the arm that runs: a host array
 *    for the host arms, a device array for the device calls (the kernel
 *    reads it in place; memra never copies it). 0: no map, slot = id.
 *  - n_local: the slots a map may name (1 or more with a map, 0 without).
 *  - n_shared: ids n_expert .. n_expert + n_shared - 1 are shared experts,
 *    whose slots follow the routed ones (from n_local, or from n_expert
 *    without a map).
 * The slabs and macro planes hold this rank's n_slots = (map ? n_local :
 * n_expert) + n_shared experts in slot order, and are indexed by slot.
 * A pair whose expert is mapped to -1 gets NULL (0) pointers and +0 scales
 * in all three planes and is counted in memra_faults.not_local: not a
 * fault, the status stays MEMRA_OK. A map value outside [-1, n_local) and
 * an id outside [0, n_expert + n_shared) are expert-range faults (slot 0's
 * pointers, +0 scales). */
typedef struct memra_vrows_options {
    uint64_t expert_map; /* int32[n_expert] address, or 0 */
    uint32_t n_local;
    uint32_t n_shared;
} memra_vrows_options;

/* memra_vrows_tables_host with options (NULL: none). n_pairs = 0 is a
 * valid no-op: MEMRA_OK, nothing read or written (the pointers may then be
 * NULL). The map's values are not checked beforehand: as on the device,
 * a bad one is a fault of the pairs that meet it. */
MEMRA_API memra_status memra_vrows_tables_host_ex(const int32_t *sel, const float *selw,
                                                  uint32_t n_pairs, uint32_t n_expert,
                                                  const memra_vrows_macros *macros,
                                                  const memra_vrows_slabs *slabs,
                                                  const memra_vrows_options *options,
                                                  uint64_t *ptrs, float *scl, memra_faults *faults);

/* ---- engine ------------------------------------------------------------ */

typedef struct memra_engine_info {
    int ordinal;
    char name[256];
    int sm;                /* 10*major + minor, e.g. 90 */
    int driver_version;    /* cuDriverGetVersion, e.g. 13000 */
    int nvrtc_version;     /* 1000*major + 10*minor: the NVRTC that built the loaded
                            * kernel, before that the first usable one; 0 if none */
    int kernel_ready;      /* 1 once the table kernel is compiled and loaded */
    int kernel_is_ptx;     /* 1 if the loaded image is PTX (driver JIT) */
    int kernel_from_cache; /* 1 if the image came from the disk cache (no NVRTC compile) */
} memra_engine_info;

/* Where the loaded kernel came from (memra_engine_kernel_origin). */
typedef struct memra_kernel_origin {
    int ready;            /* 1 once the kernel is loaded; the rest is 0/"" before */
    int nvrtc_version;    /* 1000*major + 10*minor of the NVRTC that built the image */
    char nvrtc_path[512]; /* that NVRTC library; "" when the image came from the disk
                           * cache and no usable NVRTC was loaded */
    int arch;             /* the XY of the image's sm_XY (CUBIN) or compute_XY (PTX) */
    int is_ptx;
    int from_cache;
} memra_kernel_origin;

/* Adds an NVRTC library (a file path) for engines to choose from, e.g. the
 * one a Python wheel installed (site-packages/nvidia/cu13/lib/libnvrtc.so.13).
 * Call it before the engines that need it load their kernel; call it once
 * per library (every wheel's), in order of preference. A relative path is
 * made absolute against the working directory now. The file is checked now
 * (it must be a regular file: MEMRA_ERR_NVRTC naming it otherwise; a path
 * longer than 511 bytes is MEMRA_ERR_INVALID_ARG) and loaded only when no
 * candidate before it serves an engine's device and driver (docs/nvrtc.md);
 * an engine that cannot use it names it and the loader's reason. */
MEMRA_API memra_status memra_set_nvrtc_path(const char *path);
/* How many usable NVRTC libraries memra has loaded (discovering them on the
 * first call, loading candidates in order until one is usable): 0 means
 * none anywhere it looks. */
MEMRA_API memra_status memra_nvrtc_available(int *count);

/* One NVRTC candidate as memra sees it (memra_nvrtc_list). */
typedef enum memra_nvrtc_state {
    MEMRA_NVRTC_USABLE = 0,    /* loaded, every entry point found */
    MEMRA_NVRTC_REFUSED = 1,   /* not loaded or not usable: `why` says why */
    MEMRA_NVRTC_NOT_TRIED = 2, /* found, not loaded: an earlier one served */
} memra_nvrtc_state;
typedef struct memra_nvrtc_info {
    char path[512];  /* the file, or the soname looked up on the loader path */
    char origin[64]; /* how it was found: "MEMRA_NVRTC_PATH", "CUDA_HOME", ... */
    memra_nvrtc_state state;
    char why[256]; /* REFUSED: the reason; "" otherwise */
    int version;   /* USABLE: 1000*major + 10*minor; else 0 */
    int n_archs;   /* USABLE: its targets, the XY of sm_XY, ascending */
    int archs[128];
} memra_nvrtc_info;
/* Every NVRTC candidate in the order engines consider them (discovering
 * them as memra_nvrtc_available does): up to `max` into out (NULL when max
 * is 0), the total in *count. For `memra info` and bug reports. */
MEMRA_API memra_status memra_nvrtc_list(memra_nvrtc_info *out, int max, int *count);

/* The CUDA version the driver supports (cuDriverGetVersion, e.g. 13000),
 * device or not; MEMRA_ERR_NO_DRIVER where there is no driver. */
MEMRA_API memra_status memra_driver_version(int *version);
/* Number of CUDA devices (0 with MEMRA_ERR_NO_DRIVER where there is no driver). */
MEMRA_API memra_status memra_device_count(int *count);
/* Retains the device's primary context (shared with the serving process) and
 * creates the engine's own non-blocking stream. On failure *out is set to
 * NULL (an exception to the rule above, so that destroying what it holds is
 * always safe). */
MEMRA_API memra_status memra_engine_create(int ordinal, memra_engine **out);
/* NULL is a no-op. Synchronises the engine's stream, frees what it owns.
 * Graphs captured from the engine must be destroyed first (see above). */
MEMRA_API void memra_engine_destroy(memra_engine *eng);
/* The engine's own non-blocking stream, for callers that want memra's work
 * off their streams (order it yourself with events). */
MEMRA_API memra_status memra_engine_stream(memra_engine *eng, memra_stream *out);
MEMRA_API memra_status memra_engine_get_info(memra_engine *eng, memra_engine_info *info);
/* Which NVRTC (version and path) built the loaded kernel, for which arch,
 * and whether the image came from the disk cache. */
MEMRA_API memra_status memra_engine_kernel_origin(memra_engine *eng, memra_kernel_origin *out);
/* The seed gate on this engine's GPU: its four cases (fixture strides,
 * serving strides past 4 and 8 GiB, the macro-free bank, a spread
 * selection), two random batches of 2^16 pairs with special floats and
 * out-of-range ids, and the routing gate (every configuration of the
 * library's routing cases, 64 tokens of edge-value logits each through each
 * routing kernel, with the batch's expert-sorted layout), built by the
 * device arm and
 * compared pointer for pointer and scale bit for bit with the host arm,
 * faults included. A few
 * milliseconds once the kernel is loaded (it loads it if needed). A serving
 * process can run it at boot and keep the host arm where it fails.
 * MEMRA_OK when exact; MEMRA_ERR_SELF_CHECK with the first difference in
 * the report and memra_last_error() when not; the report is written for
 * those two only (a check that could not run leaves it untouched). It runs on the engine's own
 * stream only (never the legacy stream, so another thread's capture is
 * safe) and mirrors its planes in scratch slots of its own (no layer of
 * yours is touched). Its cases count faults into a fault word of their
 * own: the engine's word is untouched, and your launches on the engine
 * meanwhile neither disturb the check nor lose their counts to it. Checks
 * of one engine run one at a time (workers that each run it at boot wait
 * for one another). */
typedef struct memra_self_check_report {
    uint32_t cases;          /* cases run */
    uint32_t failed;         /* cases whose tables or faults differ from the host arm */
    uint64_t entries;        /* pointers and scales compared */
    char first_failure[256]; /* the first difference, "" when all exact */
} memra_self_check_report;
MEMRA_API memra_status memra_engine_self_check(memra_engine *eng, memra_self_check_report *report);

/* Compiles (or loads) the table kernel now instead of at first use.
 *
 * The kernel cache on disk ($MEMRA_CACHE_DIR, else $XDG_CACHE_HOME/memra,
 * else ~/.cache/memra; "off" in any case disables it) trusts nothing it
 * finds: the folder, each entry and each lock file must be owned by the
 * effective uid and not writable by group or others, or the disk cache is
 * not used by this process. Folders memra creates are 0700, files 0600;
 * files are never opened through a symlink and must be regular; temp files
 * are created O_EXCL and published by rename; only files with memra's exact
 * entry name and magic are ever counted or evicted. Waiting for another
 * process's lock is bounded (5 s), then the kernel is compiled in memory
 * without publishing. Every failure of the folder (unwritable, untrusted,
 * full, locked, NFS without locks, a file size limit) ends the same way:
 * one warning (stderr, or the log callback), compile in memory, carry on. */
MEMRA_API memra_status memra_engine_warmup(memra_engine *eng);
/* Where the kernel cache is and how full (for `memra info`): the settings
 * read as an engine reads them, the folder examined, nothing created. */
typedef struct memra_cache_info {
    int enabled;        /* 0: off (MEMRA_CACHE_DIR=off, no usable setting, or a folder the
                         * cache refuses: not a folder, a link, another user's; warned) */
    char dir[1024];     /* the folder; "" when off */
    uint64_t bytes;     /* memra's entries and live temp files in it */
    uint64_t max_bytes; /* the cap, MEMRA_CACHE_MAX_BYTES (0: nothing kept) */
} memra_cache_info;
MEMRA_API memra_status memra_cache_get_info(memra_cache_info *out);
/* Reads the engine's fault word after the work queued on `stream` (NULL: the
 * legacy default stream, as a synchronous copy is ordered), and returns when
 * it has; with reset != 0 it is read and cleared in one step on the device,
 * so counts that launches on other streams add meanwhile are kept for the
 * next read, never lost. Concurrent readers on other streams do not wait
 * for each other. MEMRA_ERR_CAPTURE if `stream` is capturing. */
MEMRA_API memra_status memra_engine_faults(memra_engine *eng, memra_stream stream,
                                           memra_faults *out, int reset);

/* ---- memory helpers ---------------------------------------------------- *
 * Each copy comes in three orders, as CUDA's do:
 *  - memra_upload/download (bytes), memra_upload_T/download_T (elements):
 *    like cuMemcpy, on the
 *    legacy default stream (after all work queued there, and so after the
 *    blocking streams'; before anything queued later), complete on return;
 *  - the _on forms: ordered on `stream`, complete on return (for engines on
 *    non-blocking streams);
 *  - the _async forms: queued on `stream` (NULL: the legacy default
 *    stream), captured if the stream captures.
 * A waiting call whose stream is capturing (or is the legacy stream while a
 * blocking stream captures) returns MEMRA_ERR_CAPTURE; the capture survives.
 * memra_sync waits for `stream` (MEMRA_ERR_CAPTURE if it is capturing). */
MEMRA_API memra_status memra_alloc(memra_engine *eng, size_t bytes, memra_devptr *out);
MEMRA_API memra_status memra_free(memra_engine *eng, memra_devptr ptr);
MEMRA_API memra_status memra_sync(memra_engine *eng, memra_stream stream);
MEMRA_API memra_status memra_upload(memra_engine *eng, memra_devptr dst, const void *src,
                                    size_t bytes);
MEMRA_API memra_status memra_download(memra_engine *eng, void *dst, memra_devptr src, size_t bytes);
MEMRA_API memra_status memra_upload_on(memra_engine *eng, memra_devptr dst, const void *src,
                                       size_t bytes, memra_stream stream);
MEMRA_API memra_status memra_download_on(memra_engine *eng, void *dst, memra_devptr src,
                                         size_t bytes, memra_stream stream);
MEMRA_API memra_status memra_upload_async(memra_engine *eng, memra_devptr dst, const void *src,
                                          size_t bytes, memra_stream stream);
MEMRA_API memra_status memra_download_async(memra_engine *eng, void *dst, memra_devptr src,
                                            size_t bytes, memra_stream stream);

/* Typed conveniences: counts are elements. */
#define MEMRA_TYPED_COPIES(X) X(i32, int32_t) X(f32, float) X(u64, uint64_t)
#define MEMRA_DECLARE_TYPED_COPY(sfx, T)                                                           \
    MEMRA_API memra_status memra_upload_##sfx(memra_engine *eng, memra_devptr dst, const T *src,   \
                                              size_t count);                                       \
    MEMRA_API memra_status memra_download_##sfx(memra_engine *eng, T *dst, memra_devptr src,       \
                                                size_t count);                                     \
    MEMRA_API memra_status memra_upload_##sfx##_on(                                                \
        memra_engine *eng, memra_devptr dst, const T *src, size_t count, memra_stream stream);     \
    MEMRA_API memra_status memra_download_##sfx##_on(memra_engine *eng, T *dst, memra_devptr src,  \
                                                     size_t count, memra_stream stream);           \
    MEMRA_API memra_status memra_upload_##sfx##_async(                                             \
        memra_engine *eng, memra_devptr dst, const T *src, size_t count, memra_stream stream);     \
    MEMRA_API memra_status memra_download_##sfx##_async(                                           \
        memra_engine *eng, T *dst, memra_devptr src, size_t count, memra_stream stream);
MEMRA_TYPED_COPIES(MEMRA_DECLARE_TYPED_COPY)
#undef MEMRA_DECLARE_TYPED_COPY

/* ---- device tables ----------------------------------------------------- *
 * The host arm's arithmetic, on the device, in one kernel launch on `stream`
 * (NULL: the legacy default stream). Never synchronises. `sel`, `selw` are device
 * arrays of n_pairs; `ptrs` (8-byte aligned) and `scl` (4-byte aligned) are
 * device arrays of 3*n_pairs. `macros` are HOST planes (or NULL), mirrored
 * to the device once per layer il (a slot of the table kernel's own, apart
 * from routing's) and re-uploaded only when their contents change. The
 * launch is ordered after that upload on any stream, also in every replay
 * of a graph it was captured into. Out-of-range ids and non-finite scales
 * are counted in the engine's fault word (memra_engine_faults), not
 * returned.
 *
 * Under stream capture nothing is allocated, copied or synchronised: a macro
 * mirror that is missing or stale returns MEMRA_ERR_CAPTURE (the capture is
 * left intact); call memra_vrows_prepare_layer() before capturing. */
MEMRA_API memra_status memra_vrows_tables(memra_engine *eng, memra_devptr sel, memra_devptr selw,
                                          uint32_t n_pairs, uint32_t n_expert, int il,
                                          const memra_vrows_macros *macros,
                                          const memra_vrows_slabs *slabs, memra_devptr ptrs,
                                          memra_devptr scl, memra_stream stream);

/* Mirrors layer il's macro planes to the device (upload on `stream` if missing
 * or changed, after the work queued there, finished before the call
 * returns; the device buffer keeps its address while n_expert fits, so
 * captured graphs see the new contents) and compiles the kernel if needed.
 * Not allowed under capture. */
MEMRA_API memra_status memra_vrows_prepare_layer(memra_engine *eng, int il, uint32_t n_expert,
                                                 const memra_vrows_macros *macros,
                                                 memra_stream stream);

/* memra_vrows_tables with options (memra_vrows_options; NULL:
 * none): expert_map is a DEVICE array here. The macro planes hold n_slots
 * floats each (prepare the layer with n_expert = n_slots). n_pairs = 0 is a
 * valid no-op: MEMRA_OK, no launch, nothing written. */
MEMRA_API memra_status memra_vrows_tables_ex(memra_engine *eng, memra_devptr sel, memra_devptr selw,
                                             uint32_t n_pairs, uint32_t n_expert, int il,
                                             const memra_vrows_macros *macros,
                                             const memra_vrows_slabs *slabs,
                                             const memra_vrows_options *options, memra_devptr ptrs,
                                             memra_devptr scl, memra_stream stream);

/* Programmatic dependent launch (since 0.3): with enable = 1, this engine's
 * table and routing kernels are launched with CUDA's programmatic stream
 * serialization (cuLaunchKernelEx), so each may start while the kernel
 * before it on the stream finishes, and waits (griddepcontrol.wait) before
 * it reads or writes any memory; it lets the kernel after it start early
 * (griddepcontrol.launch_dependents), which is safe for kernels that wait
 * the same way and changes nothing for those launched plainly. In effect
 * only on sm_90 and newer with a driver of CUDA 12.3 or newer (which
 * captures it in graphs as a programmatic edge); elsewhere launches stay
 * plain. *active (optional) says whether it is in effect. Off by default;
 * the setting applies to launches made after the call. */
MEMRA_API memra_status memra_engine_set_pdl(memra_engine *eng, int enable, int *active);

/* ---- routing: router logits to sel, selw and the tables in one launch ---- *
 * The exact rules (docs/routing.md), the same in both arms bit for bit:
 *  1. logits (float32, bfloat16 or float16, [n_tokens, n_expert] row-major,
 *     converted exactly to binary32) become scores: softmax over the
 *     token's experts (exp(x - max) / sum) or sigmoid 1 / (1 + exp(-x)),
 *     with memra's own binary32 exp and a fixed summation order;
 *  2. the choice score is score + bias[e] (bias: the optional per-expert
 *     score-correction bias; it affects choosing only);
 *  3. with n_group > 1, a group's score is the sum of its two best choice
 *     scores (MEMRA_GROUP_TOP2_SUM) or its best one (MEMRA_GROUP_MAX); left
 *     at MEMRA_GROUP_AUTO (0) the bias decides, as in vLLM's grouped_topk:
 *     the top-2 sum with a bias, the best without; only the best
 *     topk_group groups stay in play;
 *  4. the top_k experts in play by choice score, ties to the lower index,
 *     listed best first, are the token's routed experts;
 *  5. their weights are their unbiased scores, divided by their sum W (taken
 *     in that order) if renormalize, times routed_scaling_factor;
 *  6. n_shared fused shared experts (ids n_expert + i) follow, each with
 *     weight shared_weight as given (MEMRA_SHARED_CONSTANT), or by SGLang's
 *     rule (MEMRA_SHARED_ROUTED_SUM): W / shared_divisor, then divided by W
 *     if renormalize and scaled as the routed weights are: a token has
 *     K = top_k + n_shared pairs;
 *  7. the tables are exactly memra_vrows_tables_host_ex's from that
 *     sel/selw (n_pairs = n_tokens * K, pair t*K + j) with the spec's
 *     expert_map, n_local and n_shared (sel keeps the GLOBAL ids).
 * An infinite logit scores as in PyTorch (-inf +0, a masked expert; under
 * sigmoid +inf 1). A token no score can be made of (a NaN logit; under
 * softmax a +inf logit, or every logit -inf), or meeting a non-finite
 * value of a bias read in place (bias_ptr), gets experts 0..top_k-1 (then
 * its shared experts) with weight +0; all its K pairs are counted as
 * non-finite in the fault word. With n_real, the rows at or past the count
 * it holds are padding: no value of them is used (the device may load
 * their logits while the count is on its way; the buffer holds n_tokens
 * rows either way), their K pairs get id -1,
 * weight +0, NULL pointers and +0 scales, and are counted in
 * memra_faults.padded (not a fault). n_tokens = 0 is a valid no-op. */
#define MEMRA_ROUTE_MAX_EXPERT 1024
#define MEMRA_ROUTE_MAX_TOP_K 32 /* also the most pairs a token has: top_k + n_shared */
#define MEMRA_ROUTE_MAX_GROUPS 32

typedef enum memra_route_scoring {
    MEMRA_ROUTE_SOFTMAX = 0,
    MEMRA_ROUTE_SIGMOID = 1
} memra_route_scoring;
typedef enum memra_logits_dtype {
    MEMRA_LOGITS_F32 = 0,
    MEMRA_LOGITS_BF16 = 1,
    MEMRA_LOGITS_F16 = 2 /* since 0.3 */
} memra_logits_dtype;
/* How a group is scored (n_group > 1). The values changed in 0.4: 0 is
 * now vLLM's rule, so a zero-initialised spec routes as vLLM does. */
typedef enum memra_group_scoring {
    MEMRA_GROUP_AUTO = 0,     /* the bias decides: TOP2_SUM with one, MAX without (vLLM) */
    MEMRA_GROUP_TOP2_SUM = 1, /* sum of its two best: DeepSeek-V3 (with a bias) */
    MEMRA_GROUP_MAX = 2       /* its best: DeepSeek-V2, vLLM's grouped_topk without a bias */
} memra_group_scoring;
/* The fused shared experts' weight (n_shared > 0), since 0.4. */
typedef enum memra_shared_rule {
    MEMRA_SHARED_CONSTANT = 0,   /* shared_weight, as given (not renormalized, not scaled) */
    MEMRA_SHARED_ROUTED_SUM = 1, /* SGLang: W / shared_divisor, renormalized and scaled as
                                  * the routed weights (W: the routed scores' sum) */
} memra_shared_rule;
/* The element type of the real-token count n_real points at. */
typedef enum memra_count_dtype { MEMRA_COUNT_I32 = 0, MEMRA_COUNT_I64 = 1 } memra_count_dtype;
typedef enum memra_bias_dtype { MEMRA_BIAS_F32 = 0, MEMRA_BIAS_BF16 = 1 } memra_bias_dtype;

/* Fields after `bias` arrived in 0.3, after shared_weight in 0.4; a field
 * left zero keeps the behaviour it had before it arrived, except
 * group_scoring (0 is vLLM's rule since 0.4). */
typedef struct memra_route_spec {
    uint32_t n_expert;           /* 1 .. MEMRA_ROUTE_MAX_EXPERT routed experts */
    uint32_t top_k;              /* 1 .. MEMRA_ROUTE_MAX_TOP_K, at most the experts in play */
    uint32_t n_group;            /* 1 .. MEMRA_ROUTE_MAX_GROUPS, dividing n_expert */
    uint32_t topk_group;         /* 1 .. n_group (1 when n_group is 1) */
    memra_route_scoring scoring; /* softmax (Mixtral, Qwen-MoE) or sigmoid (DeepSeek-V3, GLM-4.5) */
    memra_logits_dtype logits_dtype;
    int renormalize;             /* 0 or 1 */
    float routed_scaling_factor; /* finite and > 0 (judged by its bits); 1.0f for none */
    const float *bias;           /* host, n_expert finite floats, mirrored per layer; or NULL */
    memra_group_scoring group_scoring;
    memra_bias_dtype bias_dtype; /* the element type of bias_ptr */
    /* A bias read in place, never copied or checked: n_expert elements of
     * bias_dtype at an address in the memory of the arm that runs (a device
     * address for memra_route_tables, e.g. a CUDA tensor's; a host
     * address for memra_route_tables_host). 0: none. Not with `bias`. */
    uint64_t bias_ptr;
    /* Expert parallelism (memra_vrows_options): int32[n_expert] global id ->
     * local slot or -1, an address in the arm's memory; 0: none. */
    uint64_t expert_map;
    uint32_t n_local;    /* slots in this rank's slabs and planes (>= 1 with a map) */
    uint32_t n_shared;   /* fused shared experts appended to every token */
    float shared_weight; /* MEMRA_SHARED_CONSTANT: their weight, finite, written as given */
    memra_shared_rule shared_rule;
    float shared_divisor;           /* MEMRA_SHARED_ROUTED_SUM: finite and > 0 (SGLang's
                                     * routed_scaling_factor); 0 otherwise */
    memra_count_dtype n_real_dtype; /* of the integer at n_real */
    /* Padded batches (SGLang's num_token_non_padded, CUDA graphs captured at
     * a padded size): the address of ONE integer of n_real_dtype, read in
     * place by the arm that runs (a device address for memra_route_tables),
     * holding how many leading rows are real tokens; the rest are padding
     * (see the rules above). Negative counts as 0, above n_tokens as
     * n_tokens. 0: every row is a token. */
    uint64_t n_real;
} memra_route_spec;

/* The routing rules on host arrays: logits [n_tokens, n_expert] (float, or
 * uint16_t bfloat16 / float16 bits per spec->logits_dtype); writes sel and
 * selw (n_tokens * K each, K = top_k + n_shared) and the tables (3 *
 * n_tokens * K each). Bad arguments write nothing. Faults write everything,
 * fill *faults (optional) and return MEMRA_ERR_EXPERT_RANGE or
 * MEMRA_ERR_NONFINITE_SCALE. n_tokens = 0: MEMRA_OK, nothing read or
 * written (logits and the outputs may be NULL). */
MEMRA_API memra_status memra_route_tables_host(const void *logits, uint32_t n_tokens,
                                               const memra_route_spec *spec,
                                               const memra_vrows_macros *macros,
                                               const memra_vrows_slabs *slabs, int32_t *sel,
                                               float *selw, uint64_t *ptrs, float *scl,
                                               memra_faults *faults);

/* The same on the device in one launch on `stream`, from device logits into
 * device sel, selw, ptrs, scl: capturable, never synchronises. The macro
 * planes (n_slots floats each) and `bias` (host arrays) are mirrored for
 * layer il as by memra_vrows_prepare_layer; under capture a layer not yet
 * mirrored is MEMRA_ERR_CAPTURE (call memra_route_prepare_layer first).
 * bias_ptr and expert_map are device addresses read by the kernel. Faults
 * go to the engine's fault word. n_tokens = 0: MEMRA_OK, no launch,
 * nothing written. */
MEMRA_API memra_status memra_route_tables(memra_engine *eng, memra_devptr logits, uint32_t n_tokens,
                                          const memra_route_spec *spec, int il,
                                          const memra_vrows_macros *macros,
                                          const memra_vrows_slabs *slabs, memra_devptr sel,
                                          memra_devptr selw, memra_devptr ptrs, memra_devptr scl,
                                          memra_stream stream);

/* Mirrors layer il's macro planes and bias for routing (and loads the
 * kernel) now, the upload finished before the call returns: call before
 * capturing a graph. */
MEMRA_API memra_status memra_route_prepare_layer(memra_engine *eng, int il,
                                                 const memra_route_spec *spec,
                                                 const memra_vrows_macros *macros,
                                                 memra_stream stream);

/* ---- the expert-sorted layout (since 0.4) -------------------------------- *
 * What the expert GEMMs of larger batches read (vLLM's and SGLang's
 * moe_align_block_size, CUTLASS grouped GEMMs): the pairs p = t*K + j of a
 * step grouped by expert. From a batch's expert ids (n_pairs int32, a
 * routing call's sel or an engine's own topk_ids) it writes, exactly as
 * vLLM's moe_align_block_size(topk_ids, block_size, num_experts,
 * expert_map, pad_sorted_ids) defines them (docs/layout-sorted.md):
 *  - sorted_ids (int32[sorted_len]): expert 0's pairs, padded with the
 *    sentinel n_pairs to a multiple of block_size, then expert 1's, ...;
 *    every entry after the last expert's run is the sentinel too. Inside an
 *    expert, pairs in ascending index: the same bits on every run, device
 *    and host (vLLM's and SGLang's kernels place them with atomics);
 *  - expert_ids (int32[n_blocks]): each block's expert, or with expert_map
 *    its local id (-1: another rank's expert); -1 past the last run;
 *  - n_post_pad (int32[1]): the padded total, sorted_ids' used length;
 *  - optional: offsets (int32[n_expert + 1], exclusive prefix sum of each
 *    expert's pairs), padded_offsets (the same of the padded runs), counts
 *    (int32[n_expert]) for grouped GEMMs; expert_load (int32 or int64 per
 *    load_dtype, n_expert): each expert's pairs ADDED in, expert-parallel
 *    load balancing's statistic (vLLM's and SGLang's EPLB).
 * An id outside [0, n_expert) (a padding row's -1, say) belongs to no
 * expert: it is in no run and no count. Sizes (memra_layout_sizes), as
 * vLLM's: sorted_len = n_pairs + n_expert * (block_size - 1), rounded up to
 * block_size with pad_sorted_ids, at most n_pairs * block_size when
 * n_pairs < n_expert; n_blocks = ceil(sorted_len / block_size). */
#define MEMRA_LAYOUT_MAX_EXPERT (MEMRA_ROUTE_MAX_EXPERT + MEMRA_ROUTE_MAX_TOP_K)
typedef struct memra_layout_spec {
    uint32_t n_expert;            /* 1 .. MEMRA_LAYOUT_MAX_EXPERT: ids 0 .. n_expert - 1 */
    uint32_t block_size;          /* 1 .. 65536: the GEMM's BLOCK_SIZE_M */
    int pad_sorted_ids;           /* 0 or 1: vLLM's option of the same name */
    memra_count_dtype load_dtype; /* expert_load's element type */
    /* int32[n_expert], global id -> local id or -1 (vLLM's expert_map), an
     * address in the memory of the arm that runs; 0: none. The fused call
     * (memra_route_tables_ex) takes the routing spec's map instead. */
    uint64_t expert_map;
} memra_layout_spec;
/* Where the layout goes: addresses in the memory of the arm that runs.
 * sorted_ids, expert_ids and n_post_pad are required, the rest optional
 * (0). workspace: memra_layout_workspace_bytes() of device memory for the
 * device calls (0 bytes for decode-sized batches), content unused between
 * calls; ignored by the host arm. */
typedef struct memra_layout {
    uint64_t sorted_ids, expert_ids, n_post_pad;
    uint64_t offsets, padded_offsets, counts, expert_load;
    uint64_t workspace;
} memra_layout;

/* vLLM's sizes of sorted_ids and expert_ids for n_pairs (above). */
MEMRA_API memra_status memra_layout_sizes(uint32_t n_pairs, const memra_layout_spec *layout_spec,
                                          uint64_t *sorted_len, uint64_t *n_blocks);
/* Device workspace the device calls need for n_pairs (0 up to
 * MEMRA_LAYOUT_ONE_LAUNCH pairs: one launch; above: three launches over
 * tiles of pairs, still capturable and never synchronising). */
#define MEMRA_LAYOUT_ONE_LAUNCH 16384u
MEMRA_API memra_status memra_layout_workspace_bytes(uint32_t n_pairs,
                                                    const memra_layout_spec *layout_spec,
                                                    uint64_t *bytes);
/* Loads the layout kernels and the engine's per-layer counts for the fused
 * call (memra_route_tables_ex) now: call before capturing a graph with
 * layouts (a first use allocates and compiles, which a capture refuses). */
MEMRA_API memra_status memra_layout_prepare(memra_engine *eng);
/* The layout of host ids on the host: the reference. Bad arguments write
 * nothing. */
MEMRA_API memra_status memra_layout_tables_host(const int32_t *ids, uint32_t n_pairs,
                                                const memra_layout_spec *layout_spec,
                                                const memra_layout *layout);
/* The same on the device from device ids, on `stream`: capturable, never
 * synchronises. n_pairs = 0 writes the empty layout (n_post_pad 0, every
 * sorted_ids entry the sentinel 0, every block -1). */
MEMRA_API memra_status memra_layout_tables(memra_engine *eng, memra_devptr ids, uint32_t n_pairs,
                                           const memra_layout_spec *layout_spec,
                                           const memra_layout *layout, memra_stream stream);

/* Routing, its tables and the layout of its sel in one call: one launch
 * for decode-sized batches (the last block of the routing kernel lays the
 * batch out: up to MEMRA_LAYOUT_ONE_LAUNCH pairs where memra routes with a
 * block a token, up to 512 pairs where with a warp or fewer lanes a token,
 * as Mixtral at every size and the other families past a few hundred
 * tokens), two above that up to MEMRA_LAYOUT_ONE_LAUNCH pairs (the
 * routing, then the layout's own launch), four above. The
 * layout's experts are the routing's n_expert + n_shared ids (spec->n_expert
 * of the layout must be that), with the routing spec's expert_map giving
 * each block's local slot as the tables do (the layout spec's expert_map
 * must be 0); padding rows (n_real) are in no run. layout_spec and layout
 * may be NULL: then memra_route_tables. A layer's calls with a layout must
 * not overlap in time (one step after another, as a model's are): the
 * engine keeps a per-layer count that the launch's blocks share. il must be
 * in [0, MEMRA_MAX_LAYERS) (MEMRA_ERR_INVALID_ARG), as for every device
 * call; with a layout, even for an empty batch. */
MEMRA_API memra_status memra_route_tables_ex(memra_engine *eng, memra_devptr logits,
                                             uint32_t n_tokens, const memra_route_spec *spec,
                                             int il, const memra_vrows_macros *macros,
                                             const memra_vrows_slabs *slabs, memra_devptr sel,
                                             memra_devptr selw, memra_devptr ptrs, memra_devptr scl,
                                             const memra_layout_spec *layout_spec,
                                             const memra_layout *layout, memra_stream stream);
/* The host arm of it: memra_route_tables_host, then the layout of its sel
 * (host addresses in layout). */
MEMRA_API memra_status memra_route_tables_host_ex(
    const void *logits, uint32_t n_tokens, const memra_route_spec *spec,
    const memra_vrows_macros *macros, const memra_vrows_slabs *slabs, int32_t *sel, float *selw,
    uint64_t *ptrs, float *scl, memra_faults *faults, const memra_layout_spec *layout_spec,
    const memra_layout *layout);

/* ---- checking a call without making it (since 0.4) --------------------- *
 * What would this call refuse, and why: memra_route_check(_ex),
 * memra_vrows_check and memra_layout_check run the argument checks of the
 * call that `call` names, in that call's order, and return the status it
 * would return for the same arguments, with the same message in
 * memra_last_error() (naming that call and its arguments), or MEMRA_OK
 * where the call gets past them. Nothing is written, and nothing is read
 * but the structs passed (spec, options, macros, slabs, layout spec and
 * layout) and a host bias's n_expert values, which the calls check:
 * addresses are judged as the calls judge them (NULL, alignment), never
 * dereferenced, so a binding that has no memory yet (a framework's
 * shape-only "fake" implementation, a planner, a graph compiler) can pass
 * any non-NULL address aligned as the real one will be. One judge: the
 * bindings (Python, Rust) refuse only what the library cannot see (types,
 * dtypes, shapes, devices) and ask these for every rule of the library's.
 * Not judged: the engine (a device call needs a non-NULL one), anything of
 * the device, its stream or the layer's mirror (capture, context, memory),
 * and what the data hold (faults are counted by the calls, not refused).
 * Thread-safe; memra_last_error() is set only when refusing. */
typedef enum memra_checked_call {
    MEMRA_CALL_ROUTE_TABLES = 0,         /* memra_route_tables */
    MEMRA_CALL_ROUTE_TABLES_HOST = 1,    /* memra_route_tables_host (il unused) */
    MEMRA_CALL_ROUTE_PREPARE_LAYER = 2,  /* memra_route_prepare_layer (spec, il, macros) */
    MEMRA_CALL_VROWS_TABLES = 3,         /* memra_vrows_tables (options unused) */
    MEMRA_CALL_VROWS_TABLES_EX = 4,      /* memra_vrows_tables_ex */
    MEMRA_CALL_VROWS_TABLES_HOST = 5,    /* memra_vrows_tables_host (il, options unused) */
    MEMRA_CALL_VROWS_TABLES_HOST_EX = 6, /* memra_vrows_tables_host_ex (il unused) */
    MEMRA_CALL_VROWS_PREPARE_LAYER = 7,  /* memra_vrows_prepare_layer (n_expert, il, macros) */
    MEMRA_CALL_LAYOUT_TABLES = 8,        /* memra_layout_tables */
    MEMRA_CALL_LAYOUT_TABLES_HOST = 9,   /* memra_layout_tables_host */
    MEMRA_CALL_ROUTE_TABLES_EX = 10,     /* memra_route_tables_ex */
    MEMRA_CALL_ROUTE_TABLES_HOST_EX = 11 /* memra_route_tables_host_ex (il unused) */
} memra_checked_call;

/* The routing calls without a layout (MEMRA_CALL_ROUTE_*; the _EX kinds
 * as called with layout_spec and layout NULL), arguments as theirs;
 * logits, sel, selw, ptrs and scl are addresses (host or device: only
 * their value is judged). Another `call` is MEMRA_ERR_INVALID_ARG. */
MEMRA_API memra_status memra_route_check(memra_checked_call call, uint64_t logits,
                                         uint32_t n_tokens, const memra_route_spec *spec, int il,
                                         const memra_vrows_macros *macros,
                                         const memra_vrows_slabs *slabs, uint64_t sel,
                                         uint64_t selw, uint64_t ptrs, uint64_t scl);

/* The table calls (MEMRA_CALL_VROWS_*), arguments as theirs. Another
 * `call` is MEMRA_ERR_INVALID_ARG. */
MEMRA_API memra_status memra_vrows_check(memra_checked_call call, uint64_t sel, uint64_t selw,
                                         uint32_t n_pairs, uint32_t n_expert, int il,
                                         const memra_vrows_macros *macros,
                                         const memra_vrows_slabs *slabs,
                                         const memra_vrows_options *options, uint64_t ptrs,
                                         uint64_t scl);

/* Every routing call, the fused ones with a layout included
 * (MEMRA_CALL_ROUTE_TABLES_EX, MEMRA_CALL_ROUTE_TABLES_HOST_EX: the
 * routing's checks, then the layout's, as those calls make them; both
 * NULL: the call without a layout), arguments as theirs. The other routing
 * kinds ignore layout_spec and layout. Another `call` is
 * MEMRA_ERR_INVALID_ARG. (since 0.4) */
MEMRA_API memra_status memra_route_check_ex(memra_checked_call call, uint64_t logits,
                                            uint32_t n_tokens, const memra_route_spec *spec, int il,
                                            const memra_vrows_macros *macros,
                                            const memra_vrows_slabs *slabs, uint64_t sel,
                                            uint64_t selw, uint64_t ptrs, uint64_t scl,
                                            const memra_layout_spec *layout_spec,
                                            const memra_layout *layout);

/* The layout calls (MEMRA_CALL_LAYOUT_TABLES, MEMRA_CALL_LAYOUT_TABLES_HOST),
 * arguments as theirs (ids and layout's fields are addresses; the device
 * kind also judges layout->workspace where n_pairs needs one). Another
 * `call` is MEMRA_ERR_INVALID_ARG. (since 0.4) */
MEMRA_API memra_status memra_layout_check(memra_checked_call call, uint64_t ids, uint32_t n_pairs,
                                          const memra_layout_spec *layout_spec,
                                          const memra_layout *layout);

#ifdef __cplusplus
}
#endif

#endif /* MEMRA_MEMRA_H */
