/* tests/unit/backend/kv_test.c - the KV row codec and paged attention.
 *
 * Codec: every storage type round-trips within its stated error (f32 exact; bf16 / f16 their
 * rounding; int8 / int4 half a step of the row's scale). Paged attention: a step of three
 * sequences (prefill chunk, decode, short chunk) over blocks scattered through a pool, with
 * and without a sliding window and sinks, equals rp_op_attention over contiguous f32 copies of
 * the same (decoded) rows: bit for bit for the reference backend, within 1e-5 for the fast
 * kernels (1 and 2 threads); the KV store op writes rows exactly as the codec encodes them.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_impl.h"
#include "base/alloc.h"
#include "base/cpu.h"

static float frand(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

Test(kv_rows, round_trip_within_stated_error)
{
    unsigned seed = 7;
    float x[128], y[128];
    unsigned char buf[1024];
    for (int dt = 0; dt < RP_KV_DTYPE_COUNT; dt++)
        for (int rep = 0; rep < 50; rep++) {
            int hd = rep % 2 ? 64 : 128;
            float amp = rep % 3 ? 1.0f : 30.0f, mx = 0.0f;
            for (int i = 0; i < hd; i++) {
                x[i] = amp * frand(&seed);
                mx = fabsf(x[i]) > mx ? fabsf(x[i]) : mx;
            }
            cr_assert_leq(rp_kv_row_bytes((rp_kv_dtype)dt, hd), sizeof buf);
            rp_kv_row_store((rp_kv_dtype)dt, x, hd, buf);
            rp_kv_row_load((rp_kv_dtype)dt, buf, hd, y);
            for (int i = 0; i < hd; i++) {
                float e = fabsf(x[i] - y[i]), lim;
                switch (dt) {
                case RP_KV_F32: lim = 0.0f; break;
                case RP_KV_BF16: lim = fabsf(x[i]) / 256.0f; break;
                case RP_KV_F16: lim = fabsf(x[i]) / 2048.0f + 1e-7f; break;
                case RP_KV_INT8: lim = mx / 127.0f / 2.0f * 1.0001f; break;
                default: lim = mx / 7.0f / 2.0f * 1.0001f; break;
                }
                cr_assert_leq(e, lim, "%s: |%g - %g| > %g", rp_kv_dtype_name((rp_kv_dtype)dt),
                              x[i], y[i], lim);
            }
        }
    rp_kv_dtype d;
    cr_assert_eq(rp_kv_dtype_parse("int4", &d), 0);
    cr_assert_eq(d, RP_KV_INT4);
    cr_assert_neq(rp_kv_dtype_parse("q4", &d), 0);
    cr_assert_eq(rp_kv_row_bytes(RP_KV_INT4, 12), 0, "int4 needs head_dim % 8 == 0");
    cr_assert_eq(rp_kv_row_bytes(RP_KV_INT8, 64), 68);
    cr_assert_eq(rp_kv_row_bytes(RP_KV_INT4, 64), 36);
}

/* G = 5 query heads per KV head and head_dim 64: the fused AVX-512 group (4 heads, then 1) */
enum { H = 10, KVH = 2, HD = 64, LAYERS = 2, BT = 8, NB = 24, CTX = 48 };

typedef struct scene {
    rp_kv_layout L;
    int32_t table[3][CTX / BT];
    rp_step_seq seqs[3];
    float *k, *v; /* contiguous [3][LAYERS][CTX][KVH*HD]: what the blocks decode to */
    float *q;     /* [n_rows][H][HD] */
    float *knew, *vnew; /* the step's own rows [n_rows][KVH*HD] */
    int n_rows;
} scene;

static float *kc(scene *s, int seq, int layer) { return s->k + ((size_t)(seq * LAYERS + layer) * CTX) * KVH * HD; }
static float *vc(scene *s, int seq, int layer) { return s->v + ((size_t)(seq * LAYERS + layer) * CTX) * KVH * HD; }

/* Three sequences (5 tokens at 0, 1 at 20, 3 at 37) over a shuffled block table. */
static void scene_make(scene *s, rp_kv_dtype dt, rp_backend *be)
{
    unsigned seed = 11u + (unsigned)dt;
    memset(s, 0, sizeof *s);
    size_t row = rp_kv_row_bytes(dt, HD);
    s->L = (rp_kv_layout){.dtype = dt, .block_tokens = BT, .n_layers = LAYERS, .n_kv_heads = KVH,
                          .head_dim = HD, .row_bytes = row, .half_bytes = row * KVH * BT,
                          .block_bytes = row * KVH * BT * 2 * LAYERS};
    s->L.base = rp_alloc_aligned(s->L.block_bytes * NB, RP_TAG_KV);
    int perm[NB];
    for (int i = 0; i < NB; i++)
        perm[i] = (i * 7 + 3) % NB; /* 7 is prime to 24: a permutation */
    for (int q = 0, n = 0; q < 3; q++)
        for (int b = 0; b < CTX / BT; b++)
            s->table[q][b] = perm[n++ % NB];
    const int pos0[3] = {0, 20, 37}, ntok[3] = {5, 1, 3};
    for (int q = 0, t0 = 0; q < 3; q++) {
        s->seqs[q] = (rp_step_seq){.blocks = s->table[q], .n_blocks = CTX / BT, .t0 = t0,
                                   .n_tok = ntok[q], .pos0 = pos0[q]};
        t0 += ntok[q];
        s->n_rows = t0;
    }
    size_t kvd = KVH * HD;
    s->k = rp_alloc(sizeof(float) * 3 * LAYERS * CTX * kvd);
    s->v = rp_alloc(sizeof(float) * 3 * LAYERS * CTX * kvd);
    s->q = rp_alloc(sizeof(float) * s->n_rows * H * HD);
    s->knew = rp_alloc(sizeof(float) * LAYERS * s->n_rows * kvd);
    s->vnew = rp_alloc(sizeof(float) * LAYERS * s->n_rows * kvd);
    for (int i = 0; i < s->n_rows * H * HD; i++)
        s->q[i] = frand(&seed);
    float tmp[HD];
    for (int q = 0; q < 3; q++)
        for (int l = 0; l < LAYERS; l++)
            for (int p = 0; p < s->seqs[q].pos0; p++) /* the cached past: written directly */
                for (int h = 0; h < KVH; h++) {
                    for (int vv = 0; vv < 2; vv++) {
                        for (int i = 0; i < HD; i++)
                            tmp[i] = 2.0f * frand(&seed);
                        void *dst = rp_kv_row_at(&s->L, s->table[q], l, vv, p, h);
                        rp_kv_row_store(dt, tmp, HD, dst);
                        rp_kv_row_load(dt, dst, HD, (vv ? vc(s, q, l) : kc(s, q, l)) + p * kvd + h * HD);
                    }
                }
    for (int i = 0; i < LAYERS * s->n_rows * (int)kvd; i++) {
        s->knew[i] = 2.0f * frand(&seed);
        s->vnew[i] = 2.0f * frand(&seed);
    }
    /* the step's rows through the op, and what they decode to */
    rp_op_step_begin(be, &s->L, s->seqs, 3);
    for (int l = 0; l < LAYERS; l++) {
        rp_op_kv_store(be, l, s->knew + (size_t)l * s->n_rows * kvd,
                       s->vnew + (size_t)l * s->n_rows * kvd, (int)kvd);
        for (int q = 0; q < 3; q++)
            for (int t = 0; t < s->seqs[q].n_tok; t++)
                for (int h = 0; h < KVH; h++) {
                    int p = s->seqs[q].pos0 + t;
                    const float *src = s->knew + ((size_t)l * s->n_rows + s->seqs[q].t0 + t) * kvd + h * HD;
                    unsigned char enc[256];
                    rp_kv_row_store(dt, src, HD, enc);
                    cr_assert_eq(memcmp(enc, rp_kv_row_at(&s->L, s->table[q], l, 0, p, h), row), 0,
                                 "kv_store wrote K row (%d, %d, %d) unlike the codec", q, p, h);
                    rp_kv_row_load(dt, enc, HD, kc(s, q, l) + p * kvd + h * HD);
                    src = s->vnew + ((size_t)l * s->n_rows + s->seqs[q].t0 + t) * kvd + h * HD;
                    rp_kv_row_store(dt, src, HD, enc);
                    rp_kv_row_load(dt, enc, HD, vc(s, q, l) + p * kvd + h * HD);
                }
    }
}

static void scene_free(scene *s)
{
    rp_free_aligned(s->L.base);
    rp_free(s->k);
    rp_free(s->v);
    rp_free(s->q);
    rp_free(s->knew);
    rp_free(s->vnew);
}

static void check_paged(rp_kv_dtype dt)
{
    rp_backend *ref = rp_backend_new(1, 1), *fast1 = rp_backend_new(1, 0),
               *fast2 = rp_backend_new(2, 0);
    cr_assert(ref && fast1 && fast2);
    scene s;
    scene_make(&s, dt, fast1);
    static const float sinks[H] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f, 0.25f, 3.0f, -2.0f, 1.0f};
    size_t n_out = (size_t)s.n_rows * H * HD;
    float *want = rp_alloc(sizeof(float) * n_out), *got = rp_alloc(sizeof(float) * n_out);
    for (int variant = 0; variant < 3; variant++) {
        int window = variant == 1 ? 7 : 0;
        const float *sk = variant == 2 ? sinks : NULL;
        for (int l = 0; l < LAYERS; l++) {
            for (int q = 0; q < 3; q++) { /* the contiguous reference, sequence by sequence */
                rp_attn_args a = {.q = s.q + (size_t)s.seqs[q].t0 * H * HD,
                                  .k = kc(&s, q, l), .v = vc(&s, q, l),
                                  .out = want + (size_t)s.seqs[q].t0 * H * HD,
                                  .n_tok = s.seqs[q].n_tok, .pos0 = s.seqs[q].pos0,
                                  .n_heads = H, .n_kv_heads = KVH, .head_dim = HD,
                                  .scale = 0.25f, .window = window, .sinks = sk};
                rp_op_attention(ref, &a);
            }
            rp_backend *bes[3] = {ref, fast1, fast2};
            for (int bi = 0; bi < 3; bi++) {
                rp_step_attn sa = {.q = s.q, .out = got, .n_heads = H, .n_kv_heads = KVH,
                                   .head_dim = HD, .scale = 0.25f, .window = window,
                                   .sinks = sk};
                memset(got, 0, sizeof(float) * n_out);
                rp_op_step_begin(bes[bi], &s.L, s.seqs, 3);
                rp_op_attention_step(bes[bi], l, &sa);
                for (size_t i = 0; i < n_out; i++) {
                    if (bi == 0)
                        cr_assert_eq(got[i], want[i], "%s ref variant %d layer %d [%zu]: %g vs %g",
                                     rp_kv_dtype_name(dt), variant, l, i, got[i], want[i]);
                    else
                        cr_assert_leq(fabsf(got[i] - want[i]), 1e-5f,
                                      "%s fast(%d) variant %d layer %d [%zu]: %g vs %g",
                                      rp_kv_dtype_name(dt), bi, variant, l, i, got[i], want[i]);
                }
            }
        }
    }
    rp_free(want);
    rp_free(got);
    scene_free(&s);
    rp_backend_free(ref);
    rp_backend_free(fast1);
    rp_backend_free(fast2);
}

Test(paged_attention, f32_equals_contiguous) { check_paged(RP_KV_F32); }
Test(paged_attention, bf16_equals_contiguous_decoded) { check_paged(RP_KV_BF16); }
Test(paged_attention, f16_equals_contiguous_decoded) { check_paged(RP_KV_F16); }
Test(paged_attention, int8_equals_contiguous_decoded) { check_paged(RP_KV_INT8); }
Test(paged_attention, int4_equals_contiguous_decoded) { check_paged(RP_KV_INT4); }

Test(paged_attention, copy_block_copies_every_byte)
{
    rp_backend *be = rp_backend_new(1, 0);
    rp_kv_layout L = {.dtype = RP_KV_INT8, .block_tokens = BT, .n_layers = LAYERS,
                      .n_kv_heads = KVH, .head_dim = HD};
    L.row_bytes = rp_kv_row_bytes(RP_KV_INT8, HD);
    L.half_bytes = L.row_bytes * KVH * BT;
    L.block_bytes = L.half_bytes * 2 * LAYERS;
    L.base = rp_alloc_aligned(L.block_bytes * 4, RP_TAG_KV);
    unsigned char *p = L.base;
    for (size_t i = 0; i < L.block_bytes * 4; i++)
        p[i] = (unsigned char)(i * 31 + 7);
    rp_op_kv_copy_block(be, &L, 3, 1);
    cr_assert_eq(memcmp(p + 3 * L.block_bytes, p + 1 * L.block_bytes, L.block_bytes), 0);
    rp_free_aligned(L.base);
    rp_backend_free(be);
}

Test(kv_rows, avx512_decoder_is_bit_identical)
{
    if (rp_cpu()->isa < RP_ISA_AVX512) {
        cr_skip_test("no AVX-512 on this CPU: the vector row decoder is not checked");
    }
    unsigned seed = 5;
    float x[128], a[128], b[128];
    unsigned char buf[1024];
    for (int dt = 0; dt < RP_KV_DTYPE_COUNT; dt++)
        for (int hd = 16; hd <= 128; hd += 16) {
            if (!rp_kv_row_bytes((rp_kv_dtype)dt, hd))
                continue;
            for (int i = 0; i < hd; i++)
                x[i] = 3.0f * frand(&seed);
            rp_kv_row_store((rp_kv_dtype)dt, x, hd, buf);
            rp_kv_row_load((rp_kv_dtype)dt, buf, hd, a);
            rp_attn_load_row_avx512((rp_kv_dtype)dt, buf, hd, b);
            cr_assert_eq(memcmp(a, b, sizeof(float) * (size_t)hd), 0, "%s head_dim %d",
                         rp_kv_dtype_name((rp_kv_dtype)dt), hd);
        }
}
