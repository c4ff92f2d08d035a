int memra_bench_main(int argc, char **argv);

int main(int argc, char **argv)
{
    return memra_bench_main(argc, argv);
}
