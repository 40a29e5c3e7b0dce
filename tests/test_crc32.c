/* fx_crc32 (src/core/tensor_io.c), the checksum of checkpoints and weights files, is computed
 * by the tensor library without zlib; files written before (with zlib's crc32) must still
 * load, so it must give zlib's value for every buffer: the standard check value, the empty
 * buffer, every length up to 300 bytes, every starting alignment and a few large buffers. */
#include "core/tensor_io.h"
#include "testutil.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t zlib_crc(const uint8_t *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    return (uint32_t)crc32(c, p, (uInt)n);
}

int main(void)
{
    /* the CRC-32 check value of "123456789" (the same for zlib, gzip and PNG) */
    const char *nine = "123456789";
    CHECK(fx_crc32((const uint8_t *)nine, 9) == 0xCBF43926u, "crc(\"123456789\") = %08x",
          (unsigned)fx_crc32((const uint8_t *)nine, 9));
    CHECK(fx_crc32((const uint8_t *)"", 0) == 0u, "the empty buffer's CRC is 0");

    const size_t big = (size_t)3 << 20;
    uint8_t *buf = malloc(big + 8);
    if (!buf) return test_skip("test_crc32", "no memory for the buffer");
    test_rng r;
    test_rng_seed(&r, 20261125);
    for (size_t i = 0; i < big + 8; i++) buf[i] = (uint8_t)test_rng_u64(&r);

    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n <= 300; n++) {
            uint32_t got = fx_crc32(buf + off, n), want = zlib_crc(buf + off, n);
            CHECK(got == want, "offset %zu, %zu bytes: %08x, zlib %08x", off, n, (unsigned)got,
                  (unsigned)want);
        }
    const size_t sizes[] = {4095, 4096, 65537, (size_t)1 << 20, big};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint32_t got = fx_crc32(buf, sizes[k]), want = zlib_crc(buf, sizes[k]);
        CHECK(got == want, "%zu bytes: %08x, zlib %08x", sizes[k], (unsigned)got, (unsigned)want);
    }
    /* all-zero and all-one bytes: the table's edge entries */
    memset(buf, 0, 1000);
    CHECK(fx_crc32(buf, 1000) == zlib_crc(buf, 1000), "1000 zero bytes");
    memset(buf, 0xFF, 1000);
    CHECK(fx_crc32(buf, 1000) == zlib_crc(buf, 1000), "1000 0xFF bytes");
    free(buf);
    return test_finish("test_crc32");
}
