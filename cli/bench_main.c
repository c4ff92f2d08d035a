/* memra-bench: the benchmark behind `memra bench` (benchmarks/). It is a
 * program of its own because it measures the bare kernels beside the
 * library and so needs the library's insides; the installed `memra` tool
 * links only libmemra.so and runs this one, installed in
 * <libexecdir>/memra, with the options it parsed. */
#include <stdio.h>

int memra_bench_main(int argc, char **argv);

int main(int argc, char **argv)
{
    /* Rows reach `memra bench` through a pipe as they are measured. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    return memra_bench_main(argc, argv);
}
