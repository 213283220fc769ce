/* Unit tests for src/base: status, alloc, buf, arena, threadpool, half, file. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/arena.h"
#include "base/buf.h"
#include "base/file.h"
#include "base/half.h"
#include "base/status.h"
#include "base/threadpool.h"

Test(status, err_set_returns_code_and_formats)
{
    rp_err err;
    cr_assert_eq(rp_err_set(&err, RP_ERR_INVALID, "bad role '%s'", "x"), RP_ERR_INVALID);
    cr_assert_str_eq(err.msg, "bad role 'x'");
    rp_err_wrap(&err, "message %d", 3);
    cr_assert_str_eq(err.msg, "message 3: bad role 'x'");
    cr_assert_eq(err.code, RP_ERR_INVALID);
    cr_assert_eq(rp_err_set(NULL, RP_ERR_IO, "ignored"), RP_ERR_IO);
}

Test(alloc, counts_and_frees)
{
    int64_t before = rp_alloc_live_bytes(RP_TAG_KV);
    void *p = rp_alloc_tagged(1000, RP_TAG_KV);
    cr_assert_not_null(p);
    cr_assert_eq(rp_alloc_live_bytes(RP_TAG_KV), before + 1000);
    p = rp_realloc(p, 10);
    cr_assert_eq(rp_alloc_live_bytes(RP_TAG_KV), before + 10);
    rp_free(p);
    cr_assert_eq(rp_alloc_live_bytes(RP_TAG_KV), before);
    void *a = rp_alloc_aligned(100, RP_TAG_MODEL);
    cr_assert_eq((uintptr_t)a % 64, 0);
    rp_free_aligned(a);
    rp_free(NULL);
}

Test(alloc, fail_hook_fails_the_nth)
{
    rp_alloc_fail_after(2);
    void *a = rp_alloc(8), *b = rp_alloc(8), *c = rp_alloc(8);
    cr_assert_not_null(a);
    cr_assert_null(b);
    cr_assert_not_null(c);
    rp_free(a);
    rp_free(c);
    rp_alloc_fail_after(0);
}

Test(buf, append_printf_take)
{
    rp_buf b = {0};
    cr_assert_eq(rp_buf_puts(&b, "hello"), RP_OK);
    cr_assert_eq(rp_buf_printf(&b, " %d %s", 42, "x"), RP_OK);
    for (int i = 0; i < 1000; i++)
        rp_buf_putc(&b, 'a');
    cr_assert_eq(b.len, strlen("hello 42 x") + 1000);
    cr_assert_eq(strncmp(b.data, "hello 42 x", 10), 0);
    char *s = rp_buf_take(&b);
    cr_assert_null(b.data);
    rp_free(s);
}

static int g_cleaned;
static void cleanup(void *p) { g_cleaned += *(int *)p; }

Test(arena, alloc_zeroed_aligned_and_cleanups)
{
    rp_arena *a = rp_arena_new(128);
    int *x = RP_ARENA_NEW(a, int, 10);
    cr_assert_eq((uintptr_t)x % 16, 0);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(x[i], 0);
    char *big = rp_arena_alloc(a, 100000); /* bigger than a chunk */
    cr_assert_not_null(big);
    memset(big, 1, 100000);
    cr_assert_str_eq(rp_arena_strdup(a, "abc"), "abc");
    static int v = 5;
    rp_arena_on_free(a, cleanup, &v);
    g_cleaned = 0;
    rp_arena_free(a);
    cr_assert_eq(g_cleaned, 5);
}

typedef struct sum_ctx {
    _Atomic long total;
    long n;
} sum_ctx;

static void sum_part(void *p, int i, int n)
{
    sum_ctx *c = p;
    long b, e, s = 0;
    rp_pool_split(c->n, i, n, 16, &b, &e);
    for (long k = b; k < e; k++)
        s += k;
    atomic_fetch_add(&c->total, s);
}

Test(threadpool, runs_every_share_many_times)
{
    rp_pool *pool = rp_pool_new(3);
    cr_assert_not_null(pool);
    for (int rep = 0; rep < 2000; rep++) {
        sum_ctx c = {.n = 1000 + rep};
        rp_pool_run(pool, sum_part, &c);
        cr_assert_eq(c.total, c.n * (c.n - 1) / 2);
    }
    rp_pool_free(pool);
}

Test(threadpool, split_covers_range)
{
    for (int n_threads = 1; n_threads < 7; n_threads++) {
        long next = 0;
        for (int i = 0; i < n_threads; i++) {
            long b, e;
            rp_pool_split(1003, i, n_threads, 16, &b, &e);
            cr_assert_eq(b, next);
            cr_assert(b % 16 == 0 || b == 1003);
            next = e;
        }
        cr_assert_eq(next, 1003);
    }
}

Test(half, bf16_and_f16_round_trip)
{
    cr_assert_float_eq(rp_bf16_to_f32(rp_f32_to_bf16(1.5f)), 1.5f, 0);
    cr_assert_eq(rp_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80); /* ties to even */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaNs */
        cr_assert_eq(rp_f32_to_f16(rp_f16_to_f32((uint16_t)h)), h, "f16 0x%04x", h);
    }
    cr_assert_float_eq(rp_f16_to_f32(rp_f32_to_f16(65504.f)), 65504.f, 0);
    cr_assert_eq(rp_f32_to_f16(1e6f), 0x7c00);
}

Test(file, write_read_map)
{
    char path[] = "/tmp/rp_file_test_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    close(fd);
    rp_err err;
    cr_assert_eq(rp_file_write(path, "abc", 3, &err), RP_OK);
    char *data;
    size_t n;
    cr_assert_eq(rp_file_read(path, &data, &n, &err), RP_OK);
    cr_assert_eq(n, 3);
    cr_assert_str_eq(data, "abc");
    rp_free(data);
    rp_mmap m;
    cr_assert_eq(rp_mmap_open(path, &m, &err), RP_OK);
    cr_assert_eq(m.n_bytes, 3);
    cr_assert_eq(memcmp(m.data, "abc", 3), 0);
    rp_mmap_close(&m);
    unlink(path);
    cr_assert_eq(rp_file_read("/nonexistent/x", &data, &n, &err), RP_ERR_NOT_FOUND);
    cr_assert(strstr(err.msg, "/nonexistent/x") != NULL);
}
