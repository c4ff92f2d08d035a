/* A library a stand-in NVRTC needs (DT_NEEDED), as the real one needs
 * librt.so.1: what test_nvrtc_discovery names a FIFO after on
 * LD_LIBRARY_PATH. */
int memra_fake_dep(void);
int memra_fake_dep(void)
{
    return 1;
}
