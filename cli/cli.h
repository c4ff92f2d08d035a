/* What the verbs of the `memra` tool share: exit codes, option parsing
 * help, JSON and text output, the progress line. The tool uses the public
 * API of libmemra.so only (the library a server loads), plus the seed gate's
 * case table (src/vrows/gate_cases.h: data and one inline function, no code of
 * the library's). docs/cli.md is the user's description. */
#ifndef MEMRA_CLI_H
#define MEMRA_CLI_H

#include <stdio.h>

/* Exit codes (docs/cli.md). */
enum {
    CLI_OK = 0,      /* done: printed, all exact, measured */
    CLI_FAIL = 1,    /* a check found a difference, a call failed, output could not be written */
    CLI_USAGE = 2,   /* a wrong verb, option or argument */
    CLI_NOTHING = 3, /* no GPU: nothing was checked or measured */
};

int cmd_info(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_bench(int argc, char **argv);

/* Parses a verb's options: only -h/--help (*help set) and, when json is
 * not NULL, --json (*json set). Extra words are usage errors. CLI_OK, or
 * CLI_USAGE with the message printed. */
int parse_simple(int argc, char **argv, const char *verb, const char *usage, int *help, int *json);

/* "memra <verb>: <message>" and the hint to --help, on stderr. */
int usage_error(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Milliseconds on the monotonic clock. */
double now_ms(void);

/* `s` with control characters (C0, DEL, C1) and bytes that are not UTF-8
 * shown as \n, \xNN (paths and messages come from the environment and must
 * not forge output lines or reach a terminal as commands; src/base/text.h). */
void put_text(FILE *f, const char *s);
/* `s` as a JSON string, quotes included, control characters (C1 too) as
 * \uXXXX, bytes that are not UTF-8 as \udcXX. NULL is null. */
void put_json(FILE *f, const char *s);

/* A transient status line on stdout, only when stdout is a terminal and
 * not carrying JSON; progress_done() clears it. */
void progress_enable(int on);
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void progress_done(void);

/* The file libmemra was loaded from (the dynamic loader's answer). */
const char *library_file(void);

/* Why there is no device to work on ("" when there is one): the driver's
 * error or "no CUDA device visible (CUDA_VISIBLE_DEVICES=...)". The count
 * in *n. */
const char *device_status(int *n);

#endif /* MEMRA_CLI_H */
