/* Unit tests for src/base/gguf: a GGUF v3 file built in memory with every metadata type,
 * arrays and two tensors; typed getters and conversions; every truncation is rejected
 * without reading out of bounds. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/gguf.h"

static void put(rp_buf *b, const void *p, size_t n)
{
    cr_assert_eq(rp_buf_append(b, p, n), RP_OK);
}

static void put_u32(rp_buf *b, uint32_t v)
{
    put(b, &v, 4);
}

static void put_u64(rp_buf *b, uint64_t v)
{
    put(b, &v, 8);
}

static void put_str(rp_buf *b, const char *s)
{
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static void put_key(rp_buf *b, const char *k, rp_gguf_type t)
{
    put_str(b, k);
    put_u32(b, (uint32_t)t);
}

/* 11 kvs, 2 tensors, alignment 64 */
static void build(rp_buf *b)
{
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, 2);  /* tensors */
    put_u64(b, 12); /* kvs */
    uint8_t u8 = 200;
    int8_t i8 = -5;
    int16_t i16 = -300;
    float f = 1.5f;
    double d = -2.25;
    int64_t i64 = -1234567890123LL;
    put_key(b, "a.u8", RP_GGUF_UINT8), put(b, &u8, 1);
    put_key(b, "a.i8", RP_GGUF_INT8), put(b, &i8, 1);
    put_key(b, "a.i16", RP_GGUF_INT16), put(b, &i16, 2);
    put_key(b, "a.u32", RP_GGUF_UINT32), put_u32(b, 4000000000u);
    put_key(b, "a.f32", RP_GGUF_FLOAT32), put(b, &f, 4);
    put_key(b, "a.f64", RP_GGUF_FLOAT64), put(b, &d, 8);
    put_key(b, "a.i64", RP_GGUF_INT64), put(b, &i64, 8);
    uint8_t t = 1;
    put_key(b, "a.bool", RP_GGUF_BOOL), put(b, &t, 1);
    put_key(b, "a.str", RP_GGUF_STRING), put_str(b, "hello");
    put_key(b, "a.strs", RP_GGUF_ARRAY), put_u32(b, RP_GGUF_STRING), put_u64(b, 3);
    put_str(b, "x"), put_str(b, ""), put_str(b, "zz");
    put_key(b, "a.i32s", RP_GGUF_ARRAY), put_u32(b, RP_GGUF_INT32), put_u64(b, 3);
    int32_t v[3] = {1, -2, 3};
    put(b, v, sizeof(v));
    put_key(b, "general.alignment", RP_GGUF_UINT32), put_u32(b, 64);
    /* tensors: f32 [4, 2] at 0, q8_0 [32] at 64 */
    put_str(b, "w.f32"), put_u32(b, 2), put_u64(b, 4), put_u64(b, 2), put_u32(b, 0), put_u64(b, 0);
    put_str(b, "w.q8"), put_u32(b, 1), put_u64(b, 32), put_u32(b, 8), put_u64(b, 64);
    while (b->len % 64)
        put(b, "", 1);
    for (int i = 0; i < 8; i++) {
        float x = (float)i;
        put(b, &x, 4);
    }
    while (b->len % 64)
        put(b, "", 1);
    for (int i = 0; i < 34; i++)
        put(b, "\x01", 1);
}

Test(gguf, reads_every_type)
{
    rp_buf b = {0};
    build(&b);
    rp_gguf *g;
    rp_err err;
    cr_assert_eq(rp_gguf_open_mem(b.data, b.len, &g, &err), RP_OK, "%s", err.msg);
    cr_expect_eq(rp_gguf_version(g), 3);
    cr_expect_eq(rp_gguf_n_kv(g), 12);
    cr_expect_eq(rp_gguf_alignment(g), 64);
    cr_expect_eq(rp_gguf_data_offset(g) % 64, 0);
    int64_t i64;
    uint32_t u32;
    int32_t i32;
    double dv;
    float fv;
    int bv;
    cr_expect_eq(rp_gguf_get_i64(g, "a.u8", &i64, &err), RP_OK);
    cr_expect_eq(i64, 200);
    cr_expect_eq(rp_gguf_get_i32(g, "a.i8", &i32, &err), RP_OK);
    cr_expect_eq(i32, -5);
    cr_expect_eq(rp_gguf_get_i64(g, "a.i16", &i64, &err), RP_OK);
    cr_expect_eq(i64, -300);
    cr_expect_eq(rp_gguf_get_u32(g, "a.u32", &u32, &err), RP_OK);
    cr_expect_eq(u32, 4000000000u);
    cr_expect_eq(rp_gguf_get_i32(g, "a.u32", &i32, &err), RP_ERR_INVALID); /* does not fit */
    cr_expect_eq(rp_gguf_get_u32(g, "a.i8", &u32, &err), RP_ERR_INVALID);  /* negative */
    cr_expect_eq(rp_gguf_get_f32(g, "a.f32", &fv, &err), RP_OK);
    cr_expect_float_eq(fv, 1.5f, 1e-9);
    cr_expect_eq(rp_gguf_get_f64(g, "a.f64", &dv, &err), RP_OK);
    cr_expect_float_eq(dv, -2.25, 1e-12);
    cr_expect_eq(rp_gguf_get_i64(g, "a.i64", &i64, &err), RP_OK);
    cr_expect_eq(i64, -1234567890123LL);
    cr_expect_eq(rp_gguf_get_bool(g, "a.bool", &bv, &err), RP_OK);
    cr_expect_eq(bv, 1);
    const char *s;
    size_t n;
    cr_expect_eq(rp_gguf_get_str(g, "a.str", &s, &n, &err), RP_OK);
    cr_expect_eq(n, 5);
    cr_expect(memcmp(s, "hello", 5) == 0);
    char *dup;
    cr_expect_eq(rp_gguf_get_strdup(g, "a.str", &dup, &err), RP_OK);
    cr_expect_str_eq(dup, "hello");
    rp_free(dup);
    cr_expect_eq(rp_gguf_get_str(g, "a.u8", &s, &n, &err), RP_ERR_INVALID);
    cr_expect_eq(rp_gguf_get_f64(g, "a.str", &dv, &err), RP_ERR_INVALID);
    cr_expect_eq(rp_gguf_get_i64(g, "nope", &i64, &err), RP_ERR_NOT_FOUND);
    rp_gguf_type et;
    uint64_t cnt;
    cr_expect_eq(rp_gguf_get_arr(g, "a.strs", &et, &cnt, &err), RP_OK);
    cr_expect_eq(et, RP_GGUF_STRING);
    cr_expect_eq(cnt, 3);
    int64_t ia = rp_gguf_find(g, "a.strs");
    cr_expect_eq(rp_gguf_arr_str(g, ia, 2, &s, &n), RP_OK);
    cr_expect(n == 2 && memcmp(s, "zz", 2) == 0);
    cr_expect_eq(rp_gguf_arr_str(g, ia, 1, &s, &n), RP_OK);
    cr_expect_eq(n, 0);
    cr_expect_eq(rp_gguf_arr_str(g, ia, 3, &s, &n), RP_ERR_INVALID);
    int64_t ii = rp_gguf_find(g, "a.i32s");
    cr_expect_eq(rp_gguf_arr_i64(g, ii, 1, &i64), RP_OK);
    cr_expect_eq(i64, -2);
    cr_expect_eq(rp_gguf_arr_f64(g, ii, 1, &dv), RP_ERR_INVALID);
    size_t es;
    cr_expect_not_null(rp_gguf_arr_data(g, ii, &es, &cnt));
    cr_expect(es == 4 && cnt == 3);
    cr_expect_eq(rp_gguf_kv_type(g, ii), RP_GGUF_ARRAY);
    cr_expect_str_eq(rp_gguf_type_name(RP_GGUF_FLOAT32), "f32");
    cr_expect_eq(rp_gguf_n_tensors(g), 2);
    int64_t it = rp_gguf_find_tensor(g, "w.q8");
    cr_assert_eq(it, 1);
    rp_gguf_tensor ti;
    cr_assert_eq(rp_gguf_tensor_info(g, 0, &ti), RP_OK);
    cr_expect(ti.n_dims == 2 && ti.dims[0] == 4 && ti.dims[1] == 2 && ti.type == 0);
    cr_expect_eq(ti.n_bytes, 32);
    cr_expect_float_eq(((const float *)ti.data)[7], 7.0f, 1e-9);
    cr_assert_eq(rp_gguf_tensor_info(g, 1, &ti), RP_OK);
    cr_expect_eq(ti.n_bytes, 34);
    cr_expect_eq(((const uint8_t *)ti.data)[33], 1);
    cr_expect_eq(rp_gguf_find_tensor(g, "w"), -1);
    cr_expect_eq(rp_gguf_type_bytes(2, 64), 36);  /* Q4_0: 2 blocks of 18 */
    cr_expect_eq(rp_gguf_type_bytes(2, 33), 0);   /* not a block multiple */
    rp_gguf_close(g);
    rp_buf_deinit(&b);
}

Test(gguf, every_truncation_is_rejected)
{
    rp_buf b = {0};
    build(&b);
    for (size_t n = 0; n < b.len; n++) {
        /* a heap copy of exactly n bytes, so ASan sees any read past the end */
        char *c = rp_alloc(n ? n : 1);
        memcpy(c, b.data, n);
        rp_gguf *g;
        rp_err err;
        cr_expect_neq(rp_gguf_open_mem(c, n, &g, &err), RP_OK, "length %zu accepted", n);
        rp_free(c);
    }
    rp_buf_deinit(&b);
}

Test(gguf, corrupt_headers)
{
    rp_buf b = {0};
    build(&b);
    rp_gguf *g;
    rp_err err;
    char *c = rp_alloc(b.len);
    memcpy(c, b.data, b.len);
    c[0] = 'X';
    cr_expect_eq(rp_gguf_open_mem(c, b.len, &g, &err), RP_ERR_INVALID);
    memcpy(c, b.data, b.len);
    c[4] = 9; /* version */
    cr_expect_eq(rp_gguf_open_mem(c, b.len, &g, &err), RP_ERR_UNSUPPORTED);
    memcpy(c, b.data, b.len);
    memset(c + 16, 0xff, 8); /* n_kv huge */
    cr_expect_eq(rp_gguf_open_mem(c, b.len, &g, &err), RP_ERR_INVALID);
    rp_free(c);
    cr_expect_eq(rp_gguf_open("/nonexistent.gguf", &g, &err), RP_ERR_NOT_FOUND);
    rp_buf_deinit(&b);
}
