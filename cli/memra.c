/* memra: the command-line face of the library (docs/cli.md).
 *   memra info    what a server loading libmemra.so gets here
 *   memra check   the device arm against the host arm on every GPU
 *   memra bench   the library beside the bare baselines
 * Options are parsed with getopt_long, help goes to stdout with exit 0, a
 * usage error to stderr with exit 2. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

static const char usage[] =
    "usage: memra [--help] [--version] [--nvrtc PATH]... <command> [<options>]\n"
    "\n"
    "Commands:\n"
    "  info    the library loaded, the driver, every NVRTC candidate, the kernel\n"
    "          cache, and per device which kernel it loads and how long that takes\n"
    "  check   the device arm against the host arm, bit for bit, on every GPU\n"
    "  bench   the library beside the bare baselines, on every GPU\n"
    "  help    this text, or a command's: memra help <command>\n"
    "\n"
    "Options:\n"
    "  -h, --help        show this help and exit\n"
    "  -V, --version     show the tool's and the library's version and exit\n"
    "  --nvrtc PATH      add an NVRTC library for engines to choose from, as a\n"
    "                    program calling memra_set_nvrtc_path(PATH) would (repeat\n"
    "                    it for several; the pip console script passes the NVRTC\n"
    "                    of the NVIDIA wheels the Python package finds)\n"
    "\n"
    "Exit status: 0 done; 1 a check found a difference or a call failed; 2 usage\n"
    "error; 3 no GPU, nothing was checked or measured (check, bench).\n"
    "Run 'memra <command> --help' for a command's options.\n";

int parse_simple(int argc, char **argv, const char *verb, const char *verb_usage, int *help,
                 int *json)
{
    static const struct option with_json[] = {
        {"help", no_argument, NULL, 'h'}, {"json", no_argument, NULL, 'j'}, {NULL, 0, NULL, 0}};
    static const struct option without[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    *help = 0;
    if (json)
        *json = 0;
    opterr = 0;
    optind = 0; /* GNU getopt: start afresh for this verb's arguments */
    int c;
    while ((c = getopt_long(argc, argv, "+h", json ? with_json : without, NULL)) != -1) {
        if (c == 'h')
            *help = 1;
        else if (c == 'j')
            *json = 1;
        else
            return usage_error(verb, "unrecognized option '%s'", argv[optind - 1]);
    }
    if (*help) {
        fputs(verb_usage, stdout);
        return CLI_OK;
    }
    if (optind < argc)
        return usage_error(verb, "unexpected argument '%s'", argv[optind]);
    return CLI_OK;
}

/* Output that could not be written is a failure, not a silent success: a
 * script reading `memra check` from a full disk must see a non-zero exit. */
static int finish(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "memra: writing standard output failed: %s\n", strerror(errno));
        return rc ? rc : CLI_FAIL;
    }
    return rc;
}

typedef struct verb {
    const char *name;
    int (*run)(int argc, char **argv);
} verb;

static const verb verbs[] = {{"info", cmd_info}, {"check", cmd_check}, {"bench", cmd_bench}};
#define N_VERBS (sizeof verbs / sizeof verbs[0])

static const verb *find_verb(const char *name)
{
    for (size_t i = 0; i < N_VERBS; i++)
        if (strcmp(verbs[i].name, name) == 0)
            return &verbs[i];
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
                                         {"version", no_argument, NULL, 'V'},
                                         {"nvrtc", required_argument, NULL, 'n'},
                                         {NULL, 0, NULL, 0}};
    opterr = 0;
    int c;
    /* '+': options up to the command only; the rest are the command's. */
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            return finish(CLI_OK);
        }
        if (c == 'V') {
            printf("memra %s (libmemra %s)\n", MEMRA_VERSION_STRING, memra_version_string());
            return finish(CLI_OK);
        }
        if (c == 'n') {
            /* Before any engine looks for NVRTC: the candidates a program
             * that hands memra its wheels' NVRTC would have (the Python
             * package's), in the order given. */
            if (memra_set_nvrtc_path(optarg) != MEMRA_OK) {
                fprintf(stderr, "memra: --nvrtc: %s\n", memra_last_error());
                return CLI_FAIL;
            }
            continue;
        }
        if (c == '?' && optopt == 'n')
            return usage_error(NULL, "--nvrtc needs a file name");
        return usage_error(NULL, "unrecognized option '%s'", argv[optind - 1]);
    }
    if (optind >= argc) {
        fputs(usage, stderr);
        return CLI_USAGE;
    }
    const char *name = argv[optind];
    if (strcmp(name, "help") == 0) {
        if (optind + 1 >= argc) {
            fputs(usage, stdout);
            return finish(CLI_OK);
        }
        const verb *v = find_verb(argv[optind + 1]);
        if (!v)
            return usage_error(NULL, "help: unknown command '%s' (info, check, bench)",
                               argv[optind + 1]);
        char *help_argv[] = {(char *)v->name, (char *)"--help", NULL};
        return finish(v->run(2, help_argv));
    }
    const verb *v = find_verb(name);
    if (!v)
        return usage_error(NULL, "unknown command '%s' (info, check, bench, help)", name);
    return finish(v->run(argc - optind, argv + optind));
}
