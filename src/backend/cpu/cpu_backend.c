/* backend/cpu/cpu_backend.c - the CPU backend: picks kernels for the CPU, runs ops on the pool.
 *
 * Design notes:
 *  1. Matmul hands out work items of 32..256 output rows (multiples of the kernels' tile
 *     heights) from an atomic counter to whichever pool threads run (rp_pool_run_any): each
 *     thread does every token for its rows, so a weight row is read once per call, and a
 *     thread the OS deschedules does not hold the others up. rp_op_matmul_n (q/k/v,
 *     gate/up) is one such job over several matrices sharing one activation packing.
 *  2. Attention shares (token, KV head) pairs out through a counter (rp_pool_run_any); each
 *     thread owns a scores buffer that grows (single-threaded, before the fan-out) to the
 *     longest context seen.
 *  3. RoPE and the small elementwise ops run on the caller thread; a prefill's RMSNorm and
 *     SiLU gate (tokens x dim elements) are split over the pool (per element or row: the same
 *     values on any split).
 *  4. Buffers are plain host memory and weights stay the caller's views (mmap), so the
 *     step ops (embed, bias, KV store, gather) are the loops the recipe used to run itself:
 *     results are bit-identical to the recipe before it became backend-agnostic. The one
 *     exception: on any CPU with AVX2, MLX4/MLX8/Q4_0/Q8_0 matrices also get a
 *     repacked heap copy (kernels_qx86.h's tile layout, made on a matrix's first
 *     matmul, in slabs on 2 MB pages) that matmul reads instead of the view, for every token
 *     count the AMX prefill does not take (the tile decode: VPDPBUSD with AVX-512 VNNI,
 *     kernels_qx86.c, else its AVX2 port, kernels_qx86_avx2.c, with the same results), and
 *     the AMX prefill reads its rows from it too; the view stays for embedding rows, and a
 *     matrix no matmul takes (an untied embedding) is never copied.
 *     RAPID_CPU_QX=1 turns it off where there is AVX-512 VNNI (the row kernels of
 *     kernels_qx86.c on the view), RAPID_CPU_QX=0 everywhere (quant_kernels.inc.h).
 *  5. Quantized weights with an int8 kernel get the activations quantized once per call
 *     (rp_quant_act, on the caller thread, into a buffer the backend keeps) before the fan-out.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "backend/quant.h"
#include "backend/sample.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/cpu.h"
#include "base/status.h"
#include "base/half.h"
#include "base/threadpool.h"
#if defined(__x86_64__)
#include "backend/cpu/x86/kernels_qx86.h"
#endif

/* Below this many tokens a matmul stays on the AVX-512 kernels (AMX pads tokens to 16). */
#define RP_AMX_MIN_TOKENS 8

typedef struct cpu_backend {
    rp_backend base; /* first: the vtable and description */
    rp_pool *pool;
    int n_threads;
    int ref;
    rp_cpu_kernels k;
    float **scratch; /* per thread, scratch_len floats */
    long scratch_len;
    rp_step_seq *seqs; /* the step layout (rp_op_step_begin) */
    int n_seqs, seqs_cap;
    int *row_seq; /* sequence of each activation row of the step */
    int n_rows, rows_cap;
    rp_kv_layout kv; /* the step's KV pool */
    float (*dot)(const float *a, const float *b, int n);           /* attention kernels */
    void (*axpy)(float *y, float a, const float *x, int n);
    void (*load_row)(rp_kv_dtype dt, const void *src, int hd, float *out);
    float (*exp_sum)(float *p, int n, float mx); /* softmax weights: p = e^(p - mx), sum */
    void (*silu)(float *out, const float *gate, const float *up, int64_t n);
    int (*group)(const rp_kv_layout *L, const int32_t *table, int layer, int kvh, int j0, int n,
                 const float *q, int G, float scale, const float *sinks, float *sc,
                 float *out); /* a fused paged_group for some shapes (optional) */
    int (*groups)(const rp_kv_layout *L, const int32_t *table, int layer, int kvh, int nh, int j0,
                  int n, const float *q, int G, float scale, const float *sinks, float *sc,
                  float *out); /* ... for nh adjacent KV heads in one walk (optional) */
    float *x_eo; /* activations in even/odd order (rp_x_even_odd16), x_eo_cap floats */
    long x_eo_cap;
    int8_t *act_q; /* quantized activations (rp_qact), act_cap elements */
    float *act_ds; /* d then s, 2 * act_cap / 32 floats */
    long act_cap;
    int exact;       /* RP_BACKEND_EXACT: f32-exact activations on the AMX bf16 tiles */
    int amx;         /* AMX tiles usable (prefill of bf16 and MLX weights) */
    uint16_t *amx_x; /* packed activations for the tiles */
    size_t amx_cap;
    int qx_dec, qx_amx;  /* kernels_qx86.c: MLX VNNI decode, quantized prefill on AMX-BF16 */
    int qx_pack;         /* repacked weights (first decode use) for the tile decode */
    int copy_16;         /* bf16 / f16 matrices copied into huge pages at their first matmul */
    rp_qx_packed_fn qx_packed; /* the tile decode: AVX-512 VNNI or AVX2 (kernels_qx86*.c) */
    rp_qx_packed_fn qx_packed_pf; /* prompts of RP_QX_AVX2_PREFILL_MIN+ tokens on the same
                                   * tiles (AVX2: 6 tokens a pass, the same bits); else NULL */
    void (*qx_quant)(const float *x, int n_tok, long cols, int run64, int8_t *q, float *d,
                     float *s); /* its activations, vectorised (the same bits either way) */
    int qx_pf_view;      /* RAPID_CPU_QX=2: the AMX prefill reads the view, not the copy */
    uint16_t *qx_x;      /* bf16-packed activations (rp_qx_pack_bf16) */
    size_t qx_cap;
    void **qx_rowbuf;    /* per thread, qx_rowcap bytes: dequantized weight rows */
    size_t qx_rowcap;
    struct qx_pack *packs; /* weights to repack for decode (open addressing, by data) */
    long packs_cap, n_packs;
    void **slabs; /* owned: the packed copies' memory (pack_mem), n_slabs of slabs_cap */
    int n_slabs, slabs_cap;
    char *slab_cur; /* the free rest of the last slab, slab_left bytes */
    size_t slab_left;
    rp_sample_cand **smp; /* per thread, smp_cap candidates: rp_sample_draw's scratch */
    int smp_cap;
} cpu_backend;

/* A weight given to cpu_weight that the tile kernels can take, or a 16-bit matrix (copy_16),
 * found again by its view's data pointer and shape; repacked (rp_qx_repack) or copied on its
 * first matmul, so a table only ever read a row at a time (an untied embedding) is never
 * copied. */
typedef struct qx_pack {
    const void *data; /* the original view's data: the key (NULL: empty slot) */
    rp_tensor w;      /* the view, for the repack or copy */
    void *packed;     /* in a slab (pack_mem): rp_qx_repack_bytes, or the 16-bit rows; NULL:
                       * not made yet */
} qx_pack;

#define CPU(bk) ((cpu_backend *)(bk))

static const rp_backend_vt g_cpu_vt;
static float dot_portable(const float *a, const float *b, int n);
static void axpy_portable(float *y, float a, const float *x, int n);
static float exp_sum_portable(float *p, int n, float mx);
static void silu_portable(float *out, const float *gate, const float *up, int64_t n);

static void cpu_destroy(rp_backend *bk)
{
    cpu_backend *b = CPU(bk);
    if (b->scratch)
        for (int i = 0; i < b->n_threads; i++)
            rp_free_aligned(b->scratch[i]);
    rp_free(b->scratch);
    rp_free(b->seqs);
    rp_free(b->row_seq);
    rp_free_aligned(b->x_eo);
    rp_free_aligned(b->act_q);
    rp_free_aligned(b->act_ds);
    rp_free_aligned(b->amx_x);
    rp_free_aligned(b->qx_x);
    if (b->qx_rowbuf)
        for (int i = 0; i < b->n_threads; i++)
            rp_free_aligned(b->qx_rowbuf[i]);
    rp_free(b->qx_rowbuf);
    if (b->smp)
        for (int i = 0; i < b->n_threads; i++)
            rp_free(b->smp[i]);
    rp_free(b->smp);
    rp_free(b->packs);
    for (int i = 0; i < b->n_slabs; i++)
        rp_free_aligned(b->slabs[i]);
    rp_free(b->slabs);
    rp_pool_free(b->pool);
    rp_free(b);
}

/* k with one ISA file's table laid over it: each kernel the file sets replaces k's together
 * with the activation layout it takes (x_even_odd16 for matmul, act_run64 for qmatmul), so a
 * later file's kernel never inherits an earlier one's layout; what the file leaves NULL stays. */
static void kernels_overlay(rp_cpu_kernels *k, void (*fill)(rp_cpu_kernels *))
{
    rp_cpu_kernels t;
    memset(&t, 0, sizeof t);
    fill(&t);
    if (t.isa)
        k->isa = t.isa;
    if (t.read)
        k->read = t.read;
    for (int dt = 0; dt < RP_DT_COUNT; dt++) {
        if (t.matmul[dt]) {
            k->matmul[dt] = t.matmul[dt];
            k->x_even_odd16[dt] = t.x_even_odd16[dt];
        }
        if (t.qmatmul[dt]) {
            k->qmatmul[dt] = t.qmatmul[dt];
            k->act_run64[dt] = t.act_run64[dt];
        }
    }
}

void rp_cpu_kernels_for(rp_cpu_kernels *k, int isa)
{
    memset(k, 0, sizeof *k);
    kernels_overlay(k, rp_cpu_kernels_scalar);
#if defined(__x86_64__)
    if (isa >= RP_ISA_AVX2)
        kernels_overlay(k, rp_cpu_kernels_avx2);
    if (isa >= RP_ISA_AVX512)
        kernels_overlay(k, rp_cpu_kernels_avx512);
#else
    (void)isa;
#endif
}

rp_backend *rp_backend_new(int n_threads, int ref_kernels)
{
    cpu_backend *b = rp_calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->base.vt = &g_cpu_vt;
    b->base.host_buffers = 1;
    b->pool = rp_pool_new(n_threads);
    if (!b->pool)
        goto fail;
    b->n_threads = rp_pool_size(b->pool);
    b->base.n_threads = b->n_threads;
    b->scratch = rp_calloc((size_t)b->n_threads, sizeof(float *));
    if (!b->scratch)
        goto fail;
    b->ref = ref_kernels == 1;
    b->exact = ref_kernels == RP_BACKEND_EXACT;
    rp_cpu_kernels_for(&b->k, rp_cpu()->isa);
    b->dot = dot_portable;
    b->axpy = axpy_portable;
    b->load_row = rp_kv_row_load;
    b->exp_sum = exp_sum_portable;
    b->silu = silu_portable;
#if defined(__x86_64__)
    if (rp_cpu()->isa >= RP_ISA_AVX2) {
        b->dot = rp_attn_dot_avx2;
        b->axpy = rp_attn_axpy_avx2;
        if (!b->ref && !b->exact) {
            b->exp_sum = rp_attn_exp_sum_avx2;
            b->silu = rp_silu_mul_avx2;
            b->group = rp_attn_group_f32_avx2;
            b->groups = rp_attn_groups_f32_avx2;
        }
    }
    if (rp_cpu()->isa >= RP_ISA_AVX512) {
        b->dot = rp_attn_dot_avx512;
        b->axpy = rp_attn_axpy_avx512;
        b->load_row = rp_attn_load_row_avx512;
        if (!b->ref && !b->exact) {
            b->exp_sum = rp_attn_exp_sum_avx512;
            b->silu = rp_silu_mul_avx512;
            b->group = rp_attn_group_f32_avx512;
            /* not the AVX2 multi-head kernel: its scores' summation order is not this one's,
             * and a row's heads must not depend on how they were grouped into items */
            b->groups = NULL;
        }
    }
    if (rp_cpu()->isa >= RP_ISA_AVX512 && rp_cpu()->has_amx && !b->ref)
        b->amx = rp_amx_enable();
    {
        /* RAPID_CPU_QX=0: the 256/512-bit int8 kernels of kernels_avx2/avx512.c for decode and
         * prefill alike, instead of kernels_qx86.c; RAPID_CPU_QX=1: kernels_qx86.c on the
         * original layout, no repacked weights; RAPID_CPU_QX=2: repacked weights for decode,
         * but the AMX prefill dequantizes from the view (benchmarking knobs) */
        const char *qx = getenv("RAPID_CPU_QX");
        int on = !ref_kernels && !(qx && qx[0] == '0');
        b->qx_dec = on && rp_cpu()->isa >= RP_ISA_AVX512 && rp_cpu()->has_avx512_vnni;
        /* the tile decode on repacked weights: VPDPBUSD where there is AVX-512 VNNI, else
         * the AVX2 port of it (the same results) */
        b->qx_pack = on && rp_cpu()->isa >= RP_ISA_AVX2 && !(b->qx_dec && qx && qx[0] == '1');
        b->qx_packed = b->qx_dec ? rp_qx_packed_decode : rp_qx_packed_decode_avx2;
        b->qx_packed_pf = b->qx_dec ? NULL : rp_qx_packed_prefill_avx2;
        b->qx_quant = b->qx_dec ? rp_qx_quant_act : rp_qx_quant_act_avx2;
        b->qx_amx = on && b->amx && rp_cpu()->has_avx512_bf16;
        b->qx_pf_view = qx && qx[0] == '2';
        /* 16-bit matrices copied out of the file's mapping into huge pages at their first
         * matmul (RAPID_CPU_COPY16=0: read in place; embedding rows always are). The
         * mapping's 4 KB page-cache pages cost a TLB walk (two-level on a VM) every 4 KB and
         * restart the prefetchers at each page: bf16 decode of the 1B shape on AMD Zen 3 ran
         * 7.6-8.3 tok/s in place against 9.2-10.5 copied. */
        const char *cp = getenv("RAPID_CPU_COPY16");
        b->copy_16 = !(cp && cp[0] == '0');
    }
#endif
    snprintf(b->base.desc, sizeof b->base.desc, "cpu %s%s, %d thread%s",
             b->ref ? "reference" : b->k.isa, b->amx ? (b->exact ? "+amx exact" : "+amx") : "",
             b->n_threads,
             b->n_threads == 1 ? "" : "s");
    return &b->base;
fail:
    cpu_destroy(&b->base);
    return NULL;
}

/* ---- memory: plain host buffers, weights stay the caller's views ----------------------- */

/* The KV pool's whole 2 MB extents are advised onto transparent huge pages before anything
 * touches them (a hint: ignored where they are off): decode attention walks one KV head's
 * rows, n_kv_heads rows apart (2 KB on the 1B shape), so on 4 KB pages every other row was a
 * page walk (a 1,600-position Q4_0 decode spent a quarter of its time in attention). */
static void *cpu_buf_alloc(rp_backend *bk, size_t n_bytes, int tag)
{
    (void)bk;
    void *p = rp_alloc_aligned(n_bytes, (rp_alloc_tag)tag);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), e = ((uintptr_t)p + n_bytes) & ~(huge - 1);
    if (p && tag == RP_TAG_KV && e > a)
        madvise((void *)a, e - a, MADV_HUGEPAGE);
#endif
    return p;
}

static void cpu_buf_free(rp_backend *bk, void *p) { rp_free_aligned(p); }

static void cpu_to_host(rp_backend *bk, void *dst, const void *src, size_t n)
{
    if (dst != src)
        memmove(dst, src, n);
}

/* ---- weights repacked for the decode kernels (kernels_qx86.c) ------------------------- *
 * With the qx decode kernels on, cpu_weight records every MLX4/MLX8/Q4_0/Q8_0 matrix they
 * take; its first matmul repacks it (rp_qx_repack, 32- or 16-row tiles, over the pool) into
 * slab memory on 2 MB pages, which decode and the AMX prefill then read; the view keeps
 * pointing at the original (mmap) for embedding rows. Matmul
 * finds the entry by the view's data pointer and shape; a weight given again at the same
 * address (another weight in reused memory, or the same one) is recorded again and repacked
 * on its next use (the old copy's slab space is not reused: only the backend's end frees it).
 * Packing in call order also lays the copies out in the order a forward pass reads them. */

#if defined(__x86_64__)
#define SLAB_HUGE ((size_t)2 << 20)
#define SLAB_MIN ((size_t)64 << 20)

static qx_pack *pack_slot(const cpu_backend *b, const void *data)
{
    size_t h = ((size_t)(uintptr_t)data >> 6) * 0x9e3779b97f4a7c15ull;
    for (long i = (long)(h >> 20) & (b->packs_cap - 1);; i = (i + 1) & (b->packs_cap - 1))
        if (!b->packs[i].data || b->packs[i].data == data)
            return &b->packs[i];
}

/* n bytes (4 KB aligned) for a packed copy: slabs of at least 64 MB, each 2 MB aligned and
 * advised onto transparent huge pages before the repack first touches it (a hint: ignored
 * where they are off), so the stream sees no 4 KB page walks; NULL when out of memory. */
static void *pack_mem(cpu_backend *b, size_t n)
{
    n = (n + 4095) & ~(size_t)4095;
    int shared = n < SLAB_MIN / 2; /* else a slab of its own */
    if (shared && n <= b->slab_left) {
        char *p = b->slab_cur;
        b->slab_cur += n;
        b->slab_left -= n;
        return p;
    }
    size_t sz = shared ? SLAB_MIN : (n + SLAB_HUGE - 1) & ~(SLAB_HUGE - 1);
    if (b->n_slabs == b->slabs_cap) {
        int cap = b->slabs_cap ? 2 * b->slabs_cap : 16;
        void **ns = rp_realloc(b->slabs, sizeof(void *) * (size_t)cap);
        if (!ns)
            return NULL;
        b->slabs = ns;
        b->slabs_cap = cap;
    }
    char *raw = rp_alloc_aligned(sz + SLAB_HUGE, RP_TAG_MODEL);
    if (!raw)
        return NULL;
    b->slabs[b->n_slabs++] = raw;
    char *p = (char *)(((uintptr_t)raw + SLAB_HUGE - 1) & ~(uintptr_t)(SLAB_HUGE - 1));
#ifdef MADV_HUGEPAGE
    madvise(p, sz, MADV_HUGEPAGE);
#endif
    if (shared) { /* the rest serves the next copies */
        b->slab_cur = p + n;
        b->slab_left = sz - n;
    }
    return p;
}

typedef struct repack_job {
    const rp_tensor *w;
    void *out;
    long n_tiles;
} repack_job;

static void repack_part(void *p, int i, int n)
{
    repack_job *j = p;
    long t0, t1;
    rp_pool_split(j->n_tiles, i, n, 1, &t0, &t1);
    rp_qx_repack(j->w, t0, t1, j->out);
}

static int is_16bit(rp_dtype dt) { return dt == RP_DT_BF16 || dt == RP_DT_F16; }

typedef struct copy16_job {
    const rp_tensor *w;
    void *out;
} copy16_job;

static void copy16_part(void *p, int i, int n)
{
    copy16_job *j = p;
    long r0, r1;
    size_t rb = (size_t)j->w->shape[1] * 2;
    rp_pool_split((long)j->w->shape[0], i, n, 1, &r0, &r1);
    memcpy((char *)j->out + (size_t)r0 * rb, (const char *)j->w->data + (size_t)r0 * rb,
           (size_t)(r1 - r0) * rb);
}

/* The packed copy of w (the tile kernels' repack, or for a 16-bit matrix its rows: want16),
 * made on first use; NULL when w was not recorded as that kind (or has another dtype/shape
 * than the entry at its address), or when there is no memory for the copy (the kernels then
 * read the view: slower, the same results). */
static const void *pack_find(cpu_backend *b, const rp_tensor *w, int want16)
{
    if (!b->n_packs || !w->data || is_16bit(w->dtype) != want16)
        return NULL;
    qx_pack *p = pack_slot(b, w->data);
    if (!p->data || p->w.dtype != w->dtype || p->w.shape[0] != w->shape[0] ||
        p->w.shape[1] != w->shape[1] || w->n_dims != 2)
        return NULL;
    if (!p->packed) {
        size_t bytes = want16 ? (size_t)p->w.shape[0] * (size_t)p->w.shape[1] * 2
                              : rp_qx_repack_bytes(&p->w);
        void *out = pack_mem(b, bytes);
        if (!out)
            return NULL;
        if (want16) {
            copy16_job j = {.w = &p->w, .out = out};
            rp_pool_run(b->pool, copy16_part, &j);
        } else {
            repack_job j = {.w = &p->w, .out = out, .n_tiles = rp_qx_repack_tiles(&p->w)};
            rp_pool_run(b->pool, repack_part, &j);
        }
        p->packed = out;
    }
    return p->packed;
}

static rp_status pack_weight(cpu_backend *b, const rp_tensor *w, rp_err *err)
{
    if (2 * (b->n_packs + 1) > b->packs_cap) { /* grow: load factor <= 1/2 */
        long cap = b->packs_cap ? 2 * b->packs_cap : 256;
        qx_pack *old = b->packs, *np = rp_calloc((size_t)cap, sizeof *np);
        if (!np)
            return rp_err_set(err, RP_ERR_NOMEM, "cpu: no memory for the weight table");
        long old_cap = b->packs_cap;
        b->packs = np;
        b->packs_cap = cap;
        for (long i = 0; i < old_cap; i++)
            if (old[i].data)
                *pack_slot(b, old[i].data) = old[i];
        rp_free(old);
    }
    qx_pack *s = pack_slot(b, w->data);
    if (!s->data) /* else the address seen before: this weight replaces that one */
        b->n_packs++;
    *s = (qx_pack){.data = w->data, .w = *w};
    return RP_OK;
}
#endif

static rp_status cpu_weight(rp_backend *bk, const rp_tensor *src, rp_tensor *dst, rp_err *err)
{
    *dst = *src;
#if defined(__x86_64__)
    cpu_backend *b = CPU(bk);
    if (b->qx_pack && src->data && rp_qx_repack_fits(src))
        return pack_weight(b, src, err);
    if (b->copy_16 && src->data && src->n_dims == 2 && is_16bit(src->dtype))
        return pack_weight(b, src, err); /* copied on its first matmul (pack_find) */
#else
    (void)bk;
    (void)err;
#endif
    return RP_OK;
}

/* ---- matmul ---------------------------------------------------------------------------- */

#define MM_MAX 3 /* matrices per fused call (rp_op_matmul_n) */

typedef struct matmul_job {
    int n_w;
    const rp_tensor *ws[MM_MAX];
    float *ys[MM_MAX];
    long chunk;          /* rows per work item, a multiple of 32 */
    long fine, split;    /* the last matrix's rows from split on go in items of fine rows
                          * (0: none), so the threads' last items end closer together */
    long end[MM_MAX];    /* work items before matrix m's end, cumulative */
    _Atomic long next;   /* the next work item to take */
    const float *x;
    const rp_qact *xq;
    int n_tok;
    rp_matmul_kernel kernel;
    rp_qmatmul_kernel qkernel;
    const uint16_t *amx_x; /* set: AMX bf16 path */
    int amx_parts;         /* bf16 numbers per activation in amx_x (1 or 3) */
    const uint16_t *qx_x;     /* set: quantized prefill on AMX-BF16 (kernels_qx86.c) */
    void **qx_rowbuf;
    const void *packed[MM_MAX]; /* set: matrix m's repacked copy (the backend's qx_packed) */
    rp_qx_packed_fn qx_packed;
} matmul_job;

/* rows [r0, r1) of matrix m, on pool thread `thread` */
static void matmul_rows(const matmul_job *j, int m, long r0, long r1, int thread)
{
    const rp_tensor *w = j->ws[m];
    float *y = j->ys[m];
#if defined(__x86_64__)
    if (j->qx_x) { /* AMX prefill, from the packed copy when there is one */
        rp_qx_prefill(w, j->packed[m], r0, r1, j->qx_x, j->n_tok, j->qx_rowbuf[thread], y);
        return;
    }
    if (j->packed[m]) {
        j->qx_packed(w, j->packed[m], r0, r1, j->xq, j->n_tok, y);
        return;
    }
    if (j->amx_x) { /* bf16 in exact mode (three-part activations, kernels_amx.c) */
        long r = rp_amx_matmul_bf16(w, r0, r1, j->amx_x, j->n_tok, j->amx_parts, y);
        if (r < r1)
            j->kernel(w, r, r1, j->x, j->n_tok, y);
        return;
    }
#else
    (void)thread;
#endif
    if (j->qkernel)
        j->qkernel(w, r0, r1, j->xq, j->n_tok, y);
    else
        j->kernel(w, r0, r1, j->x, j->n_tok, y);
}

/* Any thread takes work items (chunk rows of one matrix) until none are left, so threads
 * finish together however the OS schedules them (rp_pool_run_any). */
static void matmul_part(void *p, int i, int n)
{
    matmul_job *j = p;
    long total = j->end[j->n_w - 1];
    for (;;) {
        long c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (c >= total)
            return;
        int m = 0;
        while (c >= j->end[m])
            m++;
        long l = c - (m ? j->end[m - 1] : 0), r0 = l * j->chunk, step = j->chunk;
        if (m == j->n_w - 1 && j->fine && r0 >= j->split) {
            r0 = j->split + (l - j->split / j->chunk) * j->fine;
            step = j->fine;
        }
        long rows = (long)j->ws[m]->shape[0];
        matmul_rows(j, m, r0, r0 + step < rows ? r0 + step : rows, i);
    }
}

void rp_quant_act(const float *x, int n_tok, long cols, int even_odd, int run64, int8_t *q,
                  float *d, float *s)
{
    long nrun = cols / 32, step = run64 ? 2 : 1;
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (long)t * cols;
        for (long k0 = 0; k0 < nrun; k0 += step) {
            float v[64], amax = 0.0f;
            for (long k = k0; k < k0 + step; k++) {
                float sum = 0.0f;
                for (int i = 0; i < 32; i++)
                    sum += xt[32 * k + i];
                s[(long)t * nrun + k] = sum;
                /* the run's elements in kernel order */
                float *vr = v + 32 * (k - k0);
                for (int i = 0; i < 32; i++)
                    vr[i] = even_odd ? xt[64 * (k / 2) + 2 * i + (k % 2)] : xt[32 * k + i];
            }
            for (int i = 0; i < 32 * step; i++)
                amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
            float id = amax > 0 ? 127.0f / amax : 0.0f;
            int8_t *qr = q + (long)t * cols + 32 * k0;
            /* round to nearest even by the 1.5 * 2^23 trick (|v * id| <= 127): vectorises,
             * unlike a call to lrintf */
            for (int i = 0; i < 32 * step; i++)
                qr[i] = (int8_t)(int)((v[i] * id + 12582912.0f) - 12582912.0f);
            d[(long)t * (nrun / step) + k0 / step] = amax / 127.0f;
        }
    }
}

void rp_x_even_odd16(const float *x, int n_tok, long cols, float *out)
{
    long c16 = cols / 16 * 16;
    for (int t = 0; t < n_tok; t++) {
        const float *xt = x + (long)t * cols;
        float *ot = out + (long)t * cols;
        for (long c = 0; c < c16; c += 16)
            for (int i = 0; i < 8; i++) {
                ot[c + i] = xt[c + 2 * i];
                ot[c + 8 + i] = xt[c + 2 * i + 1];
            }
        for (long c = c16; c < cols; c++)
            ot[c] = xt[c];
    }
}

/* The job's matrices and its work items: `chunk` rows each, about 8 per thread over the call,
 * 32..256 rows (a multiple of the AMX 32-row step). Returns the rows of all matrices. */
static long matmul_layout(matmul_job *j, int n, const rp_tensor *const *ws, float *const *ys,
                          int n_threads)
{
    long all_rows = 0;
    j->n_w = n;
    for (int i = 0; i < n; i++) {
        RP_ASSERT(ws[i]->n_dims == 2);
        j->ws[i] = ws[i];
        j->ys[i] = ys[i];
        all_rows += (long)ws[i]->shape[0];
    }
    long chunk = (all_rows / (8L * n_threads) + 31) / 32 * 32;
    j->chunk = chunk < 32 ? 32 : chunk > 256 ? 256 : chunk;
    for (int i = 0; i < n; i++)
        j->end[i] = (i ? j->end[i - 1] : 0) + ((long)ws[i]->shape[0] + j->chunk - 1) / j->chunk;
    /* Guided tail: the last n_threads items' worth of rows of the last matrix in quarter
     * items (whole 32-row steps), so a thread that takes the last item leaves the others
     * waiting a quarter of an item, not a whole one (the spin at a decode matmul's end). */
    long last = (long)ws[n - 1]->shape[0], tail = (long)n_threads * j->chunk;
    j->fine = (j->chunk / 4 + 31) / 32 * 32;
    if (n_threads < 2 || j->fine >= j->chunk || last <= tail) {
        j->fine = 0;
    } else {
        j->split = (last - tail + j->chunk - 1) / j->chunk * j->chunk;
        j->end[n - 1] = (n > 1 ? j->end[n - 2] : 0) + j->split / j->chunk +
                        (last - j->split + j->fine - 1) / j->fine;
    }
    return all_rows;
}

/* x quantized (rp_quant_act; vec: the backend's qx_quant, natural order only) into the
 * backend's activation buffer, grown as needed. */
static void quant_x(cpu_backend *b, const float *x, int n_tok, long cols, int even_odd,
                    int run64, int vec, rp_qact *xq)
{
    long need = (long)n_tok * cols;
    if (need > b->act_cap) {
        rp_free_aligned(b->act_q);
        rp_free_aligned(b->act_ds);
        b->act_q = rp_alloc_aligned((size_t)need, RP_TAG_MODEL);
        b->act_ds = rp_alloc_aligned(sizeof(float) * (size_t)(need / 16 + 16), RP_TAG_MODEL);
        RP_ASSERT(b->act_q && b->act_ds); /* at most a few MB */
        b->act_cap = need;
    }
#if defined(__x86_64__)
    if (vec && b->qx_quant && !even_odd && cols % 64 == 0)
        b->qx_quant(x, n_tok, cols, run64, b->act_q, b->act_ds, b->act_ds + need / 32);
    else
#endif
        rp_quant_act(x, n_tok, cols, even_odd, run64, b->act_q, b->act_ds,
                     b->act_ds + need / 32);
    (void)vec;
    *xq = (rp_qact){.q = b->act_q, .d = b->act_ds, .s = b->act_ds + need / 32, .run64 = run64};
}

/* One pool job for n matrices over the same x (the same dtype, columns and group size: one
 * activation packing serves all; otherwise one call each; work items: matmul_layout). */
static void cpu_matmul_n(rp_backend *bk, int n, const rp_tensor *const *ws, const float *x,
                         int n_tok, float *const *ys)
{
    cpu_backend *b = CPU(bk);
    RP_ASSERT(n >= 1 && n <= MM_MAX);
#if defined(__x86_64__)
    /* 16-bit matrices read from their huge-page copy (made now if this is its first matmul) */
    rp_tensor w16[MM_MAX];
    const rp_tensor *wc[MM_MAX];
    if (b->copy_16 && b->n_packs) {
        for (int i = 0; i < n; i++) {
            const void *c = pack_find(b, ws[i], 1);
            wc[i] = ws[i];
            if (c) {
                w16[i] = *ws[i];
                w16[i].data = c;
                wc[i] = &w16[i];
            }
        }
        ws = wc;
    }
#endif
    const rp_tensor *w = ws[0];
    for (int i = 1; i < n; i++)
        if (ws[i]->dtype != w->dtype || ws[i]->shape[1] != w->shape[1] ||
            ws[i]->group_size != w->group_size) {
            for (int m = 0; m < n; m++)
                cpu_matmul_n(bk, 1, &ws[m], x, n_tok, &ys[m]);
            return;
        }
    RP_ASSERT(w->n_dims == 2 && w->dtype < RP_DT_COUNT);
    rp_matmul_kernel k = b->ref ? rp_ref_matmul : b->k.matmul[w->dtype];
    rp_qmatmul_kernel qk = b->ref ? NULL : b->k.qmatmul[w->dtype];
    if (!k)
        k = rp_ref_matmul;
    long cols = (long)w->shape[1];
    if (qk && !rp_qmatmul_fits(w->dtype, cols))
        qk = NULL;
#if defined(__x86_64__)
    /* quantized prefill: weight rows dequantized to bf16 once per call, all tokens on tiles */
    if (b->qx_amx && rp_qx_prefill_fits(w, n_tok) &&
        (long)w->shape[0] * w->shape[1] * n_tok >= 32768) {
        size_t need = rp_qx_pack_bytes(n_tok, cols), rowb = rp_qx_rowbuf_bytes(cols);
        if (need > b->qx_cap) {
            rp_free_aligned(b->qx_x);
            b->qx_x = rp_alloc_aligned(need, RP_TAG_MODEL);
            RP_ASSERT(b->qx_x); /* n_tok x cols x 2 bytes: a few MB */
            b->qx_cap = need;
        }
        if (!b->qx_rowbuf) {
            b->qx_rowbuf = rp_calloc((size_t)b->n_threads, sizeof(void *));
            RP_ASSERT(b->qx_rowbuf);
        }
        if (rowb > b->qx_rowcap) {
            for (int i = 0; i < b->n_threads; i++) {
                rp_free_aligned(b->qx_rowbuf[i]);
                b->qx_rowbuf[i] = rp_alloc_aligned(rowb, RP_TAG_MODEL);
                RP_ASSERT(b->qx_rowbuf[i]); /* 32 rows of bf16: at most a few MB */
            }
            b->qx_rowcap = rowb;
        }
        rp_qx_pack_bf16(x, n_tok, cols, b->qx_x);
        matmul_job jq = {.x = x, .n_tok = n_tok, .kernel = k, .qx_x = b->qx_x,
                         .qx_rowbuf = b->qx_rowbuf};
        /* a repacked weight's rows come from its copy (made now if this is its first use),
         * so after the repack only embedding lookups read the view's pages */
        for (int i = 0; i < n && !b->qx_pf_view; i++)
            jq.packed[i] = pack_find(b, ws[i], 0);
        matmul_layout(&jq, n, ws, ys, b->n_threads);
        rp_pool_run_any(b->pool, matmul_part, &jq);
        return;
    }
#endif
    rp_qact xq = {0};
#if defined(__x86_64__)
    /* weights repacked at load: the tile kernels, every token count the AMX path left */
    const void *pk[MM_MAX] = {0};
    int n_pk = 0;
    for (int i = 0; i < n; i++)
        n_pk += (pk[i] = pack_find(b, ws[i], 0)) != NULL;
    if (n_pk && n_pk < n) {
        for (int m = 0; m < n; m++)
            cpu_matmul_n(bk, 1, &ws[m], x, n_tok, &ys[m]);
        return;
    }
    if (n_pk) {
        quant_x(b, x, n_tok, cols, 0, rp_qx_repack_run64(w->dtype), 1, &xq);
        matmul_job jp = {.x = x, .xq = &xq, .n_tok = n_tok, .kernel = k,
                         .qx_packed = b->qx_packed_pf && n_tok >= RP_QX_AVX2_PREFILL_MIN
                                          ? b->qx_packed_pf
                                          : b->qx_packed};
        memcpy(jp.packed, pk, sizeof pk);
        long rows_all = matmul_layout(&jp, n, ws, ys, b->n_threads);
        if (rows_all * cols * n_tok < 32768)
            matmul_part(&jp, 0, 1);
        else
            rp_pool_run_any(b->pool, matmul_part, &jp);
        return;
    }
#endif
    if (qk) {
        int run64 = b->k.act_run64[w->dtype] && w->group_size >= 64 && cols % 64 == 0;
        quant_x(b, x, n_tok, cols, rp_quant_act_even_odd(w->dtype), run64, 0, &xq);
#if defined(__x86_64__)
        if (b->qx_dec && rp_qx_decode_fits(w, &xq))
            qk = rp_qx_mlx_decode;
        else if (b->qx_dec && w->dtype == RP_DT_Q4_0 && rp_qx_gguf_decode_fits(w, &xq))
            qk = rp_qx_gguf_decode;
#endif
    }
    if (!b->ref && !qk && b->k.x_even_odd16[w->dtype]) { /* the kernel's activation order */
        long need = (long)n_tok * cols;
        if (need > b->x_eo_cap) {
            rp_free_aligned(b->x_eo);
            b->x_eo = rp_alloc_aligned(sizeof(float) * (size_t)need, RP_TAG_MODEL);
            RP_ASSERT(b->x_eo); /* n_tok x cols floats: a few MB */
            b->x_eo_cap = need;
        }
        rp_x_even_odd16(x, n_tok, cols, b->x_eo);
        x = b->x_eo;
    }
    matmul_job j = {.x = x, .xq = &xq, .n_tok = n_tok, .kernel = k, .qkernel = qk};
    long all_rows = matmul_layout(&j, n, ws, ys, b->n_threads);
#if defined(__x86_64__)
    /* prefill of bf16 weights on AMX tiles: activations rounded to bf16, or split into three
     * bf16 parts in exact mode (see kernels_amx.c) */
    if (b->amx && !b->ref && w->dtype == RP_DT_BF16 && n_tok >= RP_AMX_MIN_TOKENS &&
        cols % 32 == 0 && w->shape[0] >= 16) {
        j.amx_parts = b->exact ? 3 : 1;
        size_t need = rp_amx_packed_bytes(n_tok, cols, j.amx_parts);
        if (need > b->amx_cap) {
            rp_free_aligned(b->amx_x);
            b->amx_x = rp_alloc_aligned(need, RP_TAG_MODEL);
            RP_ASSERT(b->amx_x); /* n_tok x cols x 2 bytes: a few MB */
            b->amx_cap = need;
        }
        rp_amx_pack_bf16(x, n_tok, cols, j.amx_parts, b->amx_x);
        j.amx_x = b->amx_x;
    }
#endif
    /* tiny matrices are not worth waking the pool */
    if (all_rows * w->shape[1] * n_tok < 32768)
        matmul_part(&j, 0, 1);
    else
        rp_pool_run_any(b->pool, matmul_part, &j);
}

static void cpu_matmul(rp_backend *bk, const rp_tensor *w, const float *x, int n_tok, float *y)
{
    cpu_matmul_n(bk, 1, &w, x, n_tok, &y);
}

/* ---- bandwidth probe ------------------------------------------------------------------- */

typedef struct read_job {
    const char *buf;
    size_t n;
    rp_read_kernel read;
    _Atomic long next; /* the next 256 KB piece to read */
    _Atomic uint64_t sink;
} read_job;

#define READ_PIECE ((size_t)256 << 10)

/* Pieces from a counter, like the matmul work items, so the probe and the kernels it is
 * compared with see the same scheduling (a descheduled thread holds neither up). */
static void read_part(void *p, int i, int n)
{
    read_job *j = p;
    uint64_t acc = 0;
    for (;;) {
        size_t k = (size_t)atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (k * READ_PIECE >= j->n)
            break;
        size_t len = j->n - k * READ_PIECE < READ_PIECE ? j->n - k * READ_PIECE : READ_PIECE;
        acc ^= j->read(j->buf + k * READ_PIECE, len);
    }
    atomic_fetch_xor(&j->sink, acc);
}

static double cpu_read_bandwidth(rp_backend *bk, size_t n_bytes, int reps)
{
    cpu_backend *b = CPU(bk);
    n_bytes &= ~(size_t)4095;
    /* in huge pages where the kernel has them, as the weights are (pack_mem): the best
     * streaming read the machine gives, not one slowed by 4 KB pages' TLB walks */
    char *raw = rp_alloc_aligned(n_bytes + SLAB_HUGE, RP_TAG_MISC);
    if (!raw)
        return 0.0;
    char *buf = (char *)(((uintptr_t)raw + SLAB_HUGE - 1) & ~(uintptr_t)(SLAB_HUGE - 1));
#ifdef MADV_HUGEPAGE
    if (!getenv("RAPID_PROBE_4K"))
        madvise(buf, n_bytes, MADV_HUGEPAGE);
#endif
    memset(buf, 1, n_bytes); /* commit the pages before timing */
    read_job j = {.buf = buf, .n = n_bytes, .read = b->k.read};
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        atomic_store(&j.next, 0);
        int64_t t0 = rp_now_ns();
        rp_pool_run_any(b->pool, read_part, &j);
        double s = (double)(rp_now_ns() - t0) * 1e-9;
        if (s > 0 && (double)n_bytes / s / 1e9 > best)
            best = (double)n_bytes / s / 1e9;
    }
    rp_free_aligned(raw);
    return best;
}

/* ---- draws (rp_op_sample_rows): rows shared out through a counter ----------------------- */

typedef struct sample_job {
    const float *x;
    int n, n_rows;
    const rp_sample_row *p;
    int32_t *out;
    rp_sample_cand **scratch;
    _Atomic int next;
} sample_job;

static void sample_part(void *ctx, int i, int n_threads)
{
    sample_job *j = ctx;
    (void)n_threads;
    for (int r; (r = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_rows;)
        j->out[r] = rp_sample_draw(j->x + (size_t)r * (size_t)j->n, j->n, &j->p[r], j->scratch[i]);
}

static void cpu_sample_rows(rp_backend *bk, const float *x, int n_rows, int n,
                            const struct rp_sample_row *p, int32_t *out)
{
    cpu_backend *b = CPU(bk);
    if (n > b->smp_cap) {
        if (!b->smp) {
            b->smp = rp_calloc((size_t)b->n_threads, sizeof *b->smp);
            RP_ASSERT(b->smp);
        }
        for (int i = 0; i < b->n_threads; i++) {
            rp_free(b->smp[i]);
            b->smp[i] = rp_alloc(sizeof(rp_sample_cand) * (size_t)n);
            RP_ASSERT(b->smp[i]); /* a vocabulary of 8-byte candidates: about a MB */
        }
        b->smp_cap = n;
    }
    sample_job j = {.x = x, .n = n, .n_rows = n_rows, .p = p, .out = out, .scratch = b->smp};
    if (n_rows == 1)
        sample_part(&j, 0, 1);
    else
        rp_pool_run_any(b->pool, sample_part, &j);
}

/* ---- tensors to f32 -------------------------------------------------------------------- */

static void to_f32(rp_dtype dt, const void *src, float *out, int64_t n)
{
    switch (dt) {
    case RP_DT_F32: memcpy(out, src, (size_t)n * 4); return;
    case RP_DT_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = rp_f16_to_f32(rp_load_u16(src, (size_t)i));
        return;
    case RP_DT_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = rp_bf16_to_f32(rp_load_u16(src, (size_t)i));
        return;
    case RP_DT_MXFP4:
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *blk = (const uint8_t *)src + (i / 32) * 17;
            uint8_t q = blk[1 + (i % 32) / 2];
            out[i] = ldexpf(rp_fp4_values[i % 2 ? q >> 4 : q & 15], (int)blk[0] - 127);
        }
        return;
    default: RP_ASSERT(!"dtype has no f32 conversion");
    }
}

void rp_tensor_to_f32(const rp_tensor *t, float *out, int64_t n) { to_f32(t->dtype, t->data, out, n); }

void rp_tensor_row_f32(const rp_tensor *t, int64_t row, float *out)
{
    RP_ASSERT(t->n_dims == 2 && row >= 0 && row < t->shape[0]);
    if (rp_dtype_is_quant(t->dtype)) {
        rp_quant_dequant_row(t, row, out);
        return;
    }
    size_t rb = rp_dtype_row_bytes(t->dtype, t->shape[1]);
    to_f32(t->dtype, (const char *)t->data + (size_t)row * rb, out, t->shape[1]);
}

/* ---- norms, rope, elementwise ---------------------------------------------------------- */

typedef struct norm_job {
    float *out;
    const float *x, *wf;
    int n_tok, dim, add_one;
    float eps;
} norm_job;

/* Tokens split over the pool: each row's arithmetic is the same on any thread. */
static void norm_part(void *p, int i, int n)
{
    norm_job *j = p;
    long lo, hi;
    int dim = j->dim;
    const float *wf = j->wf;
    rp_pool_split(j->n_tok, i, n, 1, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        const float *xt = j->x + t * dim;
        float *ot = j->out + t * dim;
        float ss = 0.0f;
        for (int k = 0; k < dim; k++)
            ss += xt[k] * xt[k];
        float inv = 1.0f / sqrtf(ss / (float)dim + j->eps);
        if (!wf)
            for (int k = 0; k < dim; k++)
                ot[k] = xt[k] * inv;
        else if (j->add_one)
            for (int k = 0; k < dim; k++)
                ot[k] = xt[k] * inv * (1.0f + wf[k]);
        else
            for (int k = 0; k < dim; k++)
                ot[k] = xt[k] * inv * wf[k];
    }
}

static void cpu_rmsnorm(rp_backend *bk, float *out, const float *x, const rp_tensor *w,
                        int n_tok, int dim, float eps, int add_one)
{
    cpu_backend *b = CPU(bk);
    float wbuf[16384];
    RP_ASSERT(dim <= 16384);
    const float *wf = NULL;
    if (w) {
        if (w->dtype == RP_DT_F32 && (uintptr_t)w->data % 4 == 0) {
            wf = w->data;
        } else {
            rp_tensor_to_f32(w, wbuf, dim);
            wf = wbuf;
        }
    }
    if (b->ref) {
        rp_ref_rmsnorm(out, x, wf, n_tok, dim, eps, add_one);
        return;
    }
    norm_job j = {.out = out, .x = x, .wf = wf, .n_tok = n_tok, .dim = dim, .eps = eps,
                  .add_one = add_one};
    if ((long)n_tok * dim < 65536) /* a decode step's rows stay on the caller */
        norm_part(&j, 0, 1);
    else
        rp_pool_run(b->pool, norm_part, &j);
}

static void cpu_rope(rp_backend *bk, float *x, int n_tok, int n_heads, int head_dim, int rot_dim,
                     const int32_t *pos, const float *inv_freq, float attn_factor, int neox)
{
    cpu_backend *b = CPU(bk);
    if (b->ref) {
        rp_ref_rope(x, n_tok, n_heads, head_dim, rot_dim, pos, inv_freq, attn_factor, neox);
        return;
    }
    int half = rot_dim / 2;
    float cs[512], sn[512];
    RP_ASSERT(half <= 512);
    for (int t = 0; t < n_tok; t++) {
        for (int i = 0; i < half; i++) { /* once per token, shared by all heads */
            float ang = (float)pos[t] * inv_freq[i]; /* f32, as transformers computes it */
            cs[i] = cosf(ang) * attn_factor;
            sn[i] = sinf(ang) * attn_factor;
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((long)t * n_heads + h) * head_dim;
            if (neox) {
                for (int i = 0; i < half; i++) {
                    float a = v[i], c = v[i + half];
                    v[i] = a * cs[i] - c * sn[i];
                    v[i + half] = c * cs[i] + a * sn[i];
                }
            } else {
                for (int i = 0; i < half; i++) {
                    float a = v[2 * i], c = v[2 * i + 1];
                    v[2 * i] = a * cs[i] - c * sn[i];
                    v[2 * i + 1] = c * cs[i] + a * sn[i];
                }
            }
        }
    }
}

static void silu_portable(float *out, const float *gate, const float *up, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

typedef struct silu_job {
    cpu_backend *b;
    float *out;
    const float *gate, *up;
    int64_t n;
} silu_job;

static void silu_part(void *p, int i, int n)
{
    silu_job *j = p;
    long lo, hi;
    rp_pool_split((long)j->n, i, n, 16, &lo, &hi);
    j->b->silu(j->out + lo, j->gate + lo, j->up + lo, hi - lo);
}

/* Element-wise, so any split gives the same values; a prefill's (tokens x ffn) is split
 * over the pool, a decode step's stays on the caller. */
static void cpu_silu_mul(rp_backend *bk, float *out, const float *gate, const float *up,
                         int64_t n)
{
    cpu_backend *b = CPU(bk);
    silu_job j = {.b = b, .out = out, .gate = gate, .up = up, .n = n};
    if (n < 65536)
        silu_part(&j, 0, 1);
    else
        rp_pool_run(b->pool, silu_part, &j);
}

static void cpu_add(rp_backend *b, float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* ---- gated delta rule ------------------------------------------------------------------ */

/* One value head, all tokens: the same math as the reference with the state walked row by
 * row in contiguous (vectorisable) loops, decay folded into the first pass. */
static void gated_delta_head(const rp_delta_args *a, int h)
{
    int dk = a->dk, dv = a->dv, kh = h / (a->n_v_heads / a->n_k_heads);
    float *S = a->state + (size_t)h * dk * dv;
    float mem[1024];
    RP_ASSERT(dv <= 1024);
    for (int t = 0; t < a->n_tok; t++) {
        const float *q = a->q + t * a->q_stride + kh * dk, *k = a->k + t * a->k_stride + kh * dk;
        const float *v = a->v + t * a->v_stride + h * dv;
        float *o = a->out + t * a->out_stride + h * dv;
        float decay = expf(a->g[(long)t * a->n_v_heads + h]);
        float beta = a->beta[(long)t * a->n_v_heads + h];
        for (int j = 0; j < dv; j++)
            mem[j] = 0.0f;
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv, ki = k[i];
            for (int j = 0; j < dv; j++) {
                row[j] *= decay;
                mem[j] += row[j] * ki;
            }
        }
        for (int j = 0; j < dv; j++) {
            mem[j] = beta * (v[j] - mem[j]);
            o[j] = 0.0f;
        }
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv, ki = k[i], qi = q[i];
            for (int j = 0; j < dv; j++) {
                row[j] += ki * mem[j];
                o[j] += row[j] * qi;
            }
        }
    }
}

typedef struct delta_job {
    const rp_delta_args *a;
    int ref;
} delta_job;

static void delta_part(void *p, int i, int n)
{
    delta_job *j = p;
    long b, e;
    rp_pool_split(j->a->n_v_heads, i, n, 1, &b, &e);
    for (long h = b; h < e; h++) {
        if (j->ref)
            rp_ref_gated_delta_head(j->a, (int)h);
        else
            gated_delta_head(j->a, (int)h);
    }
}

void rp_op_gated_delta(rp_backend *b, const rp_delta_args *a)
{
    RP_ASSERT(a->n_k_heads > 0 && a->n_v_heads % a->n_k_heads == 0);
    delta_job j = {.a = a, .ref = CPU(b)->ref};
    if ((long)a->n_tok * a->n_v_heads * a->dk * a->dv < 65536)
        delta_part(&j, 0, 1);
    else
        rp_pool_run(CPU(b)->pool, delta_part, &j);
}

/* ---- attention ------------------------------------------------------------------------- */

/* rp_op_attention, over a contiguous cache: the plain-C reference loops, fanned out over the
 * pool. The models attend through the paged step op below; this one is the oracle tests
 * compare it with, so it stays the reference on every CPU backend. */
typedef struct attn_job {
    const rp_attn_args *a;
    float **scratch;
} attn_job;

static void attn_part(void *p, int i, int n)
{
    attn_job *j = p;
    long n_pairs = (long)j->a->n_tok * j->a->n_heads, b, e;
    rp_pool_split(n_pairs, i, n, 1, &b, &e);
    for (long k = b; k < e; k++) {
        int t = (int)(k / j->a->n_heads), h = (int)(k % j->a->n_heads);
        rp_ref_attention_head(j->a, t, h, j->scratch[i]);
    }
}

static void cpu_attention(rp_backend *bk, const rp_attn_args *a)
{
    cpu_backend *b = CPU(bk);
    RP_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0);
    long need = (long)a->pos0 + a->n_tok + 16;
    if (need > b->scratch_len) {
        long len = need * 2 > 4096 ? need * 2 : 4096;
        for (int i = 0; i < b->n_threads; i++) {
            rp_free_aligned(b->scratch[i]);
            b->scratch[i] = rp_alloc_aligned((size_t)len * sizeof(float), RP_TAG_MODEL);
            RP_ASSERT(b->scratch[i]); /* a few KB per thread; failing here means the host is gone */
        }
        b->scratch_len = len;
    }
    attn_job j = {.a = a, .scratch = b->scratch};
    if ((long)a->n_tok * a->n_heads * (a->pos0 + a->n_tok) < 4096)
        attn_part(&j, 0, 1);
    else
        rp_pool_run(b->pool, attn_part, &j);
}

/* ---- the recipe's step ops ------------------------------------------------------------- */

/* Portable attention kernels: 8 independent partial sums, combined in a fixed order. */
static float dot_portable(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            acc[u] += a[i + u] * b[i + u];
    for (; i < n; i++)
        acc[0] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

static void axpy_portable(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

static float exp_sum_portable(float *p, int n, float mx)
{
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        p[j] = expf(p[j] - mx);
        sum += p[j];
    }
    return sum;
}

static void cpu_add_bias(rp_backend *b, float *y, const rp_tensor *bias, int n_tok, int dim)
{
    float tmp[16384];
    RP_ASSERT(dim <= 16384);
    rp_tensor_to_f32(bias, tmp, dim);
    for (int t = 0; t < n_tok; t++)
        for (int i = 0; i < dim; i++)
            y[(long)t * dim + i] += tmp[i];
}

static void cpu_gelu_mul(rp_backend *b, float *out, const float *gate, const float *up,
                         int64_t n)
{
    (void)b;
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int64_t i = 0; i < n; i++) {
        float x = gate[i];
        out[i] = 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x))) * up[i];
    }
}

static void cpu_swiglu_clamp(rp_backend *b, float *out, const float *gate, const float *up,
                             int64_t n, float limit, float alpha)
{
    (void)b;
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i] < limit ? gate[i] : limit;
        float u = up[i] < -limit ? -limit : up[i] > limit ? limit : up[i];
        out[i] = (u + 1.0f) * g * (1.0f / (1.0f + expf(-alpha * g)));
    }
}

static void cpu_scale(rp_backend *b, float *x, float s, int64_t n)
{
    (void)b;
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

static void cpu_embed(rp_backend *b, const rp_tensor *table, const int32_t *ids, int n, float *x)
{
    for (int t = 0; t < n; t++)
        rp_tensor_row_f32(table, ids[t], x + (size_t)t * table->shape[1]);
}

static void cpu_gather_rows(rp_backend *b, float *dst, const float *src, const int32_t *rows,
                            int n, int dim)
{
    for (int i = 0; i < n; i++)
        if (dst + (size_t)i * dim != src + (size_t)rows[i] * dim)
            memmove(dst + (size_t)i * dim, src + (size_t)rows[i] * dim, sizeof(float) * dim);
}

static void cpu_scatter_add(rp_backend *b, float *y, const float *x, const int32_t *rows,
                            const float *w, int n, int dim)
{
    (void)b;
    for (int i = 0; i < n; i++) {
        float *dst = y + (size_t)rows[i] * dim;
        const float *src = x + (size_t)i * dim;
        for (int d = 0; d < dim; d++)
            dst[d] += w[i] * src[d];
    }
}

static void cpu_step_begin(rp_backend *bk, const rp_kv_layout *kv, const rp_step_seq *seqs,
                           int n_seqs)
{
    cpu_backend *b = CPU(bk);
    int n_rows = 0;
    for (int s = 0; s < n_seqs; s++)
        n_rows = seqs[s].t0 + seqs[s].n_tok > n_rows ? seqs[s].t0 + seqs[s].n_tok : n_rows;
    if (n_seqs > b->seqs_cap || n_rows > b->rows_cap) {
        int cap = n_seqs > n_rows ? n_seqs : n_rows;
        cap = cap < 256 ? 256 : cap; /* RP_MAX_CHUNK rows: allocated once in practice */
        rp_step_seq *p = rp_realloc(b->seqs, sizeof *p * (size_t)cap);
        RP_ASSERT(p); /* a few KB; failing here means the host is gone */
        b->seqs = p;
        int *r = rp_realloc(b->row_seq, sizeof *r * (size_t)cap);
        RP_ASSERT(r);
        b->row_seq = r;
        b->seqs_cap = b->rows_cap = cap;
    }
    memcpy(b->seqs, seqs, sizeof *seqs * (size_t)n_seqs);
    b->n_seqs = n_seqs;
    b->n_rows = n_rows;
    for (int s = 0; s < n_seqs; s++)
        for (int i = 0; i < seqs[s].n_tok; i++)
            b->row_seq[seqs[s].t0 + i] = s;
    b->kv = *kv;
}

static void cpu_kv_store(rp_backend *bk, int layer, const float *k, const float *v, int kv_dim)
{
    cpu_backend *b = CPU(bk);
    const rp_kv_layout *L = &b->kv;
    RP_ASSERT(kv_dim == L->n_kv_heads * L->head_dim && layer < L->n_layers);
    for (int s = 0; s < b->n_seqs; s++) {
        const rp_step_seq *q = &b->seqs[s];
        for (int i = 0; i < q->n_tok; i++) {
            size_t row = (size_t)(q->t0 + i) * kv_dim;
            for (int h = 0; h < L->n_kv_heads; h++) {
                size_t off = row + (size_t)h * L->head_dim;
                rp_kv_row_store(L->dtype, k + off, L->head_dim,
                                rp_kv_row_at(L, q->blocks, layer, 0, q->pos0 + i, h));
                rp_kv_row_store(L->dtype, v + off, L->head_dim,
                                rp_kv_row_at(L, q->blocks, layer, 1, q->pos0 + i, h));
            }
        }
    }
}

/* A row in f32: the stored row itself for F32, else decoded into buf. */
static const float *row_f32(const cpu_backend *b, const rp_kv_layout *L, const void *src,
                            float *buf)
{
    if (L->dtype == RP_KV_F32)
        return src;
    b->load_row(L->dtype, src, L->head_dim, buf);
    return buf;
}

typedef struct pattn_job {
    cpu_backend *b;
    int layer;
    const rp_step_attn *a;
    int nh;            /* KV heads an item (adjacent ones: one walk over their rows) */
    _Atomic long next; /* the next (row, nh KV heads) item to take */
} pattn_job;

/* The keys row r of the step attends to: positions [*j0, *j0 + return) of its sequence (all
 * up to its own, or the last `window` of them). */
static int row_keys(const cpu_backend *b, const rp_step_attn *a, int r, int *j0)
{
    const rp_step_seq *sq = &b->seqs[b->row_seq[r]];
    int pos = sq->pos0 + (r - sq->t0);
    *j0 = a->window > 0 && pos - a->window + 1 > 0 ? pos - a->window + 1 : 0;
    return pos + 1 - *j0;
}

/* One (row of the step, KV head): the G = n_heads / n_kv_heads query heads that share the KV
 * head, so each key and value row is read (and decoded) once for all of them. Per query head
 * the arithmetic is fixed (two-pass softmax, keys in order), whatever else is in the step:
 * results are batch-invariant. scratch: G * (pos + 1) scores, G * head_dim sums, two rows. */
static void paged_group(cpu_backend *b, int layer, const rp_step_attn *a, int r, int kvh,
                        float *scratch)
{
    const rp_kv_layout *L = &b->kv;
    const rp_step_seq *sq = &b->seqs[b->row_seq[r]];
    int G = a->n_heads / a->n_kv_heads, d = a->head_dim, j0, n = row_keys(b, a, r, &j0);
    const float *q = a->q + ((size_t)r * a->n_heads + (size_t)kvh * G) * d;
    float *sc = scratch, *acc = sc + (size_t)G * n, *kbuf = acc + (size_t)G * d, *vbuf = kbuf + d;
    if (b->group && b->group(L, sq->blocks, layer, kvh, j0, n, q, G, a->scale,
                             a->sinks ? a->sinks + kvh * G : NULL, sc,
                             a->out + ((size_t)r * a->n_heads + (size_t)kvh * G) * d))
        return;
    for (int j = 0; j < n; j++) {
        const float *k = row_f32(b, L, rp_kv_row_at(L, sq->blocks, layer, 0, j0 + j, kvh), kbuf);
        for (int g = 0; g < G; g++)
            sc[(size_t)g * n + j] = b->dot(q + (size_t)g * d, k, d) * a->scale;
    }
    float inv[64];
    RP_ASSERT(G <= 64);
    for (int g = 0; g < G; g++) {
        float *p = sc + (size_t)g * n, mx = -INFINITY;
        for (int j = 0; j < n; j++)
            mx = p[j] > mx ? p[j] : mx;
        float sink = a->sinks ? a->sinks[kvh * G + g] : -INFINITY;
        mx = sink > mx ? sink : mx;
        float sum = (a->sinks ? expf(sink - mx) : 0.0f) + b->exp_sum(p, n, mx);
        inv[g] = 1.0f / sum;
    }
    memset(acc, 0, sizeof(float) * (size_t)G * d);
    for (int j = 0; j < n; j++) {
        const float *v = row_f32(b, L, rp_kv_row_at(L, sq->blocks, layer, 1, j0 + j, kvh), vbuf);
        for (int g = 0; g < G; g++)
            b->axpy(acc + (size_t)g * d, sc[(size_t)g * n + j], v, d);
    }
    for (int g = 0; g < G; g++) {
        float *o = a->out + ((size_t)r * a->n_heads + (size_t)kvh * G + g) * d;
        for (int i = 0; i < d; i++)
            o[i] = acc[(size_t)g * d + i] * inv[g];
    }
}

/* nh adjacent KV heads from kvh of row r: in one walk where the backend has the kernel
 * (the rows of adjacent heads lie together in the pool), else head by head; each query
 * head's arithmetic is paged_group's either way. */
static void paged_groups(cpu_backend *b, int layer, const rp_step_attn *a, int r, int kvh, int nh,
                         float *scratch)
{
    if (nh > 1) {
        const rp_step_seq *sq = &b->seqs[b->row_seq[r]];
        int G = a->n_heads / a->n_kv_heads, d = a->head_dim, j0, n = row_keys(b, a, r, &j0);
        size_t h0 = (size_t)r * a->n_heads + (size_t)kvh * G;
        if (b->groups(&b->kv, sq->blocks, layer, kvh, nh, j0, n, a->q + h0 * d, G,
                      a->scale, a->sinks ? a->sinks + kvh * G : NULL, scratch, a->out + h0 * d))
            return;
    }
    for (int k = 0; k < nh; k++)
        paged_group(b, layer, a, r, kvh + k, scratch);
}

/* KV heads per attention item: all of a row's where the rows alone give every thread an item
 * (prefill), else the fewest items that still do (one decode row, 2 threads, 8 KV heads: 4
 * heads an item, each walking 1 KB a position, not 256 bytes every 2 KB); 1 without the
 * multi-head kernel. An item's scores (nh G per position) stay within 16 MB a thread. */
static int attn_heads_per_item(const cpu_backend *b, const rp_step_attn *a, int max_pos)
{
    int nkv = a->n_kv_heads, G = a->n_heads / a->n_kv_heads;
    if (!b->groups || b->ref || b->kv.dtype != RP_KV_F32 || a->head_dim != 64)
        return 1;
    for (int nh = nkv; nh > 1; nh--)
        if (nkv % nh == 0 && nh * G <= 256 && (long)nh * G * (max_pos + 1) <= (4L << 20) &&
            (long)b->n_rows * (nkv / nh) >= b->n_threads)
            return nh;
    return 1;
}

static void pattn_part(void *p, int i, int n)
{
    pattn_job *j = p;
    cpu_backend *b = j->b;
    const rp_step_attn *a = j->a;
    float *scratch = b->scratch[i];
    int G = a->n_heads / a->n_kv_heads;
    (void)n;
    const int per_row = a->n_kv_heads / j->nh;
    const long n_items = (long)b->n_rows * per_row;
    for (long k; (k = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < n_items;) {
        int r = (int)(k / per_row), kvh = (int)(k % per_row) * j->nh;
        if (!b->ref) {
            paged_groups(b, j->layer, a, r, kvh, j->nh, scratch);
            continue;
        }
        const rp_step_seq *sq = &b->seqs[b->row_seq[r]];
        for (int g = 0; g < G; g++)
            rp_ref_attention_paged_head(&b->kv, sq, j->layer, a, r - sq->t0, kvh * G + g,
                                        scratch, scratch + b->scratch_len - a->head_dim);
    }
}

static void cpu_attention_step(rp_backend *bk, int layer, const rp_step_attn *a)
{
    cpu_backend *b = CPU(bk);
    RP_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0 && layer < b->kv.n_layers &&
              a->n_kv_heads == b->kv.n_kv_heads && a->head_dim == b->kv.head_dim);
    int max_pos = 0;
    long work = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int last = b->seqs[s].pos0 + b->seqs[s].n_tok;
        max_pos = last > max_pos ? last : max_pos;
        work += (long)b->seqs[s].n_tok * last;
    }
    int G = a->n_heads / a->n_kv_heads, nh = attn_heads_per_item(b, a, max_pos);
    long need = (long)nh * G * (max_pos + 1) + (long)(G + 2) * a->head_dim + 64;
    if (need > b->scratch_len) {
        long len = need * 2 > 4096 ? need * 2 : 4096;
        for (int i = 0; i < b->n_threads; i++) {
            rp_free_aligned(b->scratch[i]);
            b->scratch[i] = rp_alloc_aligned((size_t)len * sizeof(float), RP_TAG_MODEL);
            RP_ASSERT(b->scratch[i]); /* a few KB per thread; failing here means the host is gone */
        }
        b->scratch_len = len;
    }
    pattn_job j = {.b = b, .layer = layer, .a = a, .nh = nh};
    if (work * a->n_heads < 4096)
        pattn_part(&j, 0, 1);
    else /* items from a counter: a descheduled thread holds no share back */
        rp_pool_run_any(b->pool, pattn_part, &j);
}

static const rp_backend_vt g_cpu_vt = {
    .destroy = cpu_destroy,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = cpu_buf_free,
    .to_host = cpu_to_host,
    .from_host = cpu_to_host, /* host memory both ways: a copy */
    .weight = cpu_weight,
    .read_bandwidth = cpu_read_bandwidth,
    .sample_rows = cpu_sample_rows,
    .matmul = cpu_matmul,
    .matmul_n = cpu_matmul_n,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .add_bias = cpu_add_bias,
    .embed = cpu_embed,
    .gather_rows = cpu_gather_rows,
    .step_begin = cpu_step_begin,
    .kv_store = cpu_kv_store,
    .attention_step = cpu_attention_step,
    .gelu_mul = cpu_gelu_mul,
    .swiglu_clamp = cpu_swiglu_clamp,
    .scale = cpu_scale,
    .scatter_add = cpu_scatter_add,
};
