/* memra bench: the library side by side with the bare baselines, in one
 * process, one table. Host costs are medians of per-batch means taken with a
 * monotonic clock; GPU times come from CUDA events; warm-up is excluded.
 *
 *   memra-bench [--json FILE] [--quick] [--route]
 *
 * --route measures the routing section (bench_route.c) and first use alone.
 * Without --json nothing is written. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bench_util.h"

int memra_bench_main(int argc, char **argv)
{
    static const char usage[] = "usage: memra bench [--json FILE] [--quick] [--route]\n";
    const char *json_path = NULL;
    int route_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            /* "--json --quick" means a forgotten file name, not a file. */
            if (i + 1 >= argc || argv[i + 1][0] == '\0' || strncmp(argv[i + 1], "--", 2) == 0) {
                fprintf(stderr, "memra bench: --json needs a file name\n%s", usage);
                return 2;
            }
            json_path = argv[++i];
        } else if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--route") == 0) {
            route_only = 1;
        } else {
            fprintf(stderr, "memra bench: unknown argument '%s'\n%s", argv[i], usage);
            return 2;
        }
    }
    /* Opened before anything is measured: a bad path is said at once, not
     * after minutes of measuring. */
    if (json_path && !(bench_json = fopen(json_path, "w"))) {
        fprintf(stderr, "memra bench: cannot write %s: %s\n", json_path, strerror(errno));
        return 1;
    }
    if (bench_json)
        fprintf(bench_json, "{\"memra\": \"%s\", \"rows\": [", memra_version_string());
    int n = 0;
    if (memra_device_count(&n) != MEMRA_OK || n == 0)
        printf("memra bench: no GPU found (%s); nothing to measure\n",
               n == 0 ? memra_last_error() : "");
    d = memra_driver_get();
    for (int i = 0; i < n; i++) {
        bench_tables(i, route_only);
        bench_first_use(i);
    }
    if (!bench_json)
        return 0;
    fprintf(bench_json, "\n]}\n");
    const int bad = ferror(bench_json);
    if (fclose(bench_json) != 0 || bad) {
        fprintf(stderr, "memra bench: writing %s failed: %s\n", json_path, strerror(errno));
        return 1;
    }
    printf("\nJSON: %s\n", json_path);
    return 0;
}
