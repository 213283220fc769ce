/* Unit tests for src/base/sha256: FIPS 180-4 / NIST example vectors, chunked updates, files. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/sha256.h"

static void hex_of(const void *p, size_t n, char out[65])
{
    rp_sha256 c;
    uint8_t d[32];
    rp_sha256_init(&c);
    rp_sha256_update(&c, p, n);
    rp_sha256_final(&c, d);
    rp_sha256_hex(d, out);
}

Test(sha256, known_vectors)
{
    char h[65];
    hex_of("", 0, h);
    cr_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    hex_of("abc", 3, h);
    cr_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    hex_of(two, strlen(two), h);
    cr_assert_str_eq(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    hex_of(four, strlen(four), h);
    cr_assert_str_eq(h, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

Test(sha256, million_a_in_odd_chunks)
{
    static char a[1000000];
    memset(a, 'a', sizeof a);
    rp_sha256 c;
    rp_sha256_init(&c);
    size_t off = 0, step = 1;
    while (off < sizeof a) { /* chunk sizes 1, 2, 3, ... cross every block boundary */
        size_t n = step < sizeof a - off ? step : sizeof a - off;
        rp_sha256_update(&c, a + off, n);
        off += n;
        step = step % 150 + 1;
    }
    uint8_t d[32];
    char h[65];
    rp_sha256_final(&c, d);
    rp_sha256_hex(d, h);
    cr_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

Test(sha256, padding_edges)
{
    /* 55, 56 and 64 bytes: the length field fits, just misses, and a full block. */
    char buf[64];
    memset(buf, 'a', sizeof buf);
    char h[65];
    hex_of(buf, 55, h);
    cr_assert_str_eq(h, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    hex_of(buf, 56, h);
    cr_assert_str_eq(h, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    hex_of(buf, 64, h);
    cr_assert_str_eq(h, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

Test(sha256, file_and_missing_file)
{
    char path[] = "/tmp/rp_sha256_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "abc", 3), 3);
    close(fd);
    char h[65];
    rp_err err;
    cr_assert_eq(rp_sha256_file(path, h, &err), RP_OK);
    cr_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
    cr_assert_eq(rp_sha256_file(path, h, &err), RP_ERR_NOT_FOUND);
}
