/* memra bench: the library beside the bare baselines on every GPU, by the
 * benchmark program memra-bench (cli/bench_main.c), which this verb runs
 * with its output on a pipe: the rows pass through as they are measured
 * and, on a terminal, a progress line says how far it is. Results go to a
 * JSON file only when one is asked for (-o FILE). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memra/memra.h>

#include "cli.h"

static const char usage[] =
    "usage: memra bench [--quick] [--route] [-o FILE]\n"
    "\n"
    "The library beside the bare baselines, side by side in one run, on every GPU.\n"
    "\n"
    "Options:\n"
    "  --quick              fewer repetitions (for a smoke test, not for numbers)\n"
    "  --route              the routing section alone (both routing kernels at every\n"
    "                       size, and first use)\n"
    "  -o, --output FILE    also write the results as JSON to FILE (nothing is\n"
    "                       written otherwise); --json FILE is the same\n"
    "  -h, --help           show this help and exit\n"
    "\n"
    "Exit status: 0 measured; 1 a measurement or the output failed; 2 usage error;\n"
    "3 no GPU, nothing was measured.\n";

#ifndef MEMRA_LIBEXECDIR
#define MEMRA_LIBEXECDIR "/usr/local/libexec/memra"
#endif

/* $MEMRA_BENCH_PROGRAM (another build's benchmark, or a test's stand-in),
 * else memra-bench next to this program (a build folder), else where it is
 * installed. */
static int find_bench(char *path, size_t len)
{
    const char *env = getenv("MEMRA_BENCH_PROGRAM");
    if (env && *env) {
        snprintf(path, len, "%s", env);
        return access(path, X_OK) == 0;
    }
    char self[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = 0;
        char *slash = strrchr(self, '/');
        if (slash &&
            (size_t)snprintf(path, len, "%.*s/memra-bench", (int)(slash - self), self) < len &&
            access(path, X_OK) == 0)
            return 1;
    }
    snprintf(path, len, "%s/memra-bench", MEMRA_LIBEXECDIR);
    return access(path, X_OK) == 0;
}

/* Runs memra-bench with `args`, passing its output through line by line. */
static int run_bench(const char *prog, char **args)
{
    int fds[2];
    if (pipe(fds) != 0) {
        fprintf(stderr, "memra bench: pipe: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    fflush(stdout), fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "memra bench: fork: %s\n", strerror(errno));
        return CLI_FAIL;
    }
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]), close(fds[1]);
        execv(prog, args);
        fprintf(stderr, "memra bench: cannot run %s: %s\n", prog, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    if (!in) {
        close(fds[0]);
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        return CLI_FAIL;
    }
    const double t0 = now_ms();
    int rows = 0;
    char line[4096];
    while (fgets(line, sizeof line, in)) {
        progress_done();
        fputs(line, stdout);
        rows += line[0] == ' ' && line[1] == ' ';
        fflush(stdout);
        progress("memra bench: %d rows in %.0f s...", rows, (now_ms() - t0) / 1e3);
    }
    progress_done();
    fclose(in);
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(ws))
        return WEXITSTATUS(ws) == 0 ? CLI_OK : CLI_FAIL;
    fprintf(stderr, "memra bench: the benchmark died of signal %d\n", WTERMSIG(ws));
    return CLI_FAIL;
}

int cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = {
        {"help", no_argument, NULL, 'h'},       {"quick", no_argument, NULL, 'q'},
        {"route", no_argument, NULL, 'r'},      {"output", required_argument, NULL, 'o'},
        {"json", required_argument, NULL, 'o'}, {NULL, 0, NULL, 0}};
    const char *out = NULL;
    int quick = 0, route = 0, c;
    opterr = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "+ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'h':
            fputs(usage, stdout);
            return CLI_OK;
        case 'q':
            quick = 1;
            break;
        case 'r':
            route = 1;
            break;
        case 'o':
            /* "--json --quick" is a forgotten file name, not a file. */
            if (!optarg[0] || optarg[0] == '-') {
                const char *opt = optarg == argv[optind - 1] ? argv[optind - 2] : argv[optind - 1];
                return usage_error("bench", "%.*s needs a file name", (int)strcspn(opt, "="), opt);
            }
            out = optarg;
            break;
        default:
            if (optopt == 'o')
                return usage_error("bench", "%.*s needs a file name",
                                   (int)strcspn(argv[optind - 1], "="), argv[optind - 1]);
            return usage_error("bench", "unrecognized option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("bench", "unexpected argument '%s'", argv[optind]);
    int n_dev = 0;
    const char *why = device_status(&n_dev);
    if (n_dev == 0) {
        fprintf(stderr, "memra bench: no GPU (");
        put_text(stderr, why);
        fprintf(stderr, "): nothing was measured\n");
        return CLI_NOTHING;
    }
    /* A path that cannot be written is said now, not after the run. */
    if (out) {
        const int fd = open(out, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
            fprintf(stderr, "memra bench: cannot write ");
            put_text(stderr, out);
            fprintf(stderr, ": %s\n", strerror(errno));
            return CLI_FAIL;
        }
        close(fd);
    }
    char prog[PATH_MAX + 32];
    if (!find_bench(prog, sizeof prog)) {
        fprintf(stderr, "memra bench: the benchmark program is missing (%s)\n", prog);
        return CLI_FAIL;
    }
    char *args[7];
    int n = 0;
    args[n++] = prog;
    if (out) {
        args[n++] = (char *)"--json";
        args[n++] = (char *)out;
    }
    if (quick)
        args[n++] = (char *)"--quick";
    if (route)
        args[n++] = (char *)"--route";
    args[n] = NULL;
    progress_enable(1);
    return run_bench(prog, args);
}
