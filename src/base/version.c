#include <memra/memra.h>

uint32_t memra_version(void)
{
    return MEMRA_VERSION_NUMBER;
}

const char *memra_version_string(void)
{
    return MEMRA_VERSION_STRING;
}
