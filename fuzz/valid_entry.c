/* The fuzz target fed a valid kernel-cache entry, the input its parser
 * exists to accept, and then that entry with each of its bits flipped: the
 * target must take the first without tripping its own invariants (it once
 * assumed a 48-byte header and aborted on every valid entry) and the parser
 * must refuse every flip. With a file argument the valid input is also
 * written there, the seed fuzz/corpus/cache_valid is made this way. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    memra_cache_key key;
    for (int i = 0; i < 16; i++)
        key.bytes[i] = (unsigned char)(0x5a ^ (i * 37));
    char image[200];
    for (size_t i = 0; i < sizeof image; i++)
        image[i] = (char)(i * 7 + 1);
    memra_image img = {image, sizeof image, 0, 90};
    unsigned char *entry;
    size_t n;
    if (memra_cache_entry_bytes(&key, 13, 0, &img, &entry, &n) != 0)
        return 1;
    /* Byte 0 picks the cache parser (see fuzz_host.c), then the key the
     * parser is asked for, then the entry. */
    const size_t size = 1 + 16 + n;
    uint8_t *in = malloc(size);
    if (!in)
        return 1;
    in[0] = 2;
    memcpy(in + 1, key.bytes, 16);
    memcpy(in + 17, entry, n);
    memra_image out;
    if (!memra_cache_parse(entry, n, &key, &out) || out.size != sizeof image ||
        memcmp(out.data, image, sizeof image) != 0) {
        fprintf(stderr, "the parser refuses a valid entry\n");
        return 1;
    }
    memra_image_free(&out);
    LLVMFuzzerTestOneInput(in, size);
    int accepted = 0;
    for (size_t bit = 0; bit < 8 * n; bit++) {
        entry[bit / 8] ^= (unsigned char)(1u << bit % 8);
        in[17 + bit / 8] ^= (unsigned char)(1u << bit % 8);
        if (memra_cache_parse(entry, n, &key, &out)) {
            fprintf(stderr, "bit %zu (byte %zu) flipped is accepted\n", bit, bit / 8);
            memra_image_free(&out);
            accepted++;
        }
        LLVMFuzzerTestOneInput(in, size);
        entry[bit / 8] ^= (unsigned char)(1u << bit % 8);
        in[17 + bit / 8] ^= (unsigned char)(1u << bit % 8);
    }
    if (argc > 1) {
        FILE *f = fopen(argv[1], "wb");
        if (!f || fwrite(in, 1, size, f) != size || fclose(f) != 0) {
            perror(argv[1]);
            return 1;
        }
    }
    printf("valid entry of %zu bytes replayed; %zu single-bit flips, %d accepted\n", n, 8 * n,
           accepted);
    free(entry);
    free(in);
    return accepted != 0;
}
