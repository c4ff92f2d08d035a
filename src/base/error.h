/* Thread-local detailed error messages behind memra_last_error(). */
#ifndef MEMRA_ERROR_H
#define MEMRA_ERROR_H

#include <memra/memra.h>

/* Records a printf-style message for this thread and returns `status`,
 * so failure sites read `return memra_fail(MEMRA_ERR_X, "...", ...);`. */
memra_status memra_fail(memra_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Sets this thread's message back to `message` (saved by the caller from
 * memra_last_error()): the log callback may call memra between a failure
 * and its caller's read of the message. */
void memra_error_restore(const char *message);

#endif /* MEMRA_ERROR_H */
