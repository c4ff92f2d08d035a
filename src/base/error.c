#include "error.h"

#include <stdarg.h>
#include <stdio.h>

/* Thread-local so that one thread's failure never overwrites the message
 * another thread is about to read (unlike a process-wide last-error buffer). */
static _Thread_local char last_error[4096];

static const char *const status_strings[MEMRA_STATUS_COUNT] = {
    [MEMRA_OK] = "success",
    [MEMRA_ERR_NULL_ARG] = "a required pointer argument is NULL",
    [MEMRA_ERR_INVALID_ARG] = "an argument is out of its valid range",
    [MEMRA_ERR_MISALIGNED] = "a buffer is not aligned to its element size",
    [MEMRA_ERR_SLAB_OVERFLOW] = "an expert slab address passes 2^64",
    [MEMRA_ERR_EXPERT_RANGE] = "an expert id is outside [0, n_expert)",
    [MEMRA_ERR_NONFINITE_SCALE] = "a scale is NaN or infinite",
    [MEMRA_ERR_NO_DRIVER] = "the CUDA driver (libcuda) is not available",
    [MEMRA_ERR_NO_DEVICE] = "no CUDA device at that ordinal",
    [MEMRA_ERR_NVRTC] = "NVRTC is unavailable or the kernel failed to compile",
    [MEMRA_ERR_MODULE_LOAD] = "the compiled kernel could not be loaded",
    [MEMRA_ERR_OUT_OF_MEMORY] = "out of memory",
    [MEMRA_ERR_CAPTURE] = "not allowed while the stream is capturing",
    [MEMRA_ERR_DRIVER] = "a CUDA driver call failed",
    [MEMRA_ERR_CONTEXT_RESET] = "the device's primary context was reset under the engine",
    [MEMRA_ERR_SELF_CHECK] = "the device tables differ from the host arm on this GPU",
};

const char *memra_status_string(memra_status status)
{
    if ((unsigned)status >= MEMRA_STATUS_COUNT)
        return "unknown status";
    return status_strings[status];
}

const char *memra_last_error(void)
{
    return last_error;
}

memra_status memra_fail(memra_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

void memra_error_restore(const char *message)
{
    if (message != last_error)
        snprintf(last_error, sizeof last_error, "%s", message);
}
