/* memra info: what a server that loads libmemra.so gets on this machine:
 * the library file and version, the driver, every NVRTC candidate in the
 * order engines consider them, the kernel cache, and per device which
 * kernel it loads (compiled or from the cache) and how long that takes.
 * Text, or one JSON object with --json (docs/cli.md, schema memra.info/1). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"

static const char usage[] =
    "usage: memra info [--json]\n"
    "\n"
    "What a server loading libmemra.so gets here: the library, the driver, every\n"
    "NVRTC candidate in the order engines consider them, the kernel cache, and\n"
    "per device the kernel it loads and how long that takes. No GPU is not an\n"
    "error here: it is said, and the exit status is 0.\n"
    "\n"
    "Options:\n"
    "  --json      one JSON object on stdout (schema memra.info/1, docs/cli.md)\n"
    "  -h, --help  show this help and exit\n";

typedef struct device_info {
    int ordinal, created, loaded;
    memra_engine_info info;
    memra_kernel_origin origin;
    double load_ms;
    char error[2048];
} device_info;

static void probe(int ordinal, device_info *dev)
{
    memset(dev, 0, sizeof *dev);
    dev->ordinal = ordinal;
    memra_engine *eng;
    if (memra_engine_create(ordinal, &eng)) {
        snprintf(dev->error, sizeof dev->error, "%s", memra_last_error());
        return;
    }
    dev->created = 1;
    memra_engine_get_info(eng, &dev->info);
    progress("device %d: loading the kernel...", ordinal);
    const double t0 = now_ms();
    const memra_status st = memra_engine_warmup(eng);
    dev->load_ms = now_ms() - t0;
    progress_done();
    if (st)
        snprintf(dev->error, sizeof dev->error, "%s", memra_last_error());
    memra_engine_kernel_origin(eng, &dev->origin);
    dev->loaded = st == MEMRA_OK;
    memra_engine_destroy(eng);
}

static const char *state_name(memra_nvrtc_state s)
{
    return s == MEMRA_NVRTC_USABLE ? "usable" : s == MEMRA_NVRTC_REFUSED ? "refused" : "not_tried";
}

static void print_text(int driver_st, int driver_version, const char *driver_error,
                       const memra_nvrtc_info *cands, int n_c, const memra_cache_info *cache,
                       const char *no_dev, const device_info *devs, int n_dev)
{
    printf("memra %s (library ", memra_version_string());
    put_text(stdout, library_file());
    printf(", tool %s)\n", MEMRA_VERSION_STRING);
    if (driver_st == MEMRA_OK) {
        printf("driver: CUDA %d.%d\n", driver_version / 1000, driver_version % 1000 / 10);
    } else {
        printf("driver: not available: ");
        put_text(stdout, driver_error);
        printf("\n");
    }
    printf("NVRTC candidates, in the order engines consider them:\n");
    if (n_c == 0)
        printf("  none\n");
    for (int i = 0; i < n_c; i++) {
        const memra_nvrtc_info *c = &cands[i];
        printf("  %d. ", i + 1);
        put_text(stdout, c->path);
        printf(" (%s): ", c->origin);
        if (c->state == MEMRA_NVRTC_USABLE) {
            printf("NVRTC %d.%d, sm_%d..sm_%d (%d archs)", c->version / 1000,
                   c->version % 1000 / 10, c->archs[0], c->archs[c->n_archs - 1], c->n_archs);
            if (driver_st == MEMRA_OK && c->version / 1000 > driver_version / 1000)
                printf(": refused, newer than the driver (CUDA %d.%d)", driver_version / 1000,
                       driver_version % 1000 / 10);
        } else if (c->state == MEMRA_NVRTC_REFUSED) {
            printf("not usable: ");
            put_text(stdout, c->why);
        } else {
            printf("not loaded (an earlier candidate serves)");
        }
        printf("\n");
    }
    if (cache->enabled) {
        printf("kernel cache: ");
        put_text(stdout, cache->dir);
        printf(" (%llu bytes, cap %llu)\n", (unsigned long long)cache->bytes,
               (unsigned long long)cache->max_bytes);
    } else {
        printf("kernel cache: off\n");
    }
    if (no_dev[0] && driver_st == MEMRA_OK) {
        put_text(stdout, no_dev);
        printf("\n");
    }
    for (int i = 0; i < n_dev; i++) {
        const device_info *d = &devs[i];
        printf("device %d: ", d->ordinal);
        if (!d->created) {
            put_text(stdout, d->error);
            printf("\n");
            continue;
        }
        put_text(stdout, d->info.name);
        printf(", sm_%d\n", d->info.sm);
        const memra_kernel_origin *o = &d->origin;
        if (!d->loaded) {
            printf("  kernel: NOT loaded: ");
            put_text(stdout, d->error);
            printf("\n");
            continue;
        }
        printf("  kernel: %s and loaded as %s_%d %s in %.1f ms (NVRTC %d.%d%s",
               o->from_cache ? "read from the cache" : "compiled", o->is_ptx ? "compute" : "sm",
               o->arch, o->is_ptx ? "PTX (driver JIT)" : "CUBIN", d->load_ms,
               o->nvrtc_version / 1000, o->nvrtc_version % 1000 / 10, o->nvrtc_path[0] ? ", " : "");
        put_text(stdout, o->nvrtc_path);
        printf(")\n");
    }
}

static void print_json(int driver_st, int driver_version, const char *driver_error,
                       const memra_nvrtc_info *cands, int n_c, const memra_cache_info *cache,
                       const char *no_dev, const device_info *devs, int n_dev)
{
    printf("{\"schema\": \"memra.info/1\",\n \"memra\": {\"version\": ");
    put_json(stdout, memra_version_string());
    printf(", \"tool_version\": ");
    put_json(stdout, MEMRA_VERSION_STRING);
    printf(", \"library\": ");
    put_json(stdout, library_file());
    printf("},\n \"driver\": {\"available\": %s, \"version\": %d, \"error\": ",
           driver_st == MEMRA_OK ? "true" : "false", driver_st == MEMRA_OK ? driver_version : 0);
    put_json(stdout, driver_st == MEMRA_OK ? NULL : driver_error);
    printf("},\n \"nvrtc\": [");
    for (int i = 0; i < n_c; i++) {
        const memra_nvrtc_info *c = &cands[i];
        printf("%s\n  {\"path\": ", i ? "," : "");
        put_json(stdout, c->path);
        printf(", \"origin\": ");
        put_json(stdout, c->origin);
        printf(", \"state\": \"%s\", \"why\": ", state_name(c->state));
        put_json(stdout, c->state == MEMRA_NVRTC_REFUSED ? c->why : NULL);
        printf(", \"version\": %d, \"archs\": [", c->version);
        for (int k = 0; k < c->n_archs; k++)
            printf("%s%d", k ? ", " : "", c->archs[k]);
        printf("]}");
    }
    printf("],\n \"cache\": {\"enabled\": %s, \"dir\": ", cache->enabled ? "true" : "false");
    put_json(stdout, cache->enabled ? cache->dir : NULL);
    printf(", \"bytes\": %llu, \"max_bytes\": %llu},\n \"devices\": [",
           (unsigned long long)cache->bytes, (unsigned long long)cache->max_bytes);
    for (int i = 0; i < n_dev; i++) {
        const device_info *d = &devs[i];
        const memra_kernel_origin *o = &d->origin;
        printf("%s\n  {\"ordinal\": %d, \"name\": ", i ? "," : "", d->ordinal);
        put_json(stdout, d->created ? d->info.name : NULL);
        printf(", \"sm\": %d, \"kernel\": {\"loaded\": %s", d->created ? d->info.sm : 0,
               d->loaded ? "true" : "false");
        if (d->loaded) {
            printf(", \"target\": \"%s_%d\", \"ptx\": %s, \"from_cache\": %s, \"nvrtc_version\": "
                   "%d, \"nvrtc_path\": ",
                   o->is_ptx ? "compute" : "sm", o->arch, o->is_ptx ? "true" : "false",
                   o->from_cache ? "true" : "false", o->nvrtc_version);
            put_json(stdout, o->nvrtc_path[0] ? o->nvrtc_path : NULL);
            printf(", \"load_ms\": %.3f", d->load_ms);
        }
        printf(", \"error\": ");
        put_json(stdout, d->loaded ? NULL : d->error);
        printf("}}");
    }
    printf("],\n \"no_device\": ");
    put_json(stdout, no_dev[0] ? no_dev : NULL);
    printf("}\n");
}

int cmd_info(int argc, char **argv)
{
    int help, json;
    int rc = parse_simple(argc, argv, "info", usage, &help, &json);
    if (rc || help)
        return rc;
    progress_enable(!json);
    int driver_version = 0;
    const memra_status driver_st = memra_driver_version(&driver_version);
    char driver_error[1024];
    snprintf(driver_error, sizeof driver_error, "%s", driver_st ? memra_last_error() : "");
    int n_c = 0;
    memra_nvrtc_list(NULL, 0, &n_c);
    memra_nvrtc_info *cands = calloc((size_t)(n_c ? n_c : 1), sizeof *cands);
    memra_cache_info cache;
    memra_cache_get_info(&cache);
    int n_dev = 0;
    const char *no_dev = device_status(&n_dev);
    device_info *devs = calloc((size_t)(n_dev ? n_dev : 1), sizeof *devs);
    if (!cands || !devs) {
        fprintf(stderr, "memra info: out of memory\n");
        free(cands), free(devs);
        return CLI_FAIL;
    }
    for (int i = 0; i < n_dev; i++)
        probe(i, &devs[i]);
    /* After the kernel loads: engines may have opened more candidates. */
    int listed = 0;
    memra_nvrtc_list(NULL, 0, &listed);
    if (listed > n_c) {
        memra_nvrtc_info *grown = realloc(cands, (size_t)listed * sizeof *cands);
        if (grown)
            cands = grown, n_c = listed;
    }
    memra_nvrtc_list(cands, n_c, &listed);
    n_c = listed < n_c ? listed : n_c;
    if (json)
        print_json(driver_st, driver_version, driver_error, cands, n_c, &cache, no_dev, devs,
                   n_dev);
    else
        print_text(driver_st, driver_version, driver_error, cands, n_c, &cache, no_dev, devs,
                   n_dev);
    free(cands), free(devs);
    return CLI_OK;
}
