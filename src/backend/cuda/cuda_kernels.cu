/* backend/cuda/cuda_kernels.cu - kernels and launchers of the CUDA backend (CUDA C++).
 *
 * Design notes:
 *  1. Decode matmul. One token of 16-bit weights (cols a multiple of 8, <= 32768):
 *     mv1_kernel, a persistent grid with as many rows for every warp, two chunks of 16-byte
 *     streaming loads in flight per warp, x built in shared memory by every block; a held
 *     rmsnorm or silu_mul whose output is x is computed in that prologue, and a residual add
 *     of y right after it in the epilogue (note 5; RAPID_CUDA_MV1=0: none of it, the kernel
 *     below). Otherwise (n_tok <= 4): one warp per weight row, 16-byte streaming loads, 16
 *     loads in flight per lane, every token of the batch served by the same weight read;
 *     x (f32) comes through the read-only cache. Opt-in for one token of 16-bit weights
 *     (RAPID_CUDA_MVB=1..4 blocks per SM): a streaming kernel (matvec_bulk_kernel: a
 *     persistent grid whose warps pull their rows through shared memory with the bulk copy
 *     engine, 8 KB in flight per warp); correct, but slower in whole decode steps on the
 *     H200 (NOTES.md, session 4), so off by default. 5..64 tokens of 16-bit weights (batched
 *     decode) go to the staged tensor-core skinny GEMM below (tc2_kernel; RAPID_CUDA_TC2=N
 *     moves its lower bound, 0 keeps session 2's tc_gemm_kernel); on sm_90 devices the wgmma
 *     version of it (cuda_wgmma.cu) takes them first (RAPID_CUDA_WG=N: from N tokens, 0: off,
 *     back to tc2_kernel). Larger batches (prefill) go
 *     to cuBLASLt: x is rounded to the weight's 16-bit type and multiplied with f32
 *     accumulation and output (f32 weights: a plain f32 GEMM). On a shape's first use the
 *     heuristic's picks for both operand orientations (y, or y transposed then transposed
 *     back) are timed and the fastest is cached: for skinny batched-decode shapes the two
 *     differ several-fold.
 *  2. Attention: steps of at least 65 tokens (prefill chunks, big engine batches) go to the
 *     flash kernel (see "flash prefill attention": tensor cores, bf16 Q/K/V/P;
 *     RAPID_CUDA_FLASH=N sets the threshold, 0 turns it off). Smaller steps: the split-key
 *     decode kernel of cuda_decode.cu (f32 arithmetic on f32 / bf16 / f16 rows; head sizes
 *     8..256; RAPID_CUDA_DA: its split plan) unless RAPID_CUDA_DECATTN=0,
 *     else (and for other head sizes) the chunked kernel here: one block per
 *     (query token, group of query heads sharing a KV head, chunk of 32 or 128 keys); a warp
 *     scores one key at a time for every head of the group (one coalesced K row read per
 *     group), then threads sum V over the chunk per dimension; a second kernel merges the
 *     chunks' (max, sum, acc) partials (flash-decoding style split over the keys).
 *  3. Small host arrays (token ids, gather rows) go through a pinned ring copied with the
 *     stream; the ring restarts after each synchronisation (to_host) or when full (then it
 *     synchronises first). The step's token table and RoPE's inv_freq have their own device
 *     buffers, re-uploaded only when they change.
 *  4. Decode steps of <= 64 tokens are recorded and replayed as CUDA graphs (see "CUDA
 *     graphs for decode steps" below; RAPID_CUDA_GRAPH=0 turns it off).
 *  5. Programmatic dependent launch for the matvec / GEMM kernels (RAPID_CUDA_PDL=0: off)
 *     and for rmsnorm, silu_mul, the fused RoPE + KV store and the decode attention
 *     (RAPID_CUDA_PDL_SMALL=0: those off), and deferred-op fusions: residual add + next
 *     rmsnorm, RoPE of q + k, and that RoPE + the KV store of k and v, a one-token rmsnorm or
 *     silu_mul into the next matvec's x and a residual add into the matvec before it (bf16 /
 *     f16 and MLX weights) (RAPID_CUDA_FUSE=0: none; RAPID_CUDA_KVROPE=0: RoPE and KV store
 *     apart). mv1_kernel,
 *     the fused RoPE + KV store and the decode attention let their dependents launch early
 *     (griddepcontrol.launch_dependents), so the next kernel's weight loads start under
 *     their tail.
 *  6. Greedy sampling: rp_cuda_argmax leaves only the ids to copy back.
 * Knobs measured on the H200 (NOTES.md): RAPID_CUDA_TC=MT,U, RAPID_CUDA_TC2=N, RAPID_CUDA_WG=N,
 * RAPID_CUDA_WG_SPLIT=S, RAPID_CUDA_WG_BM=256,
 * RAPID_CUDA_QMM2=N, RAPID_CUDA_Q4WG=N, RAPID_CUDA_Q4WG_SPLIT=S, RAPID_CUDA_Q4WG_PF=0|1|2,
 * RAPID_CUDA_QDQ=N (the MLX paths, cuda_quant.cu), RAPID_CUDA_MV_UNROLL=4|8|16,
 * RAPID_CUDA_MV1=0|4|8, RAPID_CUDA_MV1_GRID=0, RAPID_CUDA_MV1_BPS=N, RAPID_CUDA_MV1_SILU=0,
 * RAPID_CUDA_QMV_SILU=1, RAPID_CUDA_DECMERGE=0, RAPID_CUDA_DECPRE=0 (NOTES.md, session 5),
 * RAPID_CUDA_DA=0..3 (the decode attention's split plan, cuda_decode.h; session 20),
 * RAPID_CUDA_PROFILE=1 (synchronised wall time per op) or 2 (GPU time per op from events).
 */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <new>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_decode.h"
#include "backend/cuda/cuda_kv.cuh"
#include "backend/cuda/cuda_stream.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_quant.h"
#include "backend/cuda/cuda_sample.h"
#include "backend/cuda/cuda_wgmma.h"

extern "C" {
#include "base/alloc.h"
}

#define CKL(x)                                                                                 \
    do {                                                                                       \
        cublasStatus_t s_ = (x);                                                               \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "%s:%d: cuBLASLt error %d (%s)\n", __FILE__, __LINE__, (int)s_,    \
                    #x);                                                                       \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

#define LAUNCHED() CK(cudaGetLastError())

/* RAPID_CUDA_PROFILE=1: every launcher waits for the GPU before and after its work and adds
 * the wall time to its kind; the table goes to stderr when the context is freed. Slows the
 * run (a synchronisation per op): for finding where the time goes, not for timing. */
enum { P_MATVEC, P_GEMM, P_TCGEMM, P_NORM, P_ROPE, P_ATTN, P_KV, P_ELEM, P_EMBED, P_GATHER,
       P_TOHOST, P_STEP, P_SAMPLE, P_COUNT };
static const char *const g_prof_names[P_COUNT] = {
    "matvec", "gemm (cuBLASLt)", "gemm (tensor-core skinny)", "rmsnorm", "rope", "attention",
    "kv_store", "elementwise", "embed", "gather", "to_host", "step", "argmax"};

enum { RING_BYTES = 8 << 20, WS_BYTES = 32 << 20, N_ALGOS = 512, ACH = 128, MV_WARPS = 8,
       EV_CAP = 8192 };
/* the tensor-core skinny GEMM (see its section) */
enum { TC_WARPS = 4, TC_MAXN = 64 };
/* flash prefill attention: query tokens per tile, keys per step, threads per block */
enum { FA_BQ = 64, FA_BK = 64, FA_THREADS = 128 };

/* Up to three matrices over the same x, rows stacked: global row r is row r - r0[m] of
 * matrix m. */
typedef struct mv_set {
    const uint4 *w[3];
    float *y[3];
    long r0[4]; /* r0[3] = total rows; entries past the last matrix repeat it */
} mv_set;

/* The one-token 16-bit matvec with x staged in shared memory (mv1_kernel): its x comes as
 * it is (MV1_COPY), as rmsnorm(x) * w (MV1_NORM: a deferred rmsnorm taken in) or as
 * silu(x) * x2 (MV1_SILU: a deferred silu_mul taken in); res, when set, gets y added (a
 * following residual add taken in). */
enum { MV1_COPY, MV1_NORM, MV1_SILU };
typedef struct mv1_args {
    mv_set set;
    long cols;
    const float *x;  /* COPY: x; NORM: the norm's input; SILU: the gate */
    const float *x2; /* NORM: the norm's weight (or NULL); SILU: the up projection */
    float *out;      /* NORM / SILU: the op's own output (block 0 writes it too) */
    float *res;      /* res[r] += y[r] (one matrix), or NULL */
    float eps;
    int add_one, pro, dt;
} mv1_args;

enum { PEND_NONE, PEND_ADD, PEND_ROPE, PEND_ROPE2, PEND_MV, PEND_NORM, PEND_SILU, PEND_QMV };
static_assert((int)MV1_NORM == (int)RP_CUDA_PRO_NORM && (int)MV1_SILU == (int)RP_CUDA_PRO_SILU,
              "prologue kinds");
typedef struct pend_op {
    int kind, off; /* off: RAPID_CUDA_FUSE=0 */
    float *y;        /* add: y += x over n; rope: the tensor */
    float *y2;       /* PEND_ROPE2: q (y, heads) and k (y2, heads2) held for the KV store */
    int heads2;
    const float *x;
    long n;
    int heads, n_tok, head_dim, half, neox;
    const int32_t *pos;
    float attn_factor;
    mv1_args mv; /* PEND_MV: the matvec; PEND_NORM / PEND_SILU use y (out), x, x2 (w / u), n
                  * (dim), eps, add_one */
    const float *x2;
    float eps;
    int add_one;
    /* PEND_QMV: a quantized one-token matvec (cuda_quant.cu), its launcher and its args */
    rp_cuda_hook_fn qfn;
    rp_cuda_mvdesc qd;
    size_t qn;
    alignas(16) unsigned char qargs[RP_CUDA_HOOK_ARGS];
} pend_op;

typedef struct algo_entry {
    int dtype, n;
    long rows, cols;
    int ok, orient;
    cublasLtMatmulAlgo_t algo;
} algo_entry;

struct rp_cuda_ctx {
    int device, sms;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *ws;
    char *ring_host, *ring_dev;
    size_t ring_off;
    void *xh; /* x rounded to 16 bits for cuBLASLt */
    size_t xh_bytes;
    void *tbuf; /* orientation-1 GEMM output before its transpose */
    size_t tbuf_bytes;
    void *pin; /* pinned landing area for big device -> host copies */
    size_t pin_bytes;
    float *part; /* attention partials / gather scratch */
    size_t part_bytes;
    rp_cuda_tok *tok_host, *tok_dev;
    int n_tok, tok_cap, max_pos;
    int2 *fa_host, *fa_dev; /* the step's flash-attention tiles (first token, tokens) */
    int n_fa, fa_min;       /* tiles; steps of at least fa_min tokens use them (0: never) */
    int mvb;                /* blocks per SM of the streaming one-token matvec (matvec_bulk_kernel,
                             * opt-in: RAPID_CUDA_MVB=1..4); 0: matvec_kernel (the default) */
    int kvrope;             /* RoPE of k fused into the KV store (RAPID_CUDA_KVROPE=0: off) */
    int dec_attn;           /* the split-key decode attention (cuda_decode.cu); 0: the
                             * chunked kernel below (RAPID_CUDA_DECATTN=0) */
    int dec_mode;           /* its split plan (RAPID_CUDA_DA=0..3, cuda_decode.h; default 0) */
    int dec_merge;          /* its splits merged by the last block (RAPID_CUDA_DECMERGE=0: by
                             * a second kernel) */
    unsigned *da_cnt;       /* ... with these counters (da_cnt_n of them, zero between launches) */
    int dec_pre;            /* its first K / V loads before the programmatic-launch wait when
                             * the step allows (RAPID_CUDA_DECPRE=0: after) */
    int step_single;        /* this step: every token the only one of its sequence */
    size_t da_cnt_n;
    int32_t *tbl_host, *tbl_dev; /* the step's block tables */
    int tbl_cap;
    rp_cuda_kv kv;               /* the step's pool */
    cudaEvent_t tok_ev;
    float *inv_host, *inv_dev;
    int n_inv;
    int32_t *pos_host; /* the step's positions, to recognise RoPE's pos */
    algo_entry algos[N_ALGOS];
    int n_algos;
    int prof;
    int graphs;           /* RAPID_CUDA_GRAPH=1: decode steps replayed as CUDA graphs */
    int rec, rec_dirty;   /* recording this step's launches / the step cannot be a graph */
    struct rec_op *log;   /* the step's deferred launches */
    int n_log;
    struct graph_entry *gcache;
    uint64_t g_clock;
    long g_hits, g_builds;
    /* host time of replayed decode steps (printed at the end with the graph counts): from
     * rp_cuda_step to the graph's launch (the model's recording), the launch call, the wait
     * for the ids, and from the ids' return to the next step (the engine and the model's set-up) */
    double st_t0, st_t1, st_t2, st_end, st_rec, st_launch, st_wait, st_out;
    long st_n;
    int st_hit;    /* this step replayed a cached graph */
    int replay;    /* RAPID_CUDA_REPLAY=N: each replayed graph launched N times (measurement:
                    * the step time's growth per launch is the GPU's time for one step) */
    int mv_unroll; /* loads in flight per lane in the n_tok == 1 matvec: 4, 8, 16 (default) */
    int mv1;       /* the one-token 16-bit matvec with fused prologue / epilogue (mv1_kernel):
                    * loads per lane per chunk 4 or 8 (RAPID_CUDA_MV1=4 / 8), 1: by shape (the
                    * default), 0: matvec_kernel and no fusions into it (RAPID_CUDA_MV1=0) */
    int mv1_bps;   /* its blocks per SM (RAPID_CUDA_MV1_BPS; 0: as many as fit) */
    int mv1_silu;  /* a held silu_mul taken into the next one-token bf16 / f16 matvec's x
                    * (RAPID_CUDA_MV1_SILU=0: its own kernel; +1.5% tg128 bf16) */
    int qmv_silu;  /* ... into the MLX one (opt-in RAPID_CUDA_QMV_SILU=1: -3% tg128 MLX4, every
                    * block computing 14336 silus weighs more against 4-bit weights) */
    int mv1_grid;  /* its grid: as many rows for every warp (RAPID_CUDA_MV1_GRID=0: every slot) */
    int mv1_occ[16]; /* blocks per SM each variant fits by registers (0: not asked yet) */
    struct pend_op *pend; /* the deferred op (kind 0: none) */
    int tc_mt, tc_u; /* the skinny GEMM's tiles per warp and chunks per iteration
                      * (RAPID_CUDA_TC=MT,U: 2,2 (default), 1,2, 2,4 or 1,4; bf16 only) */
    int pdl; /* programmatic dependent launch for the matvec / GEMM kernels (RAPID_CUDA_PDL=0: off) */
    int pdl_small; /* ... and for rmsnorm, silu_mul, the fused RoPE + KV store and the decode
                    * attention (also off with RAPID_CUDA_PDL_SMALL=0) */
    float *tc_part;   /* its split partials */
    size_t tc_part_bytes;
    int32_t *ids_host, *ids_dev; /* argmax results */
    int ids_cap;
    cudaEvent_t *ev; /* RAPID_CUDA_PROFILE=2: event pairs around each op, summed at syncs */
    int *ev_kind, n_ev;
    int prof_open; /* profile scopes open now (they nest through pend_flush) */
    double prof_s[P_COUNT];
    long prof_n[P_COUNT];
    void *qscr[6]; /* scratch of the quantized-weight kernels (cuda_quant.cu) */
    int qknob;     /* their knobs: RAPID_CUDA_QMV (x 100), RAPID_CUDA_QMM=MT,F (MT x 10 + F) */
    int qdq_min;   /* RAPID_CUDA_QDQ: tokens from which MLX weights go through a bf16 copy */
    int tc2_min;   /* RAPID_CUDA_TC2: tokens from which the staged skinny GEMM runs (0: never) */
    int tc2_attr;  /* its kernels' shared-memory limits raised */
    int wg_min;    /* RAPID_CUDA_WG: tokens from which the wgmma GEMM runs (0: never; sm_90 only) */
    int wg_attr;   /* its kernels' shared-memory limits raised, wg_cl read */
    int wg_split;  /* RAPID_CUDA_WG_SPLIT: at most that many splits by tc2's rule (0: by wg_cl) */
    int wg_g;      /* RAPID_CUDA_WG_BM=256: 2 warpgroups (256 rows) per block, else 1 (128) */
    int wg_cl[8][RP_WG_MAXSPLIT + 1]; /* [token tiles - 1][s]: clusters of s resident at once */
    int qmm2_min;  /* RAPID_CUDA_QMM2: tokens from which the staged 4-bit kernel runs (0: never) */
    int qonce;     /* cuda_quant.cu's one-time set-ups done (rp_cuda_hook_once) */
    size_t qscr_bytes[6];
    char name[160];
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* RAPID_CUDA_PROFILE=2: no synchronisation; an event pair on the stream around each op, the
 * elapsed GPU times summed whenever the pool fills and at the end (what the GPU spent per op
 * kind, launch gaps excluded). */
static void ev_flush(rp_cuda_ctx *c)
{
    if (!c->n_ev)
        return;
    CK(cudaStreamSynchronize(c->stream));
    for (int i = 0; i < c->n_ev; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, c->ev[2 * i], c->ev[2 * i + 1]));
        c->prof_s[c->ev_kind[i]] += ms * 1e-3;
        c->prof_n[c->ev_kind[i]]++;
    }
    c->n_ev = 0;
}

/* Launches the deferred op, if any (see "deferred ops" below). Every launcher starts with
 * it (through prof_scope), except those that may fuse with the deferred op. */
static void pend_flush(rp_cuda_ctx *c);

struct prof_scope {
    rp_cuda_ctx *c;
    int kind, slot;
    double t0;
    /* flush 1: launches the deferred op first; 0: only a deferred matvec, rmsnorm or
     * silu_mul (the op may take in a held add or RoPE); 2: nothing (the op takes it in) */
    prof_scope(rp_cuda_ctx *ctx, int k, int flush = 1) : c(ctx), kind(k), slot(-1), t0(0)
    {
        int pk = c->pend ? c->pend->kind : PEND_NONE;
        if (flush == 1 || (flush == 0 && (pk == PEND_MV || pk == PEND_NORM || pk == PEND_SILU ||
                                          pk == PEND_QMV)))
            pend_flush(c);
        if (c->prof == 2) {
            /* a scope may open inside another (pend_flush): flush the events only when none
             * is open, with room left for the nested ones */
            if (c->n_ev >= EV_CAP - 8 && c->prof_open == 0)
                ev_flush(c);
            c->prof_open++;
            if (c->n_ev < EV_CAP) {
                slot = c->n_ev++;
                c->ev_kind[slot] = k;
                CK(cudaEventRecord(c->ev[2 * slot], c->stream));
            }
        } else if (c->prof) {
            CK(cudaStreamSynchronize(c->stream));
            t0 = now_s();
        }
    }
    ~prof_scope()
    {
        if (c->prof == 2) {
            c->prof_open--;
            if (slot >= 0)
                CK(cudaEventRecord(c->ev[2 * slot + 1], c->stream));
        } else if (c->prof) {
            CK(cudaStreamSynchronize(c->stream));
            c->prof_s[kind] += now_s() - t0;
            c->prof_n[kind]++;
        }
    }
};

/* ---- CUDA graphs for decode steps ---------------------------------------------------------
 * With graphs on, the launches of a step of at most 64 tokens (from rp_cuda_step to the
 * logits copy) are recorded instead of run: each as a closure of its arguments by value.
 * At the logits copy the closures' bytes are hashed; a step whose hash was seen before
 * replays that step's instantiated graph, otherwise the closures run under stream capture
 * and the graph is kept (a small LRU). Host data (token ids, gather rows, the token table)
 * still goes to the device eagerly at record time, at the same ring offsets for the same op
 * sequence, so it is part of the hash only through its device addresses. Anything that must
 * synchronise or reallocate mid-step (ring wrap, scratch growth, cuBLASLt) first runs what
 * was recorded and marks the step not graphable. */
enum { LOG_CAP = 2048, BLOB = 224, G_CACHE = 24 };
struct rec_op {
    void (*thunk)(void *);
    alignas(16) unsigned char blob[BLOB];
};
struct graph_entry {
    uint64_t sig, last;
    cudaGraphExec_t exec;
};

template <typename F> static void thunk_of(void *p) { (*(F *)p)(); }

static void log_run(rp_cuda_ctx *c)
{
    for (int i = 0; i < c->n_log; i++)
        c->log[i].thunk(c->log[i].blob);
    c->n_log = 0;
}

/* Runs what was recorded now and keeps the rest of the step eager. */
static void rec_break(rp_cuda_ctx *c)
{
    if (!c->rec)
        return;
    log_run(c);
    c->rec_dirty = 1;
}

/* LAUNCH(c, { body }) runs body now, or records it: the closure is built in place in a
 * zeroed log slot (no copy), so its padding is zero and the slot's bytes are a faithful
 * signature of everything the body captured. */
template <typename Make> static void launch_in(rp_cuda_ctx *c, const Make &make)
{
    using F = std::remove_pointer_t<decltype(make((void *)0))>;
    static_assert(sizeof(F) <= BLOB, "closure too big for the launch log");
    if (c->rec && !c->rec_dirty && c->n_log == LOG_CAP)
        rec_break(c);
    if (!c->rec || c->rec_dirty) {
        alignas(16) unsigned char tmp[BLOB];
        F *f = make(tmp);
        (*f)();
        return;
    }
    rec_op *r = &c->log[c->n_log++];
    memset(r, 0, sizeof *r);
    make(r->blob);
    r->thunk = thunk_of<F>;
}
#define LAUNCH(c, ...) launch_in(c, [&](void *blob_) { return new (blob_) auto([=] __VA_ARGS__); })

static uint64_t log_sig(const rp_cuda_ctx *c)
{
    /* 8 bytes a step (a rec_op is a multiple of 8 and the log 8-aligned): each step a
     * bijection of h, so logs that differ in one word never collide */
    static_assert(sizeof(rec_op) % 8 == 0, "rec_op is hashed in 8-byte words");
    uint64_t h = 1469598103934665603ull;
    const uint64_t *p = (const uint64_t *)c->log;
    size_t n = (size_t)c->n_log * (sizeof(rec_op) / 8);
    for (size_t k = 0; k < n; k++)
        h = (((h << 29) | (h >> 35)) ^ p[k]) * 0x9e3779b97f4a7c15ull;
    return h;
}

/* End of a recorded step: replay or build its graph (or run it eagerly when dirty). */
static void rec_finish(rp_cuda_ctx *c)
{
    if (!c->rec)
        return;
    c->rec = 0;
    if (c->rec_dirty || c->n_log == 0) {
        log_run(c);
        c->rec_dirty = 0;
        return;
    }
    uint64_t sig = log_sig(c);
    graph_entry *e = NULL, *victim = NULL;
    for (int i = 0; i < G_CACHE; i++) {
        graph_entry *g = &c->gcache[i];
        if (g->exec && g->sig == sig)
            e = g;
        if (!victim || (victim->exec && (!g->exec || g->last < victim->last)))
            victim = g; /* an empty slot, else the least recently used */
    }
    if (!e) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
        log_run(c);
        CK(cudaStreamEndCapture(c->stream, &g));
        if (victim->exec)
            CK(cudaGraphExecDestroy(victim->exec));
        CK(cudaGraphInstantiate(&victim->exec, g, 0));
        CK(cudaGraphDestroy(g));
        victim->sig = sig;
        e = victim;
        c->g_builds++;
    } else {
        c->g_hits++;
        c->st_hit = 1;
    }
    c->n_log = 0;
    e->last = ++c->g_clock;
    c->st_t1 = now_s();
    CK(cudaGraphLaunch(e->exec, c->stream));
    for (int i = 1; c->st_hit && i < c->replay; i++) /* idempotent: the same inputs again */
        CK(cudaGraphLaunch(e->exec, c->stream));
    c->st_t2 = now_s();
}

/* After a step's results reached the host: its host times, when it replayed a graph. */
static void step_timed(rp_cuda_ctx *c)
{
    if (!c->st_hit) {
        c->st_end = 0;
        return;
    }
    double t3 = now_s();
    c->st_rec += c->st_t1 - c->st_t0;
    c->st_launch += c->st_t2 - c->st_t1;
    c->st_wait += t3 - c->st_t2;
    c->st_end = t3;
    c->st_n++;
    c->st_hit = 0;
}

/* ---- context ----------------------------------------------------------------------------- */

extern "C" int rp_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

extern "C" rp_cuda_ctx *rp_cuda_ctx_new(int device, char *err, size_t err_len)
{
    int n = rp_cuda_device_count();
    if (device < 0 || device >= n) {
        snprintf(err, err_len, "no CUDA GPU %d (the driver sees %d)", device, n);
        return NULL;
    }
    rp_cuda_ctx *c = (rp_cuda_ctx *)rp_calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    c->device = device;
    cudaDeviceProp p;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&p, device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaMalloc(&c->ws, WS_BYTES);
    if (e == cudaSuccess)
        e = cudaMallocHost((void **)&c->ring_host, RING_BYTES);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->ring_dev, RING_BYTES);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&c->tok_ev, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "CUDA GPU %d: %s", device, cudaGetErrorString(e));
        rp_cuda_ctx_free(c);
        return NULL;
    }
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "cuBLASLt does not start on GPU %d", device);
        rp_cuda_ctx_free(c);
        return NULL;
    }
    c->sms = p.multiProcessorCount;
    const char *pe = getenv("RAPID_CUDA_PROFILE");
    c->prof = pe && *pe && strcmp(pe, "0") != 0 ? (strcmp(pe, "2") == 0 ? 2 : 1) : 0;
    if (c->prof == 2) {
        c->ev = (cudaEvent_t *)rp_calloc(2 * EV_CAP, sizeof(cudaEvent_t));
        c->ev_kind = (int *)rp_calloc(EV_CAP, sizeof(int));
        if (!c->ev || !c->ev_kind) {
            snprintf(err, err_len, "out of memory");
            rp_cuda_ctx_free(c);
            return NULL;
        }
        for (int i = 0; i < 2 * EV_CAP; i++)
            CK(cudaEventCreate(&c->ev[i]));
    }
    const char *pd = getenv("RAPID_CUDA_PDL");
    c->pdl = !(pd && strcmp(pd, "0") == 0);
    const char *ps_ = getenv("RAPID_CUDA_PDL_SMALL");
    c->pdl_small = c->pdl && !(ps_ && strcmp(ps_, "0") == 0);
    const char *tv = getenv("RAPID_CUDA_TC");
    c->tc_mt = 2, c->tc_u = 2; /* the fastest at 16 and 64 streams on the H200 (NOTES.md) */
    if (tv && (tv[0] == '1' || tv[0] == '2') && tv[1] == ',' && (tv[2] == '2' || tv[2] == '4'))
        c->tc_mt = tv[0] - '0', c->tc_u = tv[2] - '0';
    c->pend = (pend_op *)rp_calloc(1, sizeof(pend_op));
    if (!c->pend) {
        snprintf(err, err_len, "out of memory");
        rp_cuda_ctx_free(c);
        return NULL;
    }
    const char *fe = getenv("RAPID_CUDA_FUSE");
    c->pend->off = fe && strcmp(fe, "0") == 0;
    /* decode steps as CUDA graphs: on unless RAPID_CUDA_GRAPH=0 (or profiling) */
    const char *ge = getenv("RAPID_CUDA_GRAPH");
    c->graphs = !(ge && strcmp(ge, "0") == 0) && !c->prof;
    const char *rr = getenv("RAPID_CUDA_REPLAY");
    c->replay = rr && atoi(rr) > 1 ? atoi(rr) : 1;
    if (c->graphs) {
        c->log = (rec_op *)rp_alloc_aligned(sizeof(rec_op) * LOG_CAP, RP_TAG_MODEL);
        c->gcache = (graph_entry *)rp_calloc(G_CACHE, sizeof(graph_entry));
        if (!c->log || !c->gcache) {
            snprintf(err, err_len, "out of memory");
            rp_cuda_ctx_free(c);
            return NULL;
        }
    }
    const char *fa = getenv("RAPID_CUDA_FLASH"); /* min step tokens for flash prefill, 0 off */
    c->fa_min = fa && *fa ? atoi(fa) : 65;
    const char *da = getenv("RAPID_CUDA_DECATTN");
    c->dec_attn = !(da && strcmp(da, "0") == 0);
    const char *dmo = getenv("RAPID_CUDA_DA");
    c->dec_mode = dmo && *dmo >= '0' && *dmo <= '3' && !dmo[1] ? *dmo - '0' : 0;
    const char *dm = getenv("RAPID_CUDA_DECMERGE");
    c->dec_merge = !(dm && strcmp(dm, "0") == 0);
    const char *dp = getenv("RAPID_CUDA_DECPRE");
    c->dec_pre = !(dp && strcmp(dp, "0") == 0);
    const char *mb = getenv("RAPID_CUDA_MVB");
    c->mvb = mb && mb[0] >= '1' && mb[0] <= '4' && !mb[1] ? mb[0] - '0' : 0; /* opt-in */
    const char *kr = getenv("RAPID_CUDA_KVROPE");
    c->kvrope = !(kr && strcmp(kr, "0") == 0);
    const char *ms = getenv("RAPID_CUDA_MV1_SILU");
    c->mv1_silu = !(ms && strcmp(ms, "0") == 0);
    const char *qs = getenv("RAPID_CUDA_QMV_SILU");
    c->qmv_silu = qs && strcmp(qs, "1") == 0;
    const char *m1 = getenv("RAPID_CUDA_MV1");
    c->mv1 = m1 && strcmp(m1, "0") == 0 ? 0 : m1 && strcmp(m1, "4") == 0 ? 4
           : m1 && strcmp(m1, "8") == 0 ? 8 : 1; /* 1: by shape (mv1_launch) */
    const char *m1b = getenv("RAPID_CUDA_MV1_BPS");
    c->mv1_bps = m1b && *m1b ? atoi(m1b) : 0;
    const char *m1g = getenv("RAPID_CUDA_MV1_GRID");
    c->mv1_grid = !(m1g && strcmp(m1g, "0") == 0);
    const char *ue = getenv("RAPID_CUDA_MV_UNROLL"); /* a tuning knob, measured on the H200 */
    c->mv_unroll = ue && strcmp(ue, "4") == 0 ? 4 : ue && strcmp(ue, "8") == 0 ? 8 : 16;
    const char *qe = getenv("RAPID_CUDA_QMM");
    if (qe && (qe[0] == '2' || qe[0] == '4') && qe[1] == ',' && qe[2] >= '1' && qe[2] <= '8')
        c->qknob = (qe[0] - '0') * 10 + (qe[2] - '0');
    const char *qd = getenv("RAPID_CUDA_QDQ"); /* min tokens for MLX via a bf16 copy, 0 off */
    c->qdq_min = qd && *qd ? atoi(qd) : 128;
    const char *t2 = getenv("RAPID_CUDA_TC2"); /* min tokens for the staged GEMM, 0 off */
    c->tc2_min = t2 && *t2 ? atoi(t2) : 5;
    const char *wg = getenv("RAPID_CUDA_WG"); /* min tokens for the wgmma GEMM, 0 off */
    c->wg_min = p.major == 9 && p.minor == 0 ? (wg && *wg ? atoi(wg) : 5) : 0; /* sm_90a code */
    const char *ws = getenv("RAPID_CUDA_WG_SPLIT");
    c->wg_split = ws && *ws >= '1' && *ws <= '8' && !ws[1] ? *ws - '0' : 0;
    const char *wb = getenv("RAPID_CUDA_WG_BM");
    c->wg_g = wb && strcmp(wb, "256") == 0 ? 2 : 1;
    const char *q2 = getenv("RAPID_CUDA_QMM2"); /* min tokens for the staged 4-bit GEMM, 0 off */
    c->qmm2_min = q2 && *q2 ? atoi(q2) : 5;
    const char *qv = getenv("RAPID_CUDA_QMV");
    if (qv && qv[0] == '1')
        c->qknob += 100;
    const char *qf = getenv("RAPID_CUDA_QMVF"); /* opt-in: 2..9 blocks per SM; default off */
    if (qf && qf[0] >= '2' && qf[0] <= '9')
        c->qknob += 1000 * (qf[0] - '0');
    snprintf(c->name, sizeof c->name, "%.64s, sm_%d%d, %d SMs, %.1f GiB", p.name, p.major, p.minor,
             p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
    return c;
}

extern "C" void rp_cuda_ctx_free(rp_cuda_ctx *c)
{
    if (!c)
        return;
    if (c->pend)
        pend_flush(c);
    if (c->rec) {
        c->rec_dirty = 1;
        rec_finish(c);
    }
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    if (c->graphs)
        fprintf(stderr, "cuda graphs: %ld steps replayed, %ld graphs built\n", c->g_hits,
                c->g_builds);
    if (c->st_n > 0)
        fprintf(stderr,
                "cuda steps: %ld replayed, host us a step: %.1f recording, %.1f launching, "
                "%.1f waiting, %.1f between steps%s\n",
                c->st_n, 1e6 * c->st_rec / (double)c->st_n, 1e6 * c->st_launch / (double)c->st_n,
                1e6 * c->st_wait / (double)c->st_n, 1e6 * c->st_out / (double)c->st_n,
                c->replay > 1 ? " (graphs launched RAPID_CUDA_REPLAY times)" : "");
    for (int i = 0; c->gcache && i < G_CACHE; i++)
        if (c->gcache[i].exec)
            cudaGraphExecDestroy(c->gcache[i].exec);
    rp_free(c->gcache);
    rp_free_aligned(c->log);
    if (c->prof == 2)
        ev_flush(c);
    if (c->prof) {
        double tot = 0;
        for (int k = 0; k < P_COUNT; k++)
            tot += c->prof_s[k];
        fprintf(stderr, "cuda profile (%s): %.3f s in ops\n",
                c->prof == 2 ? "GPU time per op, events" : "synchronised per op", tot);
        for (int k = 0; k < P_COUNT; k++)
            if (c->prof_n[k])
                fprintf(stderr, "  %-26s %9.3f ms %8ld calls %8.1f us/call %5.1f%%\n",
                        g_prof_names[k], c->prof_s[k] * 1e3, c->prof_n[k],
                        c->prof_s[k] * 1e6 / c->prof_n[k], 100.0 * c->prof_s[k] / tot);
    }
    for (int i = 0; c->ev && i < 2 * EV_CAP; i++)
        if (c->ev[i])
            cudaEventDestroy(c->ev[i]);
    rp_free(c->ev);
    rp_free(c->ev_kind);
    rp_free(c->pend);
    cudaFree(c->tc_part);
    for (int i = 0; i < 6; i++)
        cudaFree(c->qscr[i]);
    cudaFree(c->ids_dev);
    cudaFreeHost(c->ids_host);
    if (c->lt)
        cublasLtDestroy(c->lt);
    cudaFree(c->ws);
    cudaFree(c->ring_dev);
    cudaFreeHost(c->ring_host);
    cudaFree(c->xh);
    cudaFree(c->part);
    cudaFree(c->da_cnt);
    cudaFree(c->tbuf);
    cudaFreeHost(c->tok_host);
    cudaFreeHost(c->pin);
    cudaFree(c->tok_dev);
    cudaFreeHost(c->fa_host);
    cudaFree(c->fa_dev);
    cudaFreeHost(c->tbl_host);
    cudaFree(c->tbl_dev);
    cudaFree(c->inv_dev);
    rp_free(c->inv_host);
    rp_free(c->pos_host);
    if (c->tok_ev)
        cudaEventDestroy(c->tok_ev);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    rp_free(c);
}

extern "C" const char *rp_cuda_ctx_name(const rp_cuda_ctx *c) { return c->name; }

extern "C" void rp_cuda_mem_info(rp_cuda_ctx *c, size_t *free_b, size_t *total_b)
{
    CK(cudaMemGetInfo(free_b, total_b));
}

extern "C" void *rp_cuda_malloc(rp_cuda_ctx *c, size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

extern "C" void rp_cuda_free(rp_cuda_ctx *c, void *p)
{
    if (!p)
        return;
    pend_flush(c);
    rec_break(c);
    CK(cudaStreamSynchronize(c->stream));
    CK(cudaFree(p));
}

extern "C" void rp_cuda_upload(rp_cuda_ctx *c, void *dst, const void *src, size_t n)
{
    /* straight from the mmap (pageable); on the stream, so later kernels are ordered after
     * it, and waited for, so the source may go away */
    pend_flush(c);
    rec_break(c);
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
    CK(cudaStreamSynchronize(c->stream));
}

extern "C" void rp_cuda_to_host(rp_cuda_ctx *c, void *dst, const void *src, size_t n)
{
    prof_scope ps(c, P_TOHOST);
    rec_finish(c);
    if (n >= ((size_t)1 << 20)) { /* big (batched logits): DMA into pinned memory, then copy */
        if (n > c->pin_bytes) {
            CK(cudaStreamSynchronize(c->stream));
            CK(cudaFreeHost(c->pin));
            c->pin = NULL;
            CK(cudaMallocHost(&c->pin, n));
            c->pin_bytes = n;
        }
        CK(cudaMemcpyAsync(c->pin, src, n, cudaMemcpyDeviceToHost, c->stream));
        CK(cudaStreamSynchronize(c->stream));
        memcpy(dst, c->pin, n);
    } else {
        CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream));
        CK(cudaStreamSynchronize(c->stream));
    }
    c->ring_off = 0; /* everything staged has been consumed */
    step_timed(c);
}

/* Copies n host bytes to device memory valid for the work queued after this call (until
 * the ring restarts after a synchronisation). */
static void *stage(rp_cuda_ctx *c, const void *src, size_t n)
{
    size_t a = (n + 255) & ~(size_t)255;
    if (a > RING_BYTES) {
        fprintf(stderr, "cuda: staging %zu bytes, more than the ring\n", n);
        abort();
    }
    if (c->ring_off + a > RING_BYTES) {
        pend_flush(c);
        rec_break(c);
        CK(cudaStreamSynchronize(c->stream));
        c->ring_off = 0;
    }
    memcpy(c->ring_host + c->ring_off, src, n);
    CK(cudaMemcpyAsync(c->ring_dev + c->ring_off, c->ring_host + c->ring_off, n,
                       cudaMemcpyHostToDevice, c->stream));
    void *d = c->ring_dev + c->ring_off;
    c->ring_off += a;
    return d;
}

static void *grow(rp_cuda_ctx *c, void **p, size_t *have, size_t need)
{
    if (need > *have) {
        pend_flush(c);
        rec_break(c);
        CK(cudaStreamSynchronize(c->stream));
        CK(cudaFree(*p));
        size_t n = need + need / 2;
        CK(cudaMalloc(p, n));
        *have = n;
    }
    return *p;
}

/* ---- loads and conversions --------------------------------------------------------------- */


__device__ __forceinline__ float bf16lo(uint32_t u) { return __uint_as_float(u << 16); }
__device__ __forceinline__ float bf16hi(uint32_t u) { return __uint_as_float(u & 0xffff0000u); }

template <int DT> struct wtype;
template <> struct wtype<RP_CUDA_F32> {
    enum { EPV = 4 };
    static __device__ __forceinline__ void cvt(uint4 u, float *f)
    {
        f[0] = __uint_as_float(u.x);
        f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z);
        f[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ float one(const void *w, long i)
    {
        return ((const float *)w)[i];
    }
};
template <> struct wtype<RP_CUDA_BF16> {
    enum { EPV = 8 };
    static __device__ __forceinline__ void cvt(uint4 u, float *f)
    {
        f[0] = bf16lo(u.x), f[1] = bf16hi(u.x), f[2] = bf16lo(u.y), f[3] = bf16hi(u.y);
        f[4] = bf16lo(u.z), f[5] = bf16hi(u.z), f[6] = bf16lo(u.w), f[7] = bf16hi(u.w);
    }
    static __device__ __forceinline__ float one(const void *w, long i)
    {
        return __uint_as_float((uint32_t)((const uint16_t *)w)[i] << 16);
    }
};
template <> struct wtype<RP_CUDA_F16> {
    enum { EPV = 8 };
    static __device__ __forceinline__ void cvt(uint4 u, float *f)
    {
        uint32_t a[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __half2 h = *(const __half2 *)&a[i];
            float2 v = __half22float2(h);
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    }
    static __device__ __forceinline__ float one(const void *w, long i)
    {
        return __half2float(((const __half *)w)[i]);
    }
};

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}


/* ---- matmul: decode matvec --------------------------------------------------------------- */

template <int DT, int NT>
__device__ __forceinline__ void mv_fma(uint4 u, const float *__restrict__ x, long cols, long e,
                                       float *acc)
{
    const int EPV = wtype<DT>::EPV;
    float f[EPV];
    wtype<DT>::cvt(u, f);
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float4 *xp = (const float4 *)(x + (long)t * cols + e);
#pragma unroll
        for (int q = 0; q < EPV / 4; q++) {
            float4 xv = __ldg(xp + q);
            acc[t] = fmaf(f[4 * q], xv.x, acc[t]);
            acc[t] = fmaf(f[4 * q + 1], xv.y, acc[t]);
            acc[t] = fmaf(f[4 * q + 2], xv.z, acc[t]);
            acc[t] = fmaf(f[4 * q + 3], xv.w, acc[t]);
        }
    }
}


/* One warp per row; cols a multiple of EPV, rows of w and x 16-byte aligned. */
template <int DT, int NT, int U>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_kernel(mv_set set, long cols, const float *__restrict__ x)
{
    const int EPV = wtype<DT>::EPV;
    long row = (long)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    int m = (row >= set.r0[1]) + (row >= set.r0[2]);
    if (row >= set.r0[3] || row >= set.r0[m + 1])
        return;
    long lr = row - set.r0[m], rows = set.r0[m + 1] - set.r0[m];
    long nv = cols / EPV;
    const uint4 *wr = set.w[m] + lr * nv;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    long i = lane;
    bool waited = false;
    for (; i + 32 * (U - 1) < nv; i += 32 * U) { /* U loads in flight per lane */
        uint4 u[U];
#pragma unroll
        for (int k = 0; k < U; k++)
            u[k] = ld_stream(wr + i + 32 * k);
        if (!waited) { /* the weights are constant: only x waits for the previous kernel */
            pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int k = 0; k < U; k++)
            mv_fma<DT, NT>(u[k], x, cols, (i + 32 * k) * EPV, acc);
    }
    if (!waited)
        pdl_wait();
    for (; i < nv; i += 32)
        mv_fma<DT, NT>(ld_stream(wr + i), x, cols, i * EPV, acc);
    float *y = set.y[m];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s = warp_sum(acc[t]);
        if (lane == 0)
            y[(long)t * rows + lr] = s;
    }
}

/* One token of 16-bit weights with x in shared memory (the default one-token path;
 * RAPID_CUDA_MV1=0: matvec_kernel). A persistent grid (as many blocks as fit on every SM):
 * block b owns rows [b * R / B, (b + 1) * R / B) of the stacked matrices, its warps take them
 * in turn. A warp walks its rows in chunks of 32 x U 16-byte loads and keeps the next chunk's
 * loads in flight while it multiplies the current one, across row ends; the first chunk goes
 * out before the programmatic-launch wait (the weights are constant). x is built in shared
 * memory by every block after the wait: copied, or rmsnorm'ed (the norm's weight multiplied
 * in), or silu(g) * u, split into the first and the second four of every eight elements so
 * that a warp's 16-byte reads are consecutive (no bank conflicts). Block 0 also writes the
 * fused op's own output, which later ops may read. The epilogue can add y into a residual
 * (res[r] += y[r]). */
__device__ float block_sum(float v, float *red);

/* Lets the stream's next kernel (a programmatic dependent) launch now: its blocks take what
 * the SMs have free (as this grid's blocks exit) and issue their weight loads while this one
 * runs; its griddepcontrol.wait still waits for all of this grid. */
__device__ __forceinline__ void mv1_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

template <int DT, int U, int PRO>
__global__ void __launch_bounds__(MV_WARPS * 32) mv1_kernel(mv1_args a)
{
    extern __shared__ float4 xs[]; /* 2 * nv: the low halves, then the high halves */
    __shared__ float red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long total = a.set.r0[3], nv = a.cols / 8;
    const long rb = (long)blockIdx.x * total / gridDim.x;
    const long re = (long)(blockIdx.x + 1) * total / gridDim.x;
    const long n_mine = re - rb > warp ? (re - rb - warp + MV_WARPS - 1) / MV_WARPS : 0;
    const int cpr = (int)((nv + 32 * U - 1) / (32 * U)); /* chunks per row */
    const long items = n_mine * cpr;
    auto load = [&](long it, uint4 (&u)[U]) {
        long row = rb + warp + (it / cpr) * MV_WARPS;
        int m = (row >= a.set.r0[1]) + (row >= a.set.r0[2]);
        const uint4 *wr = a.set.w[m] + (row - a.set.r0[m]) * nv;
        long b = (it % cpr) * 32 * U + lane;
#pragma unroll
        for (int k = 0; k < U; k++)
            u[k] = b + 32 * k < nv ? ld_stream(wr + b + 32 * k) : make_uint4(0, 0, 0, 0);
    };
    auto mul = [&](long it, const uint4 (&u)[U], float &acc) {
        long b = (it % cpr) * 32 * U + lane;
#pragma unroll
        for (int k = 0; k < U; k++) {
            long j = b + 32 * k;
            if (j < nv) {
                float f[8];
                wtype<DT>::cvt(u[k], f);
                float4 lo = xs[j], hi = xs[nv + j];
                acc = fmaf(f[0], lo.x, acc);
                acc = fmaf(f[1], lo.y, acc);
                acc = fmaf(f[2], lo.z, acc);
                acc = fmaf(f[3], lo.w, acc);
                acc = fmaf(f[4], hi.x, acc);
                acc = fmaf(f[5], hi.y, acc);
                acc = fmaf(f[6], hi.z, acc);
                acc = fmaf(f[7], hi.w, acc);
            }
        }
    };
    auto finish = [&](long it, float &acc) {
        if ((int)(it % cpr) != cpr - 1)
            return;
        long row = rb + warp + (it / cpr) * MV_WARPS;
        int m = (row >= a.set.r0[1]) + (row >= a.set.r0[2]);
        float s = warp_sum(acc);
        acc = 0.0f;
        if (lane == 0) {
            long lr = row - a.set.r0[m];
            a.set.y[m][lr] = s;
            if (a.res)
                a.res[lr] += s;
        }
    };
    mv1_trigger();
    uint4 b0[U], b1[U];
    if (items > 0)
        load(0, b0);
    if (items > 1)
        load(1, b1);
    pdl_wait(); /* x (and res) are the previous kernels' */
    const float4 *x4 = (const float4 *)a.x, *g4 = (const float4 *)a.x2;
    const int n4 = (int)(a.cols / 4);
    float inv = 1.0f;
    if (PRO == MV1_NORM) {
        float ss = 0.0f;
        for (int q = threadIdx.x; q < n4; q += blockDim.x) {
            float4 v = x4[q];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        ss = block_sum(ss, red);
        inv = 1.0f / sqrtf(ss / (float)a.cols + a.eps);
    }
    for (int q = threadIdx.x; q < n4; q += blockDim.x) {
        float4 v = x4[q];
        if (PRO == MV1_NORM) {
            v.x *= inv, v.y *= inv, v.z *= inv, v.w *= inv;
            if (g4) {
                float4 g = g4[q];
                if (a.add_one)
                    g.x += 1.0f, g.y += 1.0f, g.z += 1.0f, g.w += 1.0f;
                v.x *= g.x, v.y *= g.y, v.z *= g.z, v.w *= g.w;
            }
        } else if (PRO == MV1_SILU) {
            float4 u = g4[q];
            v.x = v.x / (1.0f + expf(-v.x)) * u.x;
            v.y = v.y / (1.0f + expf(-v.y)) * u.y;
            v.z = v.z / (1.0f + expf(-v.z)) * u.z;
            v.w = v.w / (1.0f + expf(-v.w)) * u.w;
        }
        xs[(q & 1) * nv + (q >> 1)] = v;
        if (PRO != MV1_COPY && blockIdx.x == 0)
            ((float4 *)a.out)[q] = v;
    }
    __syncthreads();
    float acc = 0.0f;
    for (long it = 0; it < items; it += 2) { /* two chunks in flight while one multiplies */
        mul(it, b0, acc);
        finish(it, acc);
        if (it + 2 < items)
            load(it + 2, b0);
        if (it + 1 >= items)
            break;
        mul(it + 1, b1, acc);
        finish(it + 1, acc);
        if (it + 3 < items)
            load(it + 3, b1);
    }
}

enum { MV1_MAXC = 32768 };

template <int DT, int U, int PRO> static void mv1_go(rp_cuda_ctx *c, const mv1_args &a)
{
    void (*k)(mv1_args) = mv1_kernel<DT, U, PRO>;
    int vi = (DT == RP_CUDA_F16) * 8 + (U == 8) * 4 + PRO;
    size_t smem = (size_t)a.cols * sizeof(float);
    if (!c->mv1_occ[vi]) {
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)(MV1_MAXC * sizeof(float))));
        int nb = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k, MV_WARPS * 32, 0));
        c->mv1_occ[vi] = nb > 0 ? nb : 1;
    }
    long bps = c->mv1_occ[vi], by_smem = (long)(200 * 1024) / (long)(smem + 1024);
    if (by_smem < bps)
        bps = by_smem > 0 ? by_smem : 1;
    if (c->mv1_bps > 0 && c->mv1_bps < bps)
        bps = c->mv1_bps;
    /* as many rows for every warp (k each): the fewest blocks that fit on the GPU at once
     * with k = ceil(rows / warp slots); RAPID_CUDA_MV1_GRID=0: every slot, rows split
     * evenly over the blocks (a block's warps then differ by a row) */
    long slots = bps * c->sms, total = a.set.r0[3], blocks = slots;
    if (c->mv1_grid) {
        long k = (total + slots * MV_WARPS - 1) / (slots * MV_WARPS);
        blocks = (total + k * MV_WARPS - 1) / (k * MV_WARPS);
    } else if (blocks > (total + 1) / 2) {
        blocks = (total + 1) / 2; /* at least two rows a block */
    }
    if (blocks < 1)
        blocks = 1;
    int pdl = c->pdl;
    mv1_args args = a;
    LAUNCH(c, {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)blocks);
        cfg.blockDim = dim3(MV_WARPS * 32);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = c->stream;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = pdl ? 1 : 0;
        CK(cudaLaunchKernelEx(&cfg, k, args));
        LAUNCHED();
    });
}

template <int DT, int U> static void mv1_pro(rp_cuda_ctx *c, const mv1_args &a)
{
    if (a.pro == MV1_NORM)
        mv1_go<DT, U, MV1_NORM>(c, a);
    else if (a.pro == MV1_SILU)
        mv1_go<DT, U, MV1_SILU>(c, a);
    else
        mv1_go<DT, U, MV1_COPY>(c, a);
}

/* U by shape (RAPID_CUDA_MV1=1, the default): 4 for rows of up to 8192 elements, 8 for longer
 * ones (the H200, call 1 of session 5: q/k/v 3.30 / 3.29 TB/s with U 4 / 8, o 4.17 / 3.86,
 * gate/up 4.12 / 4.05, down (14336) 2.87 / 3.65, head 4.36 / 4.40). */
static void mv1_launch(rp_cuda_ctx *c, const mv1_args &a)
{
    int u = c->mv1 == 1 ? (a.cols <= 8192 ? 4 : 8) : c->mv1;
    if (a.dt == RP_CUDA_BF16)
        u == 4 ? mv1_pro<RP_CUDA_BF16, 4>(c, a) : mv1_pro<RP_CUDA_BF16, 8>(c, a);
    else
        u == 4 ? mv1_pro<RP_CUDA_F16, 4>(c, a) : mv1_pro<RP_CUDA_F16, 8>(c, a);
}

static int ranges_meet(const void *a, size_t na, const void *b, size_t nb)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && x < y + nb && y < x + na;
}

/* The held one-token rmsnorm or silu_mul whose output is x (cols floats), taken into the
 * prologue of the one-token matvec of x (mv1_kernel, or qmv2_kernel through
 * rp_cuda_hook_take_pro): *p filled and nothing held; 0 when none fits. Its block 0 writes
 * the op's output while the other blocks read the op's inputs: they must not meet (an
 * in-place norm is refused). */
static int pend_take_pro(rp_cuda_ctx *c, const float *x, long cols, rp_cuda_pro *p,
                         int silu_ok)
{
    pend_op *pd = c->pend;
    if (pd->off || (pd->kind != PEND_NORM && pd->kind != PEND_SILU) || pd->y != x ||
        pd->n != cols || (pd->kind == PEND_SILU && !silu_ok))
        return 0;
    size_t xb = sizeof(float) * (size_t)cols;
    if (ranges_meet(pd->y, xb, pd->x, xb) || ranges_meet(pd->y, xb, pd->x2, xb))
        return 0;
    p->pro = pd->kind == PEND_NORM ? RP_CUDA_PRO_NORM : RP_CUDA_PRO_SILU;
    p->x = pd->x;
    p->x2 = pd->x2;
    p->out = pd->y;
    p->eps = pd->kind == PEND_NORM ? pd->eps : 0.0f;
    p->add_one = pd->kind == PEND_NORM ? pd->add_one : 0;
    pd->kind = PEND_NONE;
    return 1;
}

/* A one-token 16-bit matvec that mv1_kernel can run: deferred (PEND_MV), taking in a
 * deferred rmsnorm or silu_mul whose output is x; 0 when it is not one (the caller goes on). */
static int mv1_defer(rp_cuda_ctx *c, int dt, const mv_set &set, long cols, const float *x)
{
    if (!c->mv1 || c->mvb > 0 || (dt != RP_CUDA_BF16 && dt != RP_CUDA_F16) || cols % 8 != 0 ||
        cols > MV1_MAXC || (uintptr_t)x % 16 != 0 || set.r0[3] < 1)
        return 0;
    for (int m = 0; m < 3; m++)
        if (set.r0[m + 1] > set.r0[m] && (uintptr_t)set.w[m] % 16 != 0)
            return 0;
    pend_op *pd = c->pend; /* (profiled when it launches: pend_flush) */
    mv1_args a;
    memset(&a, 0, sizeof a);
    a.set = set;
    a.cols = cols;
    a.x = x;
    a.dt = dt;
    a.pro = MV1_COPY;
    rp_cuda_pro p;
    if (pend_take_pro(c, x, cols, &p, c->mv1_silu)) {
        a.pro = p.pro; /* MV1_NORM / MV1_SILU */
        a.x = p.x;
        a.x2 = p.x2;
        a.out = p.out;
        a.eps = p.eps;
        a.add_one = p.add_one;
    } else {
        pend_flush(c);
    }
    if (pd->off) {
        prof_scope ps(c, P_MATVEC, 0);
        mv1_launch(c, a);
        return 1;
    }
    pd->kind = PEND_MV;
    pd->mv = a;
    return 1;
}

/* Whether y += x over n fits the epilogue of a held one-token matvec whose one output is
 * y0 [rows] (NULL: several outputs) and which reads or writes in, in2, out (cols floats each):
 * x must be y0, and y must meet none of them (the blocks read them while others add). */
static int add_fits(const float *y, const float *x, long n, const float *y0, long rows,
                    const float *in, const float *in2, const float *out, long cols)
{
    if (!y0 || x != y0 || n != rows)
        return 0;
    size_t yb = sizeof(float) * (size_t)n, xb = sizeof(float) * (size_t)cols;
    return !ranges_meet(y, yb, in, xb) && !ranges_meet(y, yb, in2, xb) &&
           !ranges_meet(y, yb, out, xb) && !ranges_meet(y, yb, x, yb);
}

/* The residual add y += x taken into the deferred matvec that writes x (mv1_kernel's, or a
 * quantized one's: PEND_QMV, its res pointer at qd.res_off of its args). */
static int pend_take_add(rp_cuda_ctx *c, float *y, const float *x, long n)
{
    pend_op *pd = c->pend;
    if (pd->off)
        return 0;
    if (pd->kind == PEND_MV) {
        mv1_args *a = &pd->mv;
        long rows = a->set.r0[1];
        if (a->res || !add_fits(y, x, n, a->set.r0[3] == rows ? a->set.y[0] : NULL, rows, a->x,
                                a->x2, a->out, a->cols))
            return 0;
        a->res = y;
        return 1;
    }
    if (pd->kind == PEND_QMV) {
        float *res;
        memcpy(&res, pd->qargs + pd->qd.res_off, sizeof res);
        if (res || !add_fits(y, x, n, pd->qd.y, pd->qd.rows, pd->qd.x, pd->qd.x2, pd->qd.out,
                             pd->qd.cols))
            return 0;
        memcpy(pd->qargs + pd->qd.res_off, &y, sizeof y);
        return 1;
    }
    return 0;
}

/* One token of 16-bit weights, streamed through shared memory by the bulk copy engine
 * (opt-in, RAPID_CUDA_MVB=1..4 blocks per SM; tg128 on the H200: 144 tok/s against 186 with
 * matvec_kernel, NOTES.md session 4): a persistent grid, each warp owning rows
 * gw, gw + W, ... (gw its index in the grid, W the grid's warps) in chunks of MVB_CHUNK bytes
 * through MVB_STAGES stages of its own (lane 0 issues a chunk's copy on the stage's mbarrier,
 * the lanes wait, multiply with x from the read-only cache, __syncwarp, lane 0 refills the
 * stage MVB_STAGES chunks on). The stream holds no registers: MVB_STAGES * MVB_CHUNK bytes per
 * warp stay in flight, across rows and matrices. The first chunks go out before the
 * programmatic-launch wait. */
enum { MVB_WARPS = 8, MVB_STAGES = 4, MVB_CHUNK = 2048 };

template <int DT>
__global__ void __launch_bounds__(MVB_WARPS * 32)
    matvec_bulk_kernel(mv_set set, long cols, const float *__restrict__ x)
{
    constexpr int CE = MVB_CHUNK / 2; /* elements per chunk */
    extern __shared__ uint4 sm_w[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned char *stw = (unsigned char *)sm_w + (size_t)warp * MVB_STAGES * MVB_CHUNK;
    uint64_t *bar = (uint64_t *)((unsigned char *)sm_w + (size_t)MVB_WARPS * MVB_STAGES * MVB_CHUNK) +
                    warp * MVB_STAGES;
    const long total = set.r0[3], wstep = (long)gridDim.x * MVB_WARPS;
    const long nch = (cols + CE - 1) / CE;
    const long first = (long)blockIdx.x * MVB_WARPS + warp;
    const long n_rows = first < total ? (total - first + wstep - 1) / wstep : 0;
    const long n_items = n_rows * nch;
    if (lane == 0)
        for (int s = 0; s < MVB_STAGES; s++)
            mbar_init(&bar[s], 1);
    mbar_init_fence();
    __syncwarp();
    auto issue = [&](long i, int s) {
        long row = first + (i / nch) * wstep, ch = i % nch;
        int m = (row >= set.r0[1]) + (row >= set.r0[2]);
        long lr = row - set.r0[m], e0 = ch * CE, ne = cols - e0 < CE ? cols - e0 : CE;
        uint32_t nb = (uint32_t)(ne * 2);
        unsigned char *dst = stw + (size_t)s * MVB_CHUNK;
        mbar_expect(&bar[s], nb);
        bulk_load(dst, (const unsigned char *)set.w[m] + (lr * cols + e0) * 2, nb, &bar[s]);
    };
    if (lane == 0)
        for (int s = 0; s < MVB_STAGES && s < n_items; s++)
            issue(s, s);
    pdl_wait(); /* x is the previous kernel's */
    float acc = 0.0f;
    for (long i = 0; i < n_items; i++) {
        int s = (int)(i % MVB_STAGES);
        mbar_wait(&bar[s], (uint32_t)((i / MVB_STAGES) & 1));
        long ch = i % nch, e0 = ch * CE, ne = cols - e0 < CE ? cols - e0 : CE;
        const uint4 *st = (const uint4 *)(stw + (size_t)s * MVB_CHUNK);
        uint4 u[CE / 8 / 32];
#pragma unroll
        for (int k = 0; k < CE / 8 / 32; k++)
            u[k] = st[lane + 32 * k];
#pragma unroll
        for (int k = 0; k < CE / 8 / 32; k++) {
            long j = lane + 32 * k;
            if (j * 8 < ne) {
                float f[8];
                wtype<DT>::cvt(u[k], f);
                const float4 *xp = (const float4 *)(x + e0 + j * 8);
                float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
                acc = fmaf(f[0], x0.x, acc);
                acc = fmaf(f[1], x0.y, acc);
                acc = fmaf(f[2], x0.z, acc);
                acc = fmaf(f[3], x0.w, acc);
                acc = fmaf(f[4], x1.x, acc);
                acc = fmaf(f[5], x1.y, acc);
                acc = fmaf(f[6], x1.z, acc);
                acc = fmaf(f[7], x1.w, acc);
            }
        }
        __syncwarp();
        if (lane == 0 && i + MVB_STAGES < n_items)
            issue(i + MVB_STAGES, s);
        if (ch == nch - 1) {
            long row = first + (i / nch) * wstep;
            int m = (row >= set.r0[1]) + (row >= set.r0[2]);
            float v = warp_sum(acc);
            if (lane == 0)
                set.y[m][row - set.r0[m]] = v;
            acc = 0.0f;
        }
    }
}

/* Any shape or alignment: one warp per row, one element at a time. */
template <int DT>
__global__ void matvec_any_kernel(const void *__restrict__ w, long rows, long cols,
                                  const float *__restrict__ x, int n_tok, float *__restrict__ y)
{
    long row = (long)blockIdx.x * MV_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    for (int t = 0; t < n_tok; t++) {
        float acc = 0.0f;
        for (long i = lane; i < cols; i += 32)
            acc = fmaf(wtype<DT>::one(w, row * cols + i), x[(long)t * cols + i], acc);
        acc = warp_sum(acc);
        if (lane == 0)
            y[(long)t * rows + row] = acc;
    }
}

static int mv_vec_ok(int dt, long cols, const void *w, const float *x)
{
    int epv = dt == RP_CUDA_F32 ? 4 : 8;
    return cols % epv == 0 && cols % 4 == 0 && (uintptr_t)w % 16 == 0 && (uintptr_t)x % 16 == 0;
}

/* n <= 4 tokens over the stacked matrices of set (all vector-aligned). */
template <int DT> static void matvec_set(rp_cuda_ctx *c, const mv_set &set, long cols,
                                         const float *x, int n)
{
    if (DT != RP_CUDA_F32 && n == 1 && c->mvb > 0) {
        long need = (set.r0[3] + MVB_WARPS - 1) / MVB_WARPS, most = (long)c->mvb * c->sms;
        dim3 grid((unsigned)(need < most ? need : most)), block(MVB_WARPS * 32);
        size_t smem = (size_t)MVB_WARPS * MVB_STAGES * (MVB_CHUNK + sizeof(uint64_t));
        int pdl = c->pdl;
        LAUNCH(c, {
            void (*k)(mv_set, long, const float *) = matvec_bulk_kernel<DT>;
            CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = grid;
            cfg.blockDim = block;
            cfg.dynamicSmemBytes = smem;
            cfg.stream = c->stream;
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            cfg.attrs = at;
            cfg.numAttrs = pdl ? 1 : 0;
            CK(cudaLaunchKernelEx(&cfg, k, set, cols, x));
        });
        return;
    }
    dim3 grid((unsigned)((set.r0[3] + MV_WARPS - 1) / MV_WARPS)), block(MV_WARPS * 32);
    int u8 = c->mv_unroll == 8 && n == 1, u16 = c->mv_unroll == 16 && n == 1, pdl = c->pdl;
    LAUNCH(c, {
        if (u16)
            pdl_launch(pdl, matvec_kernel<DT, 1, 16>, grid, block, c->stream, set, cols, x);
        else if (u8)
            pdl_launch(pdl, matvec_kernel<DT, 1, 8>, grid, block, c->stream, set, cols, x);
        else
            switch (n) {
            case 1: pdl_launch(pdl, matvec_kernel<DT, 1, 4>, grid, block, c->stream, set, cols, x); break;
            case 2: pdl_launch(pdl, matvec_kernel<DT, 2, 4>, grid, block, c->stream, set, cols, x); break;
            case 3: pdl_launch(pdl, matvec_kernel<DT, 3, 4>, grid, block, c->stream, set, cols, x); break;
            default: pdl_launch(pdl, matvec_kernel<DT, 4, 4>, grid, block, c->stream, set, cols, x); break;
            }
        LAUNCHED();
    });
}

static void matvec_launch(rp_cuda_ctx *c, int dt, const mv_set &set, long cols, const float *x,
                          int n)
{
    if (dt == RP_CUDA_BF16)
        matvec_set<RP_CUDA_BF16>(c, set, cols, x, n);
    else if (dt == RP_CUDA_F16)
        matvec_set<RP_CUDA_F16>(c, set, cols, x, n);
    else
        matvec_set<RP_CUDA_F32>(c, set, cols, x, n);
}

static mv_set one_set(const void *w, long rows, float *y)
{
    mv_set s;
    memset(&s, 0, sizeof s);
    s.w[0] = (const uint4 *)w;
    s.y[0] = y;
    s.r0[0] = 0;
    s.r0[1] = rows;
    s.r0[2] = s.r0[3] = rows;
    return s;
}

template <int DT>
static void matvec(rp_cuda_ctx *c, const void *w, long rows, long cols, const float *x, int n,
                   float *y)
{
    if (!mv_vec_ok(DT, cols, w, x)) {
        dim3 grid((unsigned)((rows + MV_WARPS - 1) / MV_WARPS)), block(MV_WARPS * 32);
        LAUNCH(c, {
            matvec_any_kernel<DT><<<grid, block, 0, c->stream>>>(w, rows, cols, x, n, y);
            LAUNCHED();
        });
        return;
    }
    matvec_set<DT>(c, one_set(w, rows, y), cols, x, n);
}

/* ---- matmul: cuBLASLt --------------------------------------------------------------------- */

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f32(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ __half from_f32(float v) { return __float2half_rn(v); }

template <typename T> __global__ void round_kernel(const float *__restrict__ x, T *out, long n)
{
    pdl_wait(); /* (a no-op unless launched through pdl_launch) */
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        out[i] = from_f32<T>(x[i]);
}

static cudaDataType cuda_type(int dt)
{
    return dt == RP_CUDA_BF16 ? CUDA_R_16BF : dt == RP_CUDA_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* The GEMM y[n][rows] = x[n][cols] . W[rows][cols]^T in one of two column-major
 * orientations (cuBLASLt's kernels favour different ones for skinny shapes):
 *   0: C (rows x n, ld rows) = A^T B, A = W as cols x rows, B = x as cols x n: C is y itself;
 *   1: C (n x rows, ld n) = A^T B, A = x as cols x n, B = W as cols x rows: C is y transposed,
 *      written to scratch and transposed into y. */
typedef struct gemm_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
} gemm_plan;

static void plan_make(gemm_plan *p, int dt, int orient, long rows, long cols, int n)
{
    cudaDataType ab = cuda_type(dt);
    CKL(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CKL(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CKL(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    uint64_t m = orient ? (uint64_t)n : (uint64_t)rows, nn = orient ? (uint64_t)rows : (uint64_t)n;
    CKL(cublasLtMatrixLayoutCreate(&p->la, ab, (uint64_t)cols, m, (int64_t)cols));
    CKL(cublasLtMatrixLayoutCreate(&p->lb, ab, (uint64_t)cols, nn, (int64_t)cols));
    CKL(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, m, nn, (int64_t)m));
}

static void plan_free(gemm_plan *p)
{
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatmulDescDestroy(p->op);
}

/* t is [rows][n] (orientation 1's C), y is [n][rows]. */
__global__ void transpose_kernel(const float *__restrict__ t, float *__restrict__ y, long rows,
                                 int n)
{
    __shared__ float tile[32][33];
    long r0 = (long)blockIdx.x * 32;
    int n0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += 8) { /* read rows r0+i, tokens n0+tx */
        long r = r0 + i;
        int k = n0 + threadIdx.x;
        if (r < rows && k < n)
            tile[i][threadIdx.x] = t[r * n + k];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) { /* write tokens n0+i, rows r0+tx */
        int k = n0 + i;
        long r = r0 + threadIdx.x;
        if (r < rows && k < n)
            y[(long)k * rows + r] = tile[threadIdx.x][i];
    }
}

static cublasStatus_t gemm_run(rp_cuda_ctx *c, const gemm_plan *p, int orient,
                               const cublasLtMatmulAlgo_t *algo, const void *w, long rows,
                               const void *x, int n, float *y)
{
    float alpha = 1.0f, beta = 0.0f;
    if (!orient)
        return cublasLtMatmul(c->lt, p->op, &alpha, w, p->la, x, p->lb, &beta, y, p->lc, y,
                              p->lc, algo, c->ws, WS_BYTES, c->stream);
    float *t = (float *)grow(c, &c->tbuf, &c->tbuf_bytes, sizeof(float) * (size_t)n * rows);
    cublasStatus_t st = cublasLtMatmul(c->lt, p->op, &alpha, x, p->la, w, p->lb, &beta, t, p->lc,
                                       t, p->lc, algo, c->ws, WS_BYTES, c->stream);
    if (st == CUBLAS_STATUS_SUCCESS) {
        dim3 grid((unsigned)((rows + 31) / 32), (unsigned)((n + 31) / 32)), block(32, 8);
        transpose_kernel<<<grid, block, 0, c->stream>>>(t, y, rows, n);
        LAUNCHED();
    }
    return st;
}

/* First use of a shape: the heuristic's picks for both orientations, each timed on this
 * call's operands (the fastest run of two after a warm-up); the fastest is kept. */
static void gemm_tune(rp_cuda_ctx *c, algo_entry *a, int dt, const void *w, long rows, long cols,
                      const void *x, int n, float *y)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = INFINITY;
    for (int orient = 0; orient < 2; orient++) {
        gemm_plan p;
        plan_make(&p, dt, orient, rows, cols, n);
        cublasLtMatmulPreference_t pref;
        CKL(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = WS_BYTES;
        CKL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &ws, sizeof ws));
        cublasLtMatmulHeuristicResult_t res[16];
        int got = 0;
        if (cublasLtMatmulAlgoGetHeuristic(c->lt, p.op, p.la, p.lb, p.lc, p.lc, pref, 16, res,
                                           &got) != CUBLAS_STATUS_SUCCESS)
            got = 0;
        cublasLtMatmulPreferenceDestroy(pref);
        for (int i = 0; i < got; i++) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS)
                continue;
            float t_best = INFINITY;
            int ok = 1;
            for (int rep = 0; rep < 3 && ok; rep++) {
                float ms = 0;
                CK(cudaEventRecord(e0, c->stream));
                ok = gemm_run(c, &p, orient, &res[i].algo, w, rows, x, n, y) ==
                     CUBLAS_STATUS_SUCCESS;
                CK(cudaEventRecord(e1, c->stream));
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (rep > 0 && ms < t_best)
                    t_best = ms;
            }
            if (ok && t_best < best) {
                best = t_best;
                a->algo = res[i].algo;
                a->orient = orient;
                a->ok = 1;
            }
        }
        plan_free(&p);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    if (!a->ok) {
        fprintf(stderr, "cuBLASLt: no algorithm for %ld x %ld x %d (dtype %d)\n", rows, cols, n,
                dt);
        abort();
    }
}

static void gemm(rp_cuda_ctx *c, int dt, const void *w, long rows, long cols, const void *x,
                 int n, float *y)
{
    algo_entry *a = NULL;
    for (int i = 0; i < c->n_algos; i++) {
        algo_entry *e = &c->algos[i];
        if (e->dtype == dt && e->n == n && e->rows == rows && e->cols == cols) {
            a = e;
            break;
        }
    }
    if (!a) {
        a = &c->algos[c->n_algos < N_ALGOS ? c->n_algos++ : N_ALGOS - 1];
        a->dtype = dt, a->n = n, a->rows = rows, a->cols = cols, a->ok = 0;
        gemm_tune(c, a, dt, w, rows, cols, x, n, y);
    }
    gemm_plan p;
    plan_make(&p, dt, a->orient, rows, cols, n);
    CKL(gemm_run(c, &p, a->orient, &a->algo, w, rows, x, n, y));
    plan_free(&p);
}

/* ---- matmul: tensor-core skinny GEMM (5..64 tokens, 16-bit weights) ------------------------
 * Batched decode: y[t][r] = W[r] . x[t] for n <= 64 tokens, weights read once. x is rounded
 * to the weight's 16-bit type first (one small kernel). A block of 4 warps owns 128 rows;
 * each warp two 16-row tiles, against every token (n rounded up to 8-token tiles, the pad
 * tokens repeat the last one and are not stored). mma.sync m16n8k16 with f32 accumulators.
 * The dot product's order over k is free, so each lane loads 16-byte pieces of a row (and
 * the same pieces of x) and feeds each to two MMAs: in an iteration over k .. k + 32U, lane t
 * holds pieces p = tU + u (u < U), and for MMA j of piece u logical k 2t+e / 2t+8+e is
 * physical k + 8p + 4j + e / k + 8p + 4j + 2 + e, for A and B alike (the 4 lanes of a row
 * read 64U contiguous bytes per iteration: long runs per DRAM row). Grids with too
 * few row blocks split k (blockIdx.y); each split writes f32 partials and a second kernel
 * sums them in split order (deterministic). Both are launched with programmatic dependent
 * launch (see pdl_launch): the weight loads of the first k chunk are issued before waiting
 * for the previous kernel's output. */

typedef struct tc_args {
    const uint16_t *w[3];
    float *y[3];
    long r0[4]; /* stacked rows, as in mv_set (each matrix's rows a multiple of 16) */
    long cols;  /* a multiple of 64 */
    const uint16_t *x; /* [n][cols], 16-bit */
    int n, splits;
    long kspan; /* a multiple of 64 */
    float *part; /* [splits][n][r0[3]] when splits > 1 */
} tc_args;

template <int DT>
__device__ __forceinline__ void mma16816(float *d, const uint32_t *a, uint32_t b0, uint32_t b1)
{
    if (DT == RP_CUDA_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t u4w(const uint4 &v, int i)
{
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* stacked row -> (matrix, local row) */
__device__ __forceinline__ int tc_mat(const tc_args &a, long row)
{
    return (row >= a.r0[1]) + (row >= a.r0[2]);
}

/* One 32-wide k chunk of both MMAs (j) for the warp's tiles: w[mi][h] are the 16 bytes of
 * rows g / g+8, xv[nt] those of token g of each 8-token tile, at the same physical k. */
template <int DT, int NT, int MT>
__device__ __forceinline__ void tc_step(float (*acc)[NT][4], const uint4 (*w)[2], const uint4 *xv)
{
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
            uint32_t af[4] = {u4w(w[mi][0], 2 * j), u4w(w[mi][1], 2 * j), u4w(w[mi][0], 2 * j + 1),
                              u4w(w[mi][1], 2 * j + 1)};
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                mma16816<DT>(acc[mi][nt], af, u4w(xv[nt], 2 * j), u4w(xv[nt], 2 * j + 1));
        }
}

/* MT 16-row tiles per warp (MT = 1: fewer registers, more warps per SM), U chunks per
 * iteration; lane t of a row reads U consecutive 16-byte pieces (64 U
 * contiguous bytes per row and iteration across the row's 4 lanes). */
template <int DT, int NT, int U, int MT>
__global__ void __launch_bounds__(TC_WARPS * 32, MT == 1 ? 4 : 1) tc_gemm_kernel(tc_args a)
{
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    long R = a.r0[3], cols = a.cols;
    const uint4 *wp[MT][2];
    long trow[MT]; /* first stacked row of each tile, -1 past the end */
#pragma unroll
    for (int mi = 0; mi < MT; mi++) {
        long row = ((long)blockIdx.x * (TC_WARPS * MT) + warp * MT + mi) * 16;
        const uint16_t *base = a.w[0];
        trow[mi] = -1;
        if (row < R) {
            int m = tc_mat(a, row);
            base = a.w[m] + (row - a.r0[m]) * cols;
            trow[mi] = row;
        }
        wp[mi][0] = (const uint4 *)(base + (long)g * cols);
        wp[mi][1] = (const uint4 *)(base + (long)(g + 8) * cols);
    }
    const uint4 *xp[NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int tok = min(nt * 8 + g, a.n - 1);
        xp[nt] = (const uint4 *)(a.x + (long)tok * cols);
    }
    float acc[MT][NT][4];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[mi][nt][e] = 0.0f;
    long k = (long)blockIdx.y * a.kspan, k1 = min(k + a.kspan, cols);
    bool waited = false;
    for (; k + 32 * U <= k1; k += 32 * U) {
        long kv = k / 8 + t * U; /* this lane's first piece, in uint4 */
        uint4 wa[U][MT][2];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                wa[u][mi][0] = ld_stream(wp[mi][0] + kv + u);
                wa[u][mi][1] = ld_stream(wp[mi][1] + kv + u);
            }
        if (!waited) { /* weights are constant: only x waits for the previous kernel */
            pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            uint4 xv[NT];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                xv[nt] = __ldg(xp[nt] + kv + u);
            tc_step<DT, NT, MT>(acc, wa[u], xv);
        }
    }
    for (; k < k1; k += 32) { /* the split's last chunks: one piece per lane */
        long kv = k / 8 + t;
        uint4 wa[MT][2], xv[NT];
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
            wa[mi][0] = ld_stream(wp[mi][0] + kv);
            wa[mi][1] = ld_stream(wp[mi][1] + kv);
        }
        if (!waited) {
            pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            xv[nt] = __ldg(xp[nt] + kv);
        tc_step<DT, NT, MT>(acc, wa, xv);
    }
    if (a.splits == 1) {
#pragma unroll
        for (int mi = 0; mi < MT; mi++) {
            if (trow[mi] < 0)
                continue;
            int m = tc_mat(a, trow[mi]);
            long rows = a.r0[m + 1] - a.r0[m], lr = trow[mi] - a.r0[m];
            float *y = a.y[m];
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int tok = nt * 8 + 2 * t + (e & 1);
                    if (tok < a.n)
                        y[(long)tok * rows + lr + g + (e >> 1) * 8] = acc[mi][nt][e];
                }
        }
        return;
    }
    float *part = a.part + (long)blockIdx.y * a.n * R;
#pragma unroll
    for (int mi = 0; mi < MT; mi++) {
        if (trow[mi] < 0)
            continue;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int tok = nt * 8 + 2 * t + (e & 1);
                if (tok < a.n)
                    part[(long)tok * R + trow[mi] + g + (e >> 1) * 8] = acc[mi][nt][e];
            }
    }
}

/* y = the sum of the splits' partials, in split order (deterministic); 4 rows per thread
 * (a matrix's rows are a multiple of 16, so the 4 stay in one matrix). */
__global__ void tc_reduce_kernel(tc_args a)
{
    pdl_wait(); /* launched early (PDL): its ramp hides under the GEMM's tail */
    long R = a.r0[3], q = (long)blockIdx.x * blockDim.x + threadIdx.x, nq = R / 4 * a.n;
    if (q >= nq)
        return;
    int tok = (int)(q / (R / 4));
    long r = (q % (R / 4)) * 4;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int sp = 0; sp < a.splits; sp++) {
        float4 v = __ldcg((const float4 *)(a.part + ((long)sp * a.n + tok) * R + r));
        s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    int m = tc_mat(a, r);
    *(float4 *)(a.y[m] + (long)tok * (a.r0[m + 1] - a.r0[m]) + r - a.r0[m]) = s;
}

/* The shapes the kernel takes: 16-bit weights, rows multiples of 16, cols of 64, aligned. */
static int tc_ok(int dt, long rows, long cols, const void *w)
{
    return (dt == RP_CUDA_BF16 || dt == RP_CUDA_F16) && rows % 16 == 0 && rows >= 16 &&
           cols % 64 == 0 && (uintptr_t)w % 16 == 0;
}

/* x [n][cols] f32 -> the 16-bit scratch c->xh (queued), returned. */
static const uint16_t *tc_round(rp_cuda_ctx *c, int dt, const float *x, int n, long cols)
{
    long ne = (long)n * cols;
    void *xh = grow(c, &c->xh, &c->xh_bytes, (size_t)ne * 2);
    int blocks = (int)((ne + 255) / 256 < 4096 ? (ne + 255) / 256 : 4096);
    int pdl = c->pdl;
    LAUNCH(c, {
        if (dt == RP_CUDA_BF16)
            pdl_launch(pdl, round_kernel<__nv_bfloat16>, dim3(blocks), dim3(256), c->stream, x,
                       (__nv_bfloat16 *)xh, ne);
        else
            pdl_launch(pdl, round_kernel<__half>, dim3(blocks), dim3(256), c->stream, x,
                       (__half *)xh, ne);
        LAUNCHED();
    });
    return (const uint16_t *)xh;
}

/* the kernel for 8N-token tiles in variant v (see tc_launch_dt) */
template <int DT, int N>
static void tc_go(int v, int pdl, dim3 grid, dim3 block, cudaStream_t st, const tc_args &a)
{
    if constexpr (DT == RP_CUDA_F16) {
        pdl_launch(pdl, tc_gemm_kernel<DT, N, 2, 1>, grid, block, st, a);
    } else {
        switch (v) {
        case 1: pdl_launch(pdl, tc_gemm_kernel<DT, N, 2, 2>, grid, block, st, a); break;
        case 2: pdl_launch(pdl, tc_gemm_kernel<DT, N, 4, 2>, grid, block, st, a); break;
        case 3: pdl_launch(pdl, tc_gemm_kernel<DT, N, 4, 1>, grid, block, st, a); break;
        default: pdl_launch(pdl, tc_gemm_kernel<DT, N, 2, 1>, grid, block, st, a); break;
        }
    }
}

template <int DT> static void tc_launch_dt(rp_cuda_ctx *c, const tc_args &a, dim3 grid, int mt,
                                           int u)
{
    dim3 block(TC_WARPS * 32);
    int nt = (a.n + 7) / 8, pdl = c->pdl;
    long nq = a.r0[3] / 4 * a.n;
    unsigned rblocks = (unsigned)((nq + 255) / 256);
    int v = mt == 2 ? (u == 2 ? 1 : 2) : (u == 4 ? 3 : 0);
    LAUNCH(c, {
        switch (nt) {
        case 1: tc_go<DT, 1>(v, pdl, grid, block, c->stream, a); break;
        case 2: tc_go<DT, 2>(v, pdl, grid, block, c->stream, a); break;
        case 3: tc_go<DT, 3>(v, pdl, grid, block, c->stream, a); break;
        case 4: tc_go<DT, 4>(v, pdl, grid, block, c->stream, a); break;
        case 5: tc_go<DT, 5>(v, pdl, grid, block, c->stream, a); break;
        case 6: tc_go<DT, 6>(v, pdl, grid, block, c->stream, a); break;
        case 7: tc_go<DT, 7>(v, pdl, grid, block, c->stream, a); break;
        default: tc_go<DT, 8>(v, pdl, grid, block, c->stream, a); break;
        }
        if (a.splits > 1) /* waits (pdl_wait) for every split */
            pdl_launch(pdl, tc_reduce_kernel, dim3(rblocks), dim3(256), c->stream, a);
        LAUNCHED();
    });
}

/* ---- matmul: staged skinny GEMM (RAPID_CUDA_TC2 = N .. 64 tokens, default 5) --------------
 * A block of 4 warps owns TC2_BM = 128 stacked rows against every token (NT 8-token tiles).
 * The weights [128][64] and x [8 NT][64] of each 64-wide k step go global -> shared memory by
 * cp.async, TC2_STAGES - 1 steps in flight ahead of the one being multiplied (the bytes in
 * flight cost no registers). Rows of 128 bytes in shared memory, the 16-byte chunk c of row r
 * stored at chunk c ^ (r & 7): the copies and the ldmatrix reads touch 8 distinct bank
 * groups. Warp w multiplies rows 32w .. 32w + 31 (two 16-row tiles, A fragments by
 * ldmatrix.x4) against all the tokens (B fragments by ldmatrix.x4, two 8-token tiles each):
 * x is read from device memory once per block and from shared memory once per warp (the old
 * kernel read it from L1 once per 32 rows). mma.sync m16n8k16, f32 accumulators. Grids short
 * of 2 blocks per SM split k over a thread block cluster of up to 8 blocks (blockIdx.y = the
 * split = the block's rank in its cluster): each block leaves its f32 tile in its own shared
 * memory, and after a cluster barrier block q sums slice q of the tile over all ranks in rank
 * order through distributed shared memory (deterministic; no partials in device memory, no
 * second kernel). The weights of the first steps are requested before the programmatic
 * dependent launch wait, x's after it. */
enum { TC2_BM = 128, TC2_BK = 64, TC2_STAGES = 4, TC2_MAXSPLIT = 8, TC2_RS = TC2_BM + 4 };
/* shared memory per stage: weights 128 rows, x 16 * ceil(NT / 2) rows (ldmatrix.x4 pairs) */
#define TC2_XR(nt) (((nt) + 1) / 2 * 16)
#define TC2_SMEM(nt) (TC2_STAGES * (TC2_BM + TC2_XR(nt)) * 128)

__device__ __forceinline__ void tc2_ldsm4(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

template <int DT, int NT>
__global__ void __launch_bounds__(TC_WARPS * 32, 2) tc2_kernel(tc_args a)
{
    extern __shared__ __align__(128) unsigned char tc2_sm[];
    constexpr int XR = TC2_XR(NT), WB = TC2_BM * 128, SB = (TC2_BM + XR) * 128;
    constexpr int XI = (NT * 8 + 15) / 16; /* x rows per loading thread */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const long R = a.r0[3], cols = a.cols, row0 = (long)blockIdx.x * TC2_BM;
    const uint32_t sb = (uint32_t)__cvta_generic_to_shared(tc2_sm);
    /* loader: thread tid copies chunk lc of rows lr + 16 i */
    const int lc = tid & 7, lr = tid >> 3;
    const uint16_t *wsrc[8];
    int wbytes[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        long r = row0 + lr + 16 * i, rr = r < R ? r : R - 1;
        int m = tc_mat(a, rr);
        wsrc[i] = a.w[m] + (rr - a.r0[m]) * cols + lc * 8;
        wbytes[i] = r < R ? 16 : 0; /* rows past the end: zeros */
    }
    const uint16_t *xsrc[XI];
#pragma unroll
    for (int i = 0; i < XI; i++)
        xsrc[i] = a.x + (long)min(lr + 16 * i, a.n - 1) * cols + lc * 8;
    const long kb = (long)blockIdx.y * a.kspan, ke = min(kb + a.kspan, cols);
    const int nk = (int)((ke - kb) / TC2_BK);
    /* (macros, not lambdas: a lambda's by-reference capture would put the arrays in memory) */
#define TC2_LOAD_W(st, slot)                                                                   \
    do {                                                                                       \
        long k_ = kb + (long)(st) * TC2_BK;                                                    \
        uint32_t d_ = sb + (slot) * SB;                                                        \
        _Pragma("unroll") for (int i = 0; i < 8; i++)                                          \
            cp_async16(d_ + swz128_off(lr + 16 * i, lc), wsrc[i] + k_, wbytes[i]);             \
    } while (0)
#define TC2_LOAD_X(st, slot)                                                                   \
    do {                                                                                       \
        long k_ = kb + (long)(st) * TC2_BK;                                                    \
        uint32_t d_ = sb + (slot) * SB + WB;                                                   \
        _Pragma("unroll") for (int i = 0; i < XI; i++)                                         \
            if (lr + 16 * i < NT * 8)                                                          \
                cp_async16(d_ + swz128_off(lr + 16 * i, lc), xsrc[i] + k_, 16);                \
    } while (0)
    /* the weights never change: only x waits for the previous kernel */
    stage_fill<TC2_STAGES>(
        nk, [&](int st) { TC2_LOAD_W(st, st); }, [&](int st) { TC2_LOAD_X(st, st); });
    float acc[2][NT][4];
    acc_zero<NT>(acc);
    const int ar = warp * 32 + (lane & 15), ach = lane >> 4;          /* A: rows, chunk */
    const int br = (lane & 7) + ((lane >> 4) << 3), bch = (lane >> 3) & 1; /* B: tokens, chunk */
    for (int it = 0; it < nk; it++) {
        cp_async_wait<TC2_STAGES - 2>(); /* step it has landed (this thread's copies) */
        __syncthreads();            /* everyone's; and step it - 1's slot is free */
        int nx = it + TC2_STAGES - 1;
        if (nx < nk) {
            TC2_LOAD_W(nx, nx % TC2_STAGES);
            TC2_LOAD_X(nx, nx % TC2_STAGES);
        }
        cp_async_commit();
        const uint32_t ws = sb + (it % TC2_STAGES) * SB, xs = ws + WB;
#pragma unroll
        for (int kk = 0; kk < TC2_BK / 16; kk++) {
            uint32_t af[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
                tc2_ldsm4(af[mi], ws + swz128_off(ar + mi * 16, kk * 2 + ach));
#pragma unroll
            for (int p = 0; p < (NT + 1) / 2; p++) {
                uint32_t bf[4];
                tc2_ldsm4(bf, xs + swz128_off(p * 16 + br, kk * 2 + bch));
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    mma16816<DT>(acc[mi][2 * p], af[mi], bf[0], bf[1]);
                    if (2 * p + 1 < NT)
                        mma16816<DT>(acc[mi][2 * p + 1], af[mi], bf[2], bf[3]);
                }
            }
        }
    }
#undef TC2_LOAD_W
#undef TC2_LOAD_X
    cp_async_wait<0>();
    /* split k: each block's tile [tokens][rows] (row stride TC2_RS) in its shared memory */
    skinny_epilogue<NT, TC2_BM, TC2_RS, TC_WARPS * 32, 4>(acc, a.r0, a.y, a.n, row0,
                                                          (float *)tc2_sm);
}

template <int DT, int NT>
static void tc2_go(int pdl, dim3 grid, cudaStream_t st, const tc_args &a)
{
    cluster_launch(pdl, tc2_kernel<DT, NT>, grid, dim3(TC_WARPS * 32), TC2_SMEM(NT), st, a);
}

template <int DT> static void tc2_attr_dt()
{
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(1)));
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(2)));
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(3)));
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(4)));
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 5>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(5)));
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 6>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(6)));
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 7>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(7)));
    CK(cudaFuncSetAttribute(tc2_kernel<DT, 8>, cudaFuncAttributeMaxDynamicSharedMemorySize, TC2_SMEM(8)));
}

template <int DT> static void tc2_launch_dt(rp_cuda_ctx *c, const tc_args &a, dim3 grid)
{
    int nt = (a.n + 7) / 8, pdl = c->pdl;
    LAUNCH(c, {
        switch (nt) {
        case 1: tc2_go<DT, 1>(pdl, grid, c->stream, a); break;
        case 2: tc2_go<DT, 2>(pdl, grid, c->stream, a); break;
        case 3: tc2_go<DT, 3>(pdl, grid, c->stream, a); break;
        case 4: tc2_go<DT, 4>(pdl, grid, c->stream, a); break;
        case 5: tc2_go<DT, 5>(pdl, grid, c->stream, a); break;
        case 6: tc2_go<DT, 6>(pdl, grid, c->stream, a); break;
        case 7: tc2_go<DT, 7>(pdl, grid, c->stream, a); break;
        default: tc2_go<DT, 8>(pdl, grid, c->stream, a); break;
        }
        LAUNCHED();
    });
}

/* The staged kernel's grid: 128-row blocks, k split over a cluster (<= 8) only where the row
 * blocks leave more than half of the 2-blocks-per-SM slots empty, into whole 64-wide steps of
 * at least 4 each, never past one wave. */
static long tc2_split(const rp_cuda_ctx *c, tc_args &a, long smax = TC2_MAXSPLIT)
{
    long rb = (a.r0[3] + TC2_BM - 1) / TC2_BM, slots = 2L * c->sms;
    long s = 2 * rb <= slots ? slots / rb : 1;
    if (s > smax)
        s = smax;
    if (s > a.cols / (4 * TC2_BK))
        s = a.cols / (4 * TC2_BK);
    if (s < 1)
        s = 1;
    a.kspan = ((a.cols + s - 1) / s + TC2_BK - 1) / TC2_BK * TC2_BK;
    a.splits = (int)((a.cols + a.kspan - 1) / a.kspan);
    return rb;
}

static void tc2_gemm(rp_cuda_ctx *c, int dt, tc_args &a)
{
    if (!c->tc2_attr) {
        tc2_attr_dt<RP_CUDA_BF16>();
        tc2_attr_dt<RP_CUDA_F16>();
        c->tc2_attr = 1;
    }
    unsigned rb = (unsigned)tc2_split(c, a); /* sets a.splits: before the grid reads it */
    dim3 grid(rb, (unsigned)a.splits);
    if (dt == RP_CUDA_BF16)
        tc2_launch_dt<RP_CUDA_BF16>(c, a, grid);
    else
        tc2_launch_dt<RP_CUDA_F16>(c, a, grid);
}

/* The wgmma kernel's split of k (its blocks: 128 rows, or 256 with RAPID_CUDA_WG_BM=256).
 * RAPID_CUDA_WG_SPLIT=S (1..8): tc2's rule with at most S splits. Default (0): by the
 * clusters that fit on the GPU at once (cudaOccupancyMaxActiveClusters per token tile and
 * cluster size, read at the first call): the split s of at most 8 (at least 4 k steps each)
 * that minimises waves x k steps per block, waves = ceil(row blocks / clusters resident at
 * once), ties to the smaller s. */
static long wg_split(rp_cuda_ctx *c, tc_args &a)
{
    long bm = (long)RP_WG_BM * c->wg_g, rb = (a.r0[3] + bm - 1) / bm, steps = a.cols / RP_WG_BK;
    long slots = (3L - c->wg_g) * c->sms, best = 1; /* 2 blocks of 128 rows per SM, 1 of 256 */
    if (c->wg_split > 0) { /* tc2's rule */
        best = 2 * rb <= slots ? slots / rb : 1;
        best = best > c->wg_split ? c->wg_split : best;
        best = best > steps / 4 ? steps / 4 : best;
        best = best < 1 ? 1 : best;
    } else {
        const int *cl = c->wg_cl[(a.n + 7) / 8 - 1];
        long best_cost = -1;
        for (long s = 1; s <= RP_WG_MAXSPLIT && (s == 1 || steps / s >= 4); s++) {
            long cap = cl[s] > 0 ? cl[s] : slots / s; /* 0: the query failed */
            long cost = (rb + cap - 1) / cap * ((steps + s - 1) / s);
            if (best_cost < 0 || cost < best_cost)
                best = s, best_cost = cost;
        }
    }
    a.kspan = ((a.cols + best - 1) / best + RP_WG_BK - 1) / RP_WG_BK * RP_WG_BK;
    a.splits = (int)((a.cols + a.kspan - 1) / a.kspan);
    return rb;
}

/* The wgmma kernel (cuda_wgmma.cu, sm_90 only): tc2's blocks of 128 rows, split k above. */
static void wg_gemm(rp_cuda_ctx *c, int dt, tc_args &a)
{
    static_assert((int)RP_WG_BM == (int)TC2_BM && (int)RP_WG_BK == (int)TC2_BK &&
                      (int)RP_WG_MAXSPLIT == (int)TC2_MAXSPLIT,
                  "the wgmma kernel takes tc2's grid");
    if (!c->wg_attr) {
        rp_cuda_wg_setup(c->wg_g, c->sms, c->wg_cl);
        c->wg_attr = 1;
    }
    unsigned rb = (unsigned)wg_split(c, a), ns = (unsigned)a.splits;
    int g = c->wg_g;
    rp_wg_args w;
    memset(&w, 0, sizeof w);
    for (int i = 0; i < 3; i++)
        w.w[i] = a.w[i], w.y[i] = a.y[i];
    memcpy(w.r0, a.r0, sizeof w.r0);
    w.cols = a.cols;
    w.x = a.x;
    w.n = a.n;
    w.kspan = a.kspan;
    int pdl = c->pdl;
    LAUNCH(c, {
        rp_cuda_wg_launch(w, dt, g, rb, ns, pdl, c->stream);
        LAUNCHED();
    });
}

/* n matrices (n <= 3, stacked as in mv_set) over the same x: one conversion, one launch. */
static void tc_gemm(rp_cuda_ctx *c, int dt, int n_mat, const void *const *w, const long *rows,
                    long cols, const float *x, int n, float *const *y)
{
    tc_args a;
    memset(&a, 0, sizeof a);
    long r = 0;
    for (int i = 0; i < 3; i++) {
        a.r0[i] = r;
        if (i < n_mat) {
            a.w[i] = (const uint16_t *)w[i];
            a.y[i] = y[i];
            r += rows[i];
        }
    }
    a.r0[3] = r;
    for (int i = n_mat; i < 3; i++)
        a.r0[i] = r;
    a.cols = cols;
    a.n = n;
    a.x = tc_round(c, dt, x, n, cols);
    if (c->wg_min > 0 && n >= c->wg_min) {
        wg_gemm(c, dt, a);
        return;
    }
    if (c->tc2_min > 0 && n >= c->tc2_min) {
        tc2_gemm(c, dt, a);
        return;
    }
    /* f16 weights have one kernel variant (one tile per warp, 2 pieces): the grid must be
     * sized for it (sizing it by the bf16 knob left half of the rows unwritten) */
    int f16 = dt == RP_CUDA_F16, mt = f16 ? 1 : c->tc_mt, u = f16 ? 2 : c->tc_u;
    long rows_blk = TC_WARPS * 16L * mt;
    long rb = (r + rows_blk - 1) / rows_blk, target = (mt == 1 ? 6L : 3L) * c->sms;
    long s = 2 * rb < target ? (target + rb - 1) / rb : 1, smax = cols / 256; /* split only
                                                     * grids far from filling the GPU */
    if (s > smax)
        s = smax;
    if (s < 1)
        s = 1;
    a.kspan = ((cols + s - 1) / s + 63) / 64 * 64;
    a.splits = (int)((cols + a.kspan - 1) / a.kspan);
    if (a.splits > 1)
        a.part = (float *)grow(c, (void **)&c->tc_part, &c->tc_part_bytes,
                               sizeof(float) * (size_t)a.splits * n * r);
    dim3 grid((unsigned)rb, (unsigned)a.splits);
    if (dt == RP_CUDA_BF16)
        tc_launch_dt<RP_CUDA_BF16>(c, a, grid, mt, u);
    else
        tc_launch_dt<RP_CUDA_F16>(c, a, grid, mt, u);
}

/* ---- sampler: greedy argmax on the GPU ----------------------------------------------------- */

/* One block per row: the largest value, the lowest index among equals (as the CPU's loop). */
__global__ void argmax_kernel(const float *__restrict__ x, long n, int vec, int32_t *out)
{
    const float *r = x + (long)blockIdx.x * n;
    float best = -INFINITY;
    int bi = INT_MAX;
    if (vec) {
        const float4 *r4 = (const float4 *)r;
        for (long i = threadIdx.x; i < n / 4; i += blockDim.x) {
            float4 v = r4[i];
            float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int k = 0; k < 4; k++)
                if (bi == INT_MAX || e[k] > best)
                    best = e[k], bi = (int)(4 * i + k);
        }
    } else {
        for (long i = threadIdx.x; i < n; i += blockDim.x)
            if (bi == INT_MAX || r[i] > best)
                best = r[i], bi = (int)i;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ob = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != INT_MAX && (bi == INT_MAX || ob > best || (ob == best && oi < bi)))
            best = ob, bi = oi;
    }
    __shared__ float sb[32];
    __shared__ int si[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    if (lane == 0)
        sb[wid] = best, si[wid] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < nw; w++)
            if (si[w] != INT_MAX && (bi == INT_MAX || sb[w] > best || (sb[w] == best && si[w] < bi)))
                best = sb[w], bi = si[w];
        out[blockIdx.x] = bi == INT_MAX ? 0 : bi;
    }
}

/* the id buffers hold n_rows */
static void ids_reserve(rp_cuda_ctx *c, int n_rows)
{
    if (n_rows <= c->ids_cap)
        return;
    rec_break(c);
    CK(cudaStreamSynchronize(c->stream));
    cudaFreeHost(c->ids_host);
    cudaFree(c->ids_dev);
    c->ids_cap = n_rows < 1024 ? 1024 : n_rows;
    CK(cudaMallocHost((void **)&c->ids_host, sizeof(int32_t) * c->ids_cap));
    CK(cudaMalloc((void **)&c->ids_dev, sizeof(int32_t) * c->ids_cap));
}

/* The ids on the device back to out (synchronous), the recorded step replayed first. */
static void ids_finish(rp_cuda_ctx *c, int n_rows, int32_t *out)
{
    rec_finish(c);
    CK(cudaStreamSynchronize(c->stream));
    memcpy(out, c->ids_host, sizeof(int32_t) * n_rows);
    c->ring_off = 0;
    step_timed(c);
}

extern "C" void rp_cuda_sample(rp_cuda_ctx *c, const float *x, int n_rows, long n,
                               const rp_sample_row *p, int32_t *out)
{
    prof_scope ps(c, P_SAMPLE);
    ids_reserve(c, n_rows);
    /* the rows' parameters through the staging ring: the same device address for the same
     * step, so a decode step with sampling stays one graph */
    const rp_sample_row *pd = (const rp_sample_row *)stage(c, p, sizeof *p * (size_t)n_rows);
    int32_t *d = c->ids_dev, *h = c->ids_host;
    LAUNCH(c, {
        rp_cuda_sample_launch(c->stream, x, n_rows, n, pd, d);
        LAUNCHED();
        CK(cudaMemcpyAsync(h, d, sizeof(int32_t) * n_rows, cudaMemcpyDeviceToHost, c->stream));
    });
    ids_finish(c, n_rows, out);
}

extern "C" void rp_cuda_argmax(rp_cuda_ctx *c, const float *x, int n_rows, long n, int32_t *out)
{
    prof_scope ps(c, P_SAMPLE);
    ids_reserve(c, n_rows);
    int vec = n % 4 == 0 && (uintptr_t)x % 16 == 0;
    int32_t *d = c->ids_dev, *h = c->ids_host;
    LAUNCH(c, {
        argmax_kernel<<<n_rows, 1024, 0, c->stream>>>(x, n, vec, d);
        LAUNCHED();
        CK(cudaMemcpyAsync(h, d, sizeof(int32_t) * n_rows, cudaMemcpyDeviceToHost, c->stream));
    });
    ids_finish(c, n_rows, out);
}

extern "C" void rp_cuda_matmul(rp_cuda_ctx *c, int dt, const void *w, long rows, long cols,
                               const float *x, int n, float *y)
{
    if (n == 1 && mv1_defer(c, dt, one_set(w, rows, y), cols, x))
        return;
    int aligned = cols % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)w % 16 == 0;
    if (n > 4 && n <= TC_MAXN && tc_ok(dt, rows, cols, w) && (uintptr_t)y % 16 == 0) {
        prof_scope ps(c, P_TCGEMM);
        tc_gemm(c, dt, 1, &w, &rows, cols, x, n, &y);
        return;
    }
    /* Fewer than 16 rows (a mixture of experts' router) go through the matvec, whose x stays
     * f32 as on the CPU: top-k routing is discontinuous, and bf16-rounded router inputs pick
     * other experts than the CPU does on near ties. */
    prof_scope ps(c, n > 4 && rows >= 16 ? P_GEMM : P_MATVEC);
    if (n > 4 && aligned && rows >= 16) {
        rec_break(c); /* cuBLASLt (and its first-use tuning) stays out of graphs */
        if (dt == RP_CUDA_F32) {
            gemm(c, dt, w, rows, cols, x, n, y);
            return;
        }
        long ne = (long)n * cols;
        void *xh = grow(c, &c->xh, &c->xh_bytes, (size_t)ne * 2);
        int blocks = (int)((ne + 255) / 256 < 4096 ? (ne + 255) / 256 : 4096);
        if (dt == RP_CUDA_BF16)
            round_kernel<__nv_bfloat16><<<blocks, 256, 0, c->stream>>>(x, (__nv_bfloat16 *)xh, ne);
        else
            round_kernel<__half><<<blocks, 256, 0, c->stream>>>(x, (__half *)xh, ne);
        LAUNCHED();
        gemm(c, dt, w, rows, cols, xh, n, y);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += 4) {
        int nt = n - t0 < 4 ? n - t0 : 4;
        const float *xt = x + (long)t0 * cols;
        float *yt = y + (long)t0 * rows;
        if (dt == RP_CUDA_BF16)
            matvec<RP_CUDA_BF16>(c, w, rows, cols, xt, nt, yt);
        else if (dt == RP_CUDA_F16)
            matvec<RP_CUDA_F16>(c, w, rows, cols, xt, nt, yt);
        else
            matvec<RP_CUDA_F32>(c, w, rows, cols, xt, nt, yt);
    }
}

extern "C" void rp_cuda_matmul_n(rp_cuda_ctx *c, int n, const int *dt, const void *const *w,
                                 const long *rows, long cols, const float *x, int n_tok,
                                 float *const *y)
{
    int tc = n_tok > 4 && n_tok <= TC_MAXN && n <= 3;
    for (int i = 0; i < n && tc; i++)
        tc = dt[i] == dt[0] && tc_ok(dt[i], rows[i], cols, w[i]) && (uintptr_t)y[i] % 16 == 0;
    if (tc) {
        prof_scope ps(c, P_TCGEMM);
        tc_gemm(c, dt[0], n, w, rows, cols, x, n_tok, y);
        return;
    }
    int fuse = n_tok <= 4 && n <= 3;
    for (int i = 0; i < n && fuse; i++)
        fuse = dt[i] == dt[0] && mv_vec_ok(dt[i], cols, w[i], x);
    if (!fuse) {
        for (int i = 0; i < n; i++)
            rp_cuda_matmul(c, dt[i], w[i], rows[i], cols, x, n_tok, y[i]);
        return;
    }
    mv_set s;
    memset(&s, 0, sizeof s);
    long r = 0;
    for (int i = 0; i < 3; i++) {
        s.r0[i] = r;
        if (i < n) {
            s.w[i] = (const uint4 *)w[i];
            s.y[i] = y[i];
            r += rows[i];
        }
    }
    s.r0[3] = r;
    for (int i = n; i < 3; i++)
        s.r0[i] = r; /* empty matrices: no row maps to them */
    if (n_tok == 1 && mv1_defer(c, dt[0], s, cols, x))
        return;
    prof_scope ps(c, P_MATVEC);
    matvec_launch(c, dt[0], s, cols, x, n_tok);
}

/* ---- norms, rope, elementwise -------------------------------------------------------------- */

__device__ float block_sum(float v, float *red)
{
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    v = warp_sum(v);
    __syncthreads(); /* red may be in use by a previous reduction */
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++)
        s += red[i];
    return s;
}

__device__ float block_max(float v, float *red)
{
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[wid] = v;
    __syncthreads();
    float s = -INFINITY;
    for (int i = 0; i < nw; i++)
        s = fmaxf(s, red[i]);
    return s;
}

__global__ void rmsnorm_kernel(float *out, const float *x, const float *w, int dim, float eps,
                               int add_one)
{
    pdl_wait();
    __shared__ float red[32];
    const float *xr = x + (long)blockIdx.x * dim;
    float *orow = out + (long)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i] * inv;
        if (w)
            v = add_one ? v * (1.0f + w[i]) : v * w[i];
        orow[i] = v;
    }
}

/* dim a multiple of 4, rows 16-byte aligned: one float4 per thread per step */
__global__ void rmsnorm4_kernel(float *out, const float *x, const float *w, int dim, float eps,
                                int add_one)
{
    pdl_wait();
    __shared__ float red[32];
    const float4 *xr = (const float4 *)(x + (long)blockIdx.x * dim);
    float4 *orow = (float4 *)(out + (long)blockIdx.x * dim);
    int n4 = dim / 4;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = xr[i];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = xr[i];
        v.x *= inv, v.y *= inv, v.z *= inv, v.w *= inv;
        if (w) {
            float4 g = ((const float4 *)w)[i];
            if (add_one)
                g.x += 1.0f, g.y += 1.0f, g.z += 1.0f, g.w += 1.0f;
            v.x *= g.x, v.y *= g.y, v.z *= g.z, v.w *= g.w;
        }
        orow[i] = v;
    }
}

/* x += a, then out = rmsnorm(x) (the residual add of one block and the norm of the next) */
__global__ void add_rmsnorm4_kernel(float *out, float *x, const float *a, const float *w, int dim,
                                    float eps, int add_one)
{
    pdl_wait();
    __shared__ float red[32];
    float4 *xr = (float4 *)(x + (long)blockIdx.x * dim);
    const float4 *ar = (const float4 *)(a + (long)blockIdx.x * dim);
    float4 *orow = (float4 *)(out + (long)blockIdx.x * dim);
    int n4 = dim / 4;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = xr[i], d = ar[i];
        v.x += d.x, v.y += d.y, v.z += d.z, v.w += d.w;
        xr[i] = v;
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = xr[i]; /* this thread's own store */
        v.x *= inv, v.y *= inv, v.z *= inv, v.w *= inv;
        if (w) {
            float4 g = ((const float4 *)w)[i];
            if (add_one)
                g.x += 1.0f, g.y += 1.0f, g.z += 1.0f, g.w += 1.0f;
            v.x *= g.x, v.y *= g.y, v.z *= g.z, v.w *= g.w;
        }
        orow[i] = v;
    }
}

static void norm_launch(rp_cuda_ctx *c, float *out, const float *x, const float *w, int n_rows,
                        int dim, float eps, int add_one, int vec);

extern "C" void rp_cuda_rmsnorm(rp_cuda_ctx *c, float *out, const float *x, const float *w,
                                int n_rows, int dim, float eps, int add_one)
{
    prof_scope ps(c, P_NORM, 0);
    int pdl = c->pdl_small;
    int vec = dim % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)out % 16 == 0 &&
              (uintptr_t)w % 16 == 0;
    pend_op *pd = c->pend;
    if (pd->kind == PEND_ADD && vec && pd->y == x && pd->n == (long)n_rows * dim &&
        (uintptr_t)pd->x % 16 == 0) { /* residual add + norm: one kernel (out may be the
                                        * added tensor: each element is read, then written,
                                        * by the same thread) */
        pd->kind = PEND_NONE;
        float *xy = pd->y;
        const float *a = pd->x;
        int n4 = dim / 4, threads = n4 >= 1024 ? 1024 : n4 >= 256 ? 256 : n4 >= 64 ? 64 : 32;
        LAUNCH(c, {
            pdl_launch(pdl, add_rmsnorm4_kernel, dim3(n_rows), dim3(threads), c->stream, out, xy,
                       a, w, dim, eps, add_one);
            LAUNCHED();
        });
        return;
    }
    pend_flush(c);
    if (vec && n_rows == 1 && c->mv1 && !pd->off && dim % 8 == 0 && dim <= MV1_MAXC) {
        pd->kind = PEND_NORM; /* a following one-token matvec of out takes it in (mv1_kernel) */
        pd->y = out;
        pd->x = x;
        pd->x2 = w;
        pd->n = dim;
        pd->eps = eps;
        pd->add_one = add_one;
        return;
    }
    norm_launch(c, out, x, w, n_rows, dim, eps, add_one, vec);
}

static void norm_launch(rp_cuda_ctx *c, float *out, const float *x, const float *w, int n_rows,
                        int dim, float eps, int add_one, int vec)
{
    int pdl = c->pdl_small;
    if (vec) {
        int n4 = dim / 4, threads = n4 >= 1024 ? 1024 : n4 >= 256 ? 256 : n4 >= 64 ? 64 : 32;
        LAUNCH(c, {
            pdl_launch(pdl, rmsnorm4_kernel, dim3(n_rows), dim3(threads), c->stream, out, x, w,
                       dim, eps, add_one);
            LAUNCHED();
        });
    } else {
        int threads = dim >= 1024 ? 512 : dim >= 256 ? 256 : dim >= 128 ? 128 : 64;
        LAUNCH(c, {
            pdl_launch(pdl, rmsnorm_kernel, dim3(n_rows), dim3(threads), c->stream, out, x, w, dim,
                       eps, add_one);
            LAUNCHED();
        });
    }
    LAUNCHED();
}

/* x1 [n_tok][h1][head_dim] and x2 [n_tok][h2][head_dim] (h2 may be 0): q and k in one launch */
__global__ void rope_kernel(float *x1, int h1, float *x2, int h2, int head_dim, int half,
                            const rp_cuda_tok *toks, const int32_t *pos, const float *inv,
                            float attn_factor, int neox)
{
    int t = blockIdx.x;
    int p = pos ? pos[t] : toks[t].pos;
    for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < (h1 + h2) * half;
         idx += gridDim.y * blockDim.x) {
        int h = idx / half, i = idx % half;
        float ang = (float)p * inv[i];
        float cs = cosf(ang) * attn_factor, sn = sinf(ang) * attn_factor;
        float *v = h < h1 ? x1 + ((long)t * h1 + h) * head_dim
                          : x2 + ((long)t * h2 + h - h1) * head_dim;
        int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
        float a = v[ia], b = v[ib];
        v[ia] = a * cs - b * sn;
        v[ib] = b * cs + a * sn;
    }
}

static void rope_launch(rp_cuda_ctx *c, float *x1, int h1, float *x2, int h2, int n_tok,
                        int head_dim, int half, const int32_t *pos_dev, float attn_factor,
                        int neox)
{
    int threads = 128, per_tok = ((h1 + h2) * half + threads - 1) / threads;
    const rp_cuda_tok *td = c->tok_dev;
    const float *inv = c->inv_dev;
    LAUNCH(c, {
        rope_kernel<<<dim3((unsigned)n_tok, (unsigned)per_tok), threads, 0, c->stream>>>(
            x1, h1, x2, h2, head_dim, half, td, pos_dev, inv, attn_factor, neox);
        LAUNCHED();
    });
}

extern "C" void rp_cuda_rope(rp_cuda_ctx *c, float *x, int n_tok, int n_heads, int head_dim,
                             int rot_dim, const int32_t *pos, const float *inv_freq,
                             float attn_factor, int neox)
{
    prof_scope ps(c, P_ROPE, 0);
    int half = rot_dim / 2;
    if (half != c->n_inv || memcmp(inv_freq, c->inv_host, sizeof(float) * half) != 0) {
        pend_flush(c); /* a deferred rope holds the old buffer */
        rec_break(c); /* recorded ropes hold the old buffer */
        CK(cudaStreamSynchronize(c->stream)); /* rare: a new context length or first call */
        rp_free(c->inv_host);
        cudaFree(c->inv_dev);
        c->inv_host = (float *)rp_alloc(sizeof(float) * (half ? half : 1));
        CK(cudaMalloc((void **)&c->inv_dev, sizeof(float) * (half ? half : 1)));
        if (!c->inv_host) {
            fprintf(stderr, "cuda: out of host memory\n");
            abort();
        }
        memcpy(c->inv_host, inv_freq, sizeof(float) * half);
        /* from inv_host, which stays until the next change (which synchronises first) */
        CK(cudaMemcpyAsync(c->inv_dev, c->inv_host, sizeof(float) * half, cudaMemcpyHostToDevice,
                           c->stream));
        c->n_inv = half;
    }
    const int32_t *pos_dev = NULL;
    if (!(n_tok == c->n_tok && c->pos_host &&
          memcmp(pos, c->pos_host, sizeof(int32_t) * n_tok) == 0))
        pos_dev = (const int32_t *)stage(c, pos, sizeof(int32_t) * n_tok);
    pend_op *pd = c->pend;
    if (pd->kind == PEND_ROPE && pd->n_tok == n_tok && pd->head_dim == head_dim &&
        pd->half == half && pd->pos == pos_dev && pd->attn_factor == attn_factor &&
        pd->neox == neox && pd->y != x) { /* q then k: one launch, held for the KV store
                                            * (which then rotates k as it stores it) */
        if (c->kvrope) {
            pd->kind = PEND_ROPE2;
            pd->y2 = x;
            pd->heads2 = n_heads;
            return;
        }
        pd->kind = PEND_NONE;
        rope_launch(c, pd->y, pd->heads, x, n_heads, n_tok, head_dim, half, pos_dev,
                    attn_factor, neox);
        return;
    }
    pend_flush(c);
    if (pd->off) {
        rope_launch(c, x, n_heads, NULL, 0, n_tok, head_dim, half, pos_dev, attn_factor, neox);
        return;
    }
    pd->kind = PEND_ROPE;
    pd->y = x;
    pd->heads = n_heads;
    pd->n_tok = n_tok;
    pd->head_dim = head_dim;
    pd->half = half;
    pd->pos = pos_dev;
    pd->attn_factor = attn_factor;
    pd->neox = neox;
}

__global__ void silu_mul_kernel(float *out, const float *g, const float *u, long n)
{
    pdl_wait();
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

__global__ void add_kernel(float *y, const float *x, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        y[i] += x[i];
}

__global__ void add_bias_kernel(float *y, const float *b, int dim, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        y[i] += b[i % dim];
}

static int ew_blocks(rp_cuda_ctx *c, long n)
{
    long b = (n + 255) / 256, cap = (long)c->sms * 8;
    return (int)(b < cap ? (b > 0 ? b : 1) : cap);
}

static void silu_launch(rp_cuda_ctx *c, float *out, const float *g, const float *u, long n);

extern "C" void rp_cuda_silu_mul(rp_cuda_ctx *c, float *out, const float *g, const float *u,
                                 int64_t n)
{
    prof_scope ps(c, P_ELEM);
    if (c->mv1 && !c->pend->off && n % 8 == 0 && n <= MV1_MAXC && (uintptr_t)out % 16 == 0 &&
        (uintptr_t)g % 16 == 0 && (uintptr_t)u % 16 == 0) {
        c->pend->kind = PEND_SILU; /* a following one-token matvec of out takes it in */
        c->pend->y = out;
        c->pend->x = g;
        c->pend->x2 = u;
        c->pend->n = (long)n;
        return;
    }
    silu_launch(c, out, g, u, (long)n);
}

static void silu_launch(rp_cuda_ctx *c, float *out, const float *g, const float *u, long n)
{
    int nb = ew_blocks(c, n), pdl = c->pdl_small;
    LAUNCH(c, {
        pdl_launch(pdl, silu_mul_kernel, dim3(nb), dim3(256), c->stream, out, g, u, (long)n);
        LAUNCHED();
    });
}

static void add_launch(rp_cuda_ctx *c, float *y, const float *x, long n)
{
    int nb = ew_blocks(c, n);
    LAUNCH(c, {
        add_kernel<<<nb, 256, 0, c->stream>>>(y, x, n);
        LAUNCHED();
    });
}

extern "C" void rp_cuda_add(rp_cuda_ctx *c, float *y, const float *x, int64_t n)
{
    if (pend_take_add(c, y, x, (long)n)) { /* into the deferred matvec's epilogue */
        prof_scope ps(c, P_ELEM, 2);
        return;
    }
    prof_scope ps(c, P_ELEM); /* flushes the deferred op */
    if (c->pend->off) {
        add_launch(c, y, x, n);
        return;
    }
    c->pend->kind = PEND_ADD; /* a following rmsnorm of y takes it in */
    c->pend->y = y;
    c->pend->x = x;
    c->pend->n = n;
}

/* ---- deferred ops --------------------------------------------------------------------------
 * A residual add and a RoPE are held back one op: an rmsnorm of the added tensor right after
 * the add runs both in one kernel (add_rmsnorm4_kernel), and a RoPE right after a RoPE with
 * the same positions (q, then k) runs both in one launch; that pair is held again
 * (PEND_ROPE2) and a KV store of the rotated k right after it runs all three in one kernel
 * (rope_kv_kernel). A one-token rmsnorm (PEND_NORM) or silu_mul (PEND_SILU) is held for the
 * one-token matvec of its output (pend_take_pro: computed in the prologue of mv1_kernel, or of
 * the MLX qmv2_kernel through rp_cuda_hook_take_pro), and such a matvec is held itself
 * (PEND_MV; PEND_QMV for the quantized one, its launcher and args through rp_cuda_hook_defer)
 * for a residual add of its output (pend_take_add: its epilogue). Anything else launches the
 * held op first (pend_flush), so the order of effects is unchanged. RAPID_CUDA_FUSE=0: no
 * deferral. */
static void pend_flush(rp_cuda_ctx *c)
{
    pend_op *pd = c->pend;
    if (!pd || pd->kind == PEND_NONE)
        return;
    int k = pd->kind;
    pd->kind = PEND_NONE;
    if (k == PEND_ADD)
        add_launch(c, pd->y, pd->x, pd->n);
    else if (k == PEND_MV) {
        prof_scope ps(c, P_MATVEC, 0);
        mv1_launch(c, pd->mv);
    } else if (k == PEND_QMV) {
        rp_cuda_hook_run(c, 0, pd->qfn, pd->qargs, pd->qn); /* (nothing held now) */
    } else if (k == PEND_NORM) {
        prof_scope ps(c, P_NORM, 0);
        norm_launch(c, pd->y, pd->x, pd->x2, 1, (int)pd->n, pd->eps, pd->add_one, 1);
    } else if (k == PEND_SILU) {
        prof_scope ps(c, P_ELEM, 0);
        silu_launch(c, pd->y, pd->x, pd->x2, pd->n);
    }
    else if (k == PEND_ROPE2)
        rope_launch(c, pd->y, pd->heads, pd->y2, pd->heads2, pd->n_tok, pd->head_dim, pd->half,
                    pd->pos, pd->attn_factor, pd->neox);
    else
        rope_launch(c, pd->y, pd->heads, NULL, 0, pd->n_tok, pd->head_dim, pd->half, pd->pos,
                    pd->attn_factor, pd->neox);
}

extern "C" void rp_cuda_add_bias(rp_cuda_ctx *c, float *y, const float *b, int n_tok, int dim)
{
    prof_scope ps(c, P_ELEM);
    long n = (long)n_tok * dim;
    int nb = ew_blocks(c, n);
    LAUNCH(c, {
        add_bias_kernel<<<nb, 256, 0, c->stream>>>(y, b, dim, n);
        LAUNCHED();
    });
}

template <int DT>
__global__ void embed_kernel(const void *table, long cols, const int32_t *ids, float *x)
{
    long row = ids[blockIdx.x];
    for (long i = threadIdx.x; i < cols; i += blockDim.x)
        x[(long)blockIdx.x * cols + i] = wtype<DT>::one(table, row * cols + i);
}

extern "C" void rp_cuda_embed(rp_cuda_ctx *c, int dt, const void *table, long cols,
                              const int32_t *ids, int n, float *x)
{
    prof_scope ps(c, P_EMBED);
    const int32_t *d = (const int32_t *)stage(c, ids, sizeof(int32_t) * n);
    LAUNCH(c, {
        if (dt == RP_CUDA_BF16)
            embed_kernel<RP_CUDA_BF16><<<n, 256, 0, c->stream>>>(table, cols, d, x);
        else if (dt == RP_CUDA_F16)
            embed_kernel<RP_CUDA_F16><<<n, 256, 0, c->stream>>>(table, cols, d, x);
        else
            embed_kernel<RP_CUDA_F32><<<n, 256, 0, c->stream>>>(table, cols, d, x);
        LAUNCHED();
    });
}

__global__ void gather_kernel(float *dst, const float *src, const int32_t *rows, int dim)
{
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        dst[(long)blockIdx.x * dim + i] = src[(long)rows[blockIdx.x] * dim + i];
}

extern "C" void rp_cuda_gather_rows(rp_cuda_ctx *c, float *dst, const float *src,
                                    const int32_t *rows, int n, int dim)
{
    prof_scope ps(c, P_GATHER);
    const int32_t *d = (const int32_t *)stage(c, rows, sizeof(int32_t) * n);
    float *tmp = (float *)grow(c, (void **)&c->part, &c->part_bytes, sizeof(float) * n * dim);
    LAUNCH(c, {
        gather_kernel<<<n, 256, 0, c->stream>>>(tmp, src, d, dim);
        LAUNCHED();
        CK(cudaMemcpyAsync(dst, tmp, sizeof(float) * n * dim, cudaMemcpyDeviceToDevice,
                           c->stream));
    });
}

/* ---- the step: token table, KV store, attention ------------------------------------------- */

extern "C" void rp_cuda_step(rp_cuda_ctx *c, const rp_cuda_tok *toks, int n, const int32_t *tbl,
                             int n_tbl, const rp_cuda_kv *kv)
{
    prof_scope ps(c, P_STEP);
    c->st_t0 = now_s();
    if (c->st_end > 0) /* the previous step was a replay: the time since its ids returned */
        c->st_out += c->st_t0 - c->st_end;
    c->st_end = 0;
    c->st_hit = 0;
    if (c->rec) { /* a step that copied no logits out: run it as it is */
        c->rec_dirty = 1;
        rec_finish(c);
    }
    CK(cudaEventSynchronize(c->tok_ev)); /* the previous table's copy has run */
    if (n > c->tok_cap) {
        CK(cudaStreamSynchronize(c->stream));
        cudaFreeHost(c->tok_host);
        cudaFree(c->tok_dev);
        cudaFreeHost(c->fa_host);
        cudaFree(c->fa_dev);
        rp_free(c->pos_host);
        c->tok_cap = n < 256 ? 256 : n;
        CK(cudaMallocHost((void **)&c->tok_host, sizeof(rp_cuda_tok) * c->tok_cap));
        CK(cudaMalloc((void **)&c->tok_dev, sizeof(rp_cuda_tok) * c->tok_cap));
        CK(cudaMallocHost((void **)&c->fa_host, sizeof(int2) * c->tok_cap));
        CK(cudaMalloc((void **)&c->fa_dev, sizeof(int2) * c->tok_cap));
        c->pos_host = (int32_t *)rp_alloc(sizeof(int32_t) * c->tok_cap);
        if (!c->pos_host) {
            fprintf(stderr, "cuda: out of host memory\n");
            abort();
        }
    }
    if (n_tbl > c->tbl_cap) {
        CK(cudaStreamSynchronize(c->stream));
        cudaFreeHost(c->tbl_host);
        cudaFree(c->tbl_dev);
        c->tbl_cap = n_tbl < 1024 ? 1024 : n_tbl * 2;
        CK(cudaMallocHost((void **)&c->tbl_host, sizeof(int32_t) * c->tbl_cap));
        CK(cudaMalloc((void **)&c->tbl_dev, sizeof(int32_t) * c->tbl_cap));
    }
    if (n_tbl > 0) {
        memcpy(c->tbl_host, tbl, sizeof(int32_t) * n_tbl);
        CK(cudaMemcpyAsync(c->tbl_dev, c->tbl_host, sizeof(int32_t) * n_tbl,
                           cudaMemcpyHostToDevice, c->stream));
    }
    c->kv = *kv;
    memcpy(c->tok_host, toks, sizeof(rp_cuda_tok) * n);
    c->max_pos = 0;
    for (int t = 0; t < n; t++) {
        c->pos_host[t] = toks[t].pos;
        c->max_pos = toks[t].pos > c->max_pos ? toks[t].pos : c->max_pos;
    }
    c->n_tok = n;
    /* every token its sequence's only one this step (no two share a block table): the keys
     * before each token's position were stored by earlier steps */
    c->step_single = c->dec_pre && n <= 64;
    for (int t = 0; t < n && c->step_single; t++)
        for (int u = 0; u < t && c->step_single; u++)
            c->step_single = toks[t].tbl != toks[u].tbl;
    CK(cudaMemcpyAsync(c->tok_dev, c->tok_host, sizeof(rp_cuda_tok) * n, cudaMemcpyHostToDevice,
                       c->stream));
    c->n_fa = 0;
    if (c->fa_min > 0 && n >= c->fa_min) { /* runs of one sequence, cut every FA_BQ tokens */
        for (int t = 0; t < n; t++) {
            int2 *last = c->n_fa ? &c->fa_host[c->n_fa - 1] : NULL;
            if (last && last->y < FA_BQ && toks[t].tbl == toks[t - 1].tbl &&
                toks[t].pos == toks[t - 1].pos + 1)
                last->y++;
            else
                c->fa_host[c->n_fa++] = make_int2(t, 1);
        }
        CK(cudaMemcpyAsync(c->fa_dev, c->fa_host, sizeof(int2) * c->n_fa, cudaMemcpyHostToDevice,
                           c->stream));
    }
    CK(cudaEventRecord(c->tok_ev, c->stream));
    c->rec = c->graphs && n <= TC_MAXN;
    c->rec_dirty = 0;
}

/* The element offset of (layer, K or V, position)'s half-block of token d's sequence. */
__device__ __forceinline__ long kv_row(const rp_cuda_kv &kv, const int32_t *tbl,
                                       const rp_cuda_tok &d, int layer, int v, int pos)
{
    return kv_off(kv, tbl, d.tbl, layer, v, pos);
}

__global__ void kv_store_kernel(const rp_cuda_tok *toks, const int32_t *tbl, rp_cuda_kv kv,
                                int layer, const float *k, const float *v, int kvd)
{
    rp_cuda_tok d = toks[blockIdx.x];
    long off = (long)(d.pos % kv.block_tokens) * kvd;
    long kd = kv_row(kv, tbl, d, layer, 0, d.pos) + off;
    long vd = kv_row(kv, tbl, d, layer, 1, d.pos) + off;
    for (int i = threadIdx.x; i < kvd; i += blockDim.x) {
        kv_put(kv, kd + i, k[(size_t)blockIdx.x * kvd + i]);
        kv_put(kv, vd + i, v[(size_t)blockIdx.x * kvd + i]);
    }
}

/* RoPE of q (in place) and of k (in place and into the pool) with the V store: blocks
 * (token, piece), a thread per q pair, k pair, element of k's unrotated tail or of v. */
__global__ void rope_kv_kernel(const rp_cuda_tok *toks, const int32_t *tbl, rp_cuda_kv kv,
                               int layer, float *q, int hq, float *k, const float *v, int hk,
                               int head_dim, int half, const float *inv, float attn_factor,
                               int neox)
{
    mv1_trigger(); /* the decode attention may launch (it waits for this grid) */
    pdl_wait();
    int t = blockIdx.x;
    rp_cuda_tok d = toks[t];
    int kvd = hk * head_dim, tail = head_dim - 2 * half;
    long off = (long)(d.pos % kv.block_tokens) * kvd;
    long kd = kv_row(kv, tbl, d, layer, 0, d.pos) + off;
    long vd = kv_row(kv, tbl, d, layer, 1, d.pos) + off;
    int nq = hq * half, nk = hk * half, nt = hk * tail;
    for (int idx = blockIdx.y * blockDim.x + threadIdx.x; idx < nq + nk + nt + kvd;
         idx += gridDim.y * blockDim.x) {
        if (idx < nq + nk) {
            int h = idx < nq ? idx / half : (idx - nq) / half, i = idx % half;
            float ang = (float)d.pos * inv[i];
            float cs = cosf(ang) * attn_factor, sn = sinf(ang) * attn_factor;
            float *x = idx < nq ? q + ((long)t * hq + h) * head_dim
                                : k + ((long)t * hk + h) * head_dim;
            int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
            float a = x[ia], b = x[ib];
            float ra = a * cs - b * sn, rb = b * cs + a * sn;
            x[ia] = ra;
            x[ib] = rb;
            if (idx >= nq) {
                kv_put(kv, kd + h * head_dim + ia, ra);
                kv_put(kv, kd + h * head_dim + ib, rb);
            }
        } else if (idx < nq + nk + nt) {
            int r = idx - nq - nk, h = r / tail, e = 2 * half + r % tail;
            kv_put(kv, kd + h * head_dim + e, k[((long)t * hk + h) * head_dim + e]);
        } else {
            int e = idx - nq - nk - nt;
            kv_put(kv, vd + e, v[(size_t)t * kvd + e]);
        }
    }
}

extern "C" void rp_cuda_kv_store(rp_cuda_ctx *c, int layer, const float *k, const float *v,
                                 int kvd)
{
    pend_op *pd = c->pend;
    if (pd->kind == PEND_ROPE2 && pd->y2 == k && pd->pos == NULL && pd->n_tok == c->n_tok &&
        pd->heads2 * pd->head_dim == kvd) { /* positions are the step's own */
        prof_scope ps(c, P_KV, 0);
        pd->kind = PEND_NONE;
        int nt = c->n_tok, hq = pd->heads, hk = pd->heads2, hd = pd->head_dim, half = pd->half,
            neox = pd->neox;
        float af = pd->attn_factor, *q = pd->y, *kk = pd->y2;
        const rp_cuda_tok *td = c->tok_dev;
        const int32_t *tbl = c->tbl_dev;
        const float *inv = c->inv_dev;
        rp_cuda_kv kvp = c->kv;
        int work = (hq + hk) * half + hk * (hd - 2 * half) + kvd;
        int threads = 128, per_tok = (work + threads - 1) / threads, pdl = c->pdl_small;
        LAUNCH(c, {
            pdl_launch(pdl, rope_kv_kernel, dim3((unsigned)nt, (unsigned)per_tok), dim3(threads),
                       c->stream, td, tbl, kvp, layer, q, hq, kk, v, hk, hd, half, inv, af, neox);
            LAUNCHED();
        });
        return;
    }
    prof_scope ps(c, P_KV);
    int nt = c->n_tok;
    const rp_cuda_tok *td = c->tok_dev;
    const int32_t *tbl = c->tbl_dev;
    rp_cuda_kv kv = c->kv;
    LAUNCH(c, {
        kv_store_kernel<<<nt, 256, 0, c->stream>>>(td, tbl, kv, layer, k, v, kvd);
        LAUNCHED();
    });
}

/* ---- flash prefill attention ---------------------------------------------------------------
 * Steps of many tokens (prefill chunks): the step's tokens are cut into tiles of up to
 * FA_BQ consecutive tokens of one sequence at consecutive positions (rp_cuda_step builds
 * the tile list). A block (tile, query head) keeps its 64 query rows in registers as bf16
 * mma fragments (16 rows per warp, scale * log2(e) folded in) and walks the keys the tile
 * can see in FA_BK-key tiles read through the block table: each f32 K/V row is rounded to
 * bf16 into shared memory, S = Q K^T and O += P V run on the tensor cores (mma.sync
 * m16n8k16, f32 accumulators), with the online softmax (running max and sum per row) in
 * between; the causal / sliding-window mask is applied per element. V's B fragments come
 * from row-major shared memory through ldmatrix.trans. */
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi)
{
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&h;
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

template <int D, int DT>
__global__ void __launch_bounds__(FA_THREADS)
    flash_prefill_kernel(const int2 *tiles, const rp_cuda_tok *toks, const int32_t *tbl,
                         rp_cuda_kv kv, int layer, const float *q, float *out, int H, int KVH,
                         float qscale, int window)
{
    constexpr int KP = D + 8; /* row stride in bf16: 16 bytes of pad, conflict-free fragments */
    __shared__ __align__(16) __nv_bfloat16 ks[FA_BK * KP];
    __shared__ __align__(16) __nv_bfloat16 vs[FA_BK * KP];
    int2 tl = tiles[blockIdx.x]; /* (first token, tokens) */
    int h = blockIdx.y, kvh = h / (H / KVH);
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tq = lane & 3;
    rp_cuda_tok d0 = toks[tl.x];
    int p0 = d0.pos, n = tl.y;
    int jhi = p0 + n - 1; /* the last key any row of the tile sees */
    int jlo = window > 0 && p0 - window + 1 > 0 ? p0 - window + 1 : 0;
    size_t kvd = (size_t)KVH * D;
    int r0 = warp * 16 + g, r1 = r0 + 8;
    int pr0 = p0 + r0, pr1 = p0 + r1;
    uint32_t qf[D / 16][4];
    {
        const float *q0 = q + ((size_t)(tl.x + min(r0, n - 1)) * H + h) * D;
        const float *q1 = q + ((size_t)(tl.x + min(r1, n - 1)) * H + h) * D;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            int c0 = kk * 16 + 2 * tq;
            float2 a = *(const float2 *)(q0 + c0), b = *(const float2 *)(q1 + c0);
            float2 a8 = *(const float2 *)(q0 + c0 + 8), b8 = *(const float2 *)(q1 + c0 + 8);
            qf[kk][0] = pack_bf16x2(a.x * qscale, a.y * qscale);
            qf[kk][1] = pack_bf16x2(b.x * qscale, b.y * qscale);
            qf[kk][2] = pack_bf16x2(a8.x * qscale, a8.y * qscale);
            qf[kk][3] = pack_bf16x2(b8.x * qscale, b8.y * qscale);
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    /* the warp's rows see keys up to wmax and from wmin on */
    int wmax = p0 + min(warp * 16 + 15, n - 1);
    int wmin = window > 0 ? p0 + warp * 16 - window + 1 : 0;
    for (int kb = jlo & ~15; kb <= jhi; kb += FA_BK) {
        __syncthreads(); /* the previous tile's fragments are read */
        for (int i = tid; i < FA_BK * (D / 4); i += FA_THREADS) {
            int kr = i / (D / 4), c4 = (i % (D / 4)) * 4, j = kb + kr;
            float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
            if (j <= jhi) {
                long off = (long)(j % kv.block_tokens) * kvd + (long)kvh * D + c4;
                kx = kv_load4<DT>(kv.base, kv_row(kv, tbl, d0, layer, 0, j) + off);
                vx = kv_load4<DT>(kv.base, kv_row(kv, tbl, d0, layer, 1, j) + off);
            }
            uint2 kp = make_uint2(pack_bf16x2(kx.x, kx.y), pack_bf16x2(kx.z, kx.w));
            uint2 vp = make_uint2(pack_bf16x2(vx.x, vx.y), pack_bf16x2(vx.z, vx.w));
            *(uint2 *)&ks[kr * KP + c4] = kp;
            *(uint2 *)&vs[kr * KP + c4] = vp;
        }
        __syncthreads();
        if (warp * 16 >= n || kb > wmax || kb + FA_BK - 1 < wmin)
            continue; /* nothing of this tile is visible to the warp's rows */
        float s[FA_BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
            const __nv_bfloat16 *kr = ks + (nt * 8 + g) * KP + 2 * tq;
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t b0 = *(const uint32_t *)(kr + kk * 16);
                uint32_t b1 = *(const uint32_t *)(kr + kk * 16 + 8);
                mma16816<RP_CUDA_BF16>(s[nt], qf[kk], b0, b1);
            }
        }
        /* mask, running max */
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int j = kb + nt * 8 + 2 * tq + e;
                int ok0 = j <= pr0 && j <= jhi && (window <= 0 || j > pr0 - window);
                int ok1 = j <= pr1 && j <= jhi && (window <= 0 || j > pr1 - window);
                s[nt][e] = ok0 ? s[nt][e] : -INFINITY;
                s[nt][2 + e] = ok1 ? s[nt][2 + e] : -INFINITY;
                mx0 = fmaxf(mx0, s[nt][e]);
                mx1 = fmaxf(mx1, s[nt][2 + e]);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        float u0 = mx0 == -INFINITY ? 0.0f : mx0, u1 = mx1 == -INFINITY ? 0.0f : mx1;
        float al0 = exp2f(m0 - u0), al1 = exp2f(m1 - u1);
        m0 = mx0, m1 = mx1;
        l0 *= al0, l1 *= al1;
#pragma unroll
        for (int i = 0; i < D / 8; i++) {
            o[i][0] *= al0, o[i][1] *= al0;
            o[i][2] *= al1, o[i][3] *= al1;
        }
        uint32_t pf[FA_BK / 16][4];
#pragma unroll
        for (int nt = 0; nt < FA_BK / 8; nt++) {
            float a = exp2f(s[nt][0] - u0), b = exp2f(s[nt][1] - u0);
            float c = exp2f(s[nt][2] - u1), e = exp2f(s[nt][3] - u1);
            l0 += a + b, l1 += c + e;
            pf[nt / 2][(nt & 1) * 2] = pack_bf16x2(a, b);
            pf[nt / 2][(nt & 1) * 2 + 1] = pack_bf16x2(c, e);
        }
        /* O += P V: B fragments of 16 keys x 16 dims per ldmatrix.x4.trans */
        int vrow = ((lane >> 3) & 1) * 8 + (lane & 7), vcol = (lane >> 4) * 8;
#pragma unroll
        for (int kk = 0; kk < FA_BK / 16; kk++)
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b[4];
                ldsm_x4_t(b, vs + (kk * 16 + vrow) * KP + dp * 16 + vcol);
                mma16816<RP_CUDA_BF16>(o[2 * dp], pf[kk], b[0], b[1]);
                mma16816<RP_CUDA_BF16>(o[2 * dp + 1], pf[kk], b[2], b[3]);
            }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float i0 = 1.0f / l0, i1 = 1.0f / l1;
    float *o0 = out + ((size_t)(tl.x + r0) * H + h) * D + 2 * tq;
    float *o1 = out + ((size_t)(tl.x + r1) * H + h) * D + 2 * tq;
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        if (r0 < n)
            *(float2 *)(o0 + i * 8) = make_float2(o[i][0] * i0, o[i][1] * i0);
        if (r1 < n)
            *(float2 *)(o1 + i * 8) = make_float2(o[i][2] * i1, o[i][3] * i1);
    }
}

/* Whether the flash kernel takes this step: enough tokens (RAPID_CUDA_FLASH=N, default 65,
 * 0 off), a head size it is built for, KV rows 16-byte aligned. */
static int flash_ok(const rp_cuda_ctx *c, int D)
{
    return c->fa_min > 0 && c->n_tok >= c->fa_min && c->n_fa > 0 && (D == 64 || D == 128) &&
           c->kv.block_elems % 4 == 0 && c->kv.half_elems % 4 == 0;
}

static void flash_launch(rp_cuda_ctx *c, int layer, const float *q, float *out, int H, int KVH,
                         int D, float scale, int window)
{
    dim3 grid((unsigned)c->n_fa, (unsigned)H);
    const int2 *tiles = c->fa_dev;
    const rp_cuda_tok *td = c->tok_dev;
    const int32_t *tbl = c->tbl_dev;
    rp_cuda_kv kv = c->kv;
    float qs = scale * 1.4426950408889634f;
    LAUNCH(c, {
        if (D == 128)
            KV_DISPATCH(kv.dt, flash_prefill_kernel<128, KDT><<<grid, FA_THREADS, 0, c->stream>>>(
                                   tiles, td, tbl, kv, layer, q, out, H, KVH, qs, window));
        else
            KV_DISPATCH(kv.dt, flash_prefill_kernel<64, KDT><<<grid, FA_THREADS, 0, c->stream>>>(
                                   tiles, td, tbl, kv, layer, q, out, H, KVH, qs, window));
        LAUNCHED();
    });
}

/* Block (head group hg, token t, chunk ch): G query heads sharing one KV head, keys
 * j0 + ch*ACH .. +ACH. Writes (max, sum, acc[D]) per head to part. */
template <int G>
__global__ void __launch_bounds__(ACH)
    attn_chunk_kernel(const rp_cuda_tok *toks, const int32_t *tbl, rp_cuda_kv kv, int layer,
                      const float *q, int H, int KVH, int D, float scale, int window,
                      int n_chunks, int kc, float *part)
{
    extern __shared__ float sm[];
    float *qs = sm;             /* G * D */
    float *ps = qs + G * D;     /* G * ACH */
    float *red = ps + G * ACH;  /* 32 */
    int hg = blockIdx.x, t = blockIdx.y, ch = blockIdx.z, tid = threadIdx.x;
    int h0 = hg * G, kvh = h0 / (H / KVH);
    rp_cuda_tok d = toks[t];
    int pos = d.pos, j0 = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    size_t kvd = (size_t)KVH * D;
    int jb = j0 + ch * kc, je = min(jb + kc, pos + 1), nk = je - jb;
    for (int i = tid; i < G * D; i += ACH)
        qs[i] = q[((size_t)t * H + h0) * D + i];
    __syncthreads();
    size_t pstride = (size_t)D + 2;
    if (nk <= 0) {
        for (int g = 0; g < G; g++) {
            float *pp = part + (((size_t)t * H + h0 + g) * n_chunks + ch) * pstride;
            for (int i = tid; i < D + 2; i += ACH)
                pp[i] = i == 0 ? -INFINITY : 0.0f;
        }
        return;
    }
    /* scores: a warp per key (lanes across the head dimension: one coalesced row read),
     * every head of the group from that one read */
    int lane = tid % 32, warp = tid / 32;
#pragma unroll 2
    for (int j = warp; j < nk; j += ACH / 32) {
        int p = jb + j;
        long kr = kv_row(kv, tbl, d, layer, 0, p) + (long)(p % kv.block_tokens) * kvd +
                  (long)kvh * D;
        float s[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            s[g] = 0.0f;
        if ((D & 3) == 0) {
            for (int i = lane * 4; i < D; i += 128) {
                float4 k4 = make_float4(kv_get(kv, kr + i), kv_get(kv, kr + i + 1),
                                        kv_get(kv, kr + i + 2), kv_get(kv, kr + i + 3));
#pragma unroll
                for (int g = 0; g < G; g++) {
                    float4 q4 = *(const float4 *)(qs + g * D + i);
                    s[g] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
                }
            }
        } else {
            for (int i = lane; i < D; i += 32)
#pragma unroll
                for (int g = 0; g < G; g++)
                    s[g] += qs[g * D + i] * kv_get(kv, kr + i);
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float v = warp_sum(s[g]);
            if (lane == 0)
                ps[g * ACH + j] = v * scale;
        }
    }
    __syncthreads();
    float mx[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        float sc = tid < nk ? ps[g * ACH + tid] : -INFINITY;
        mx[g] = block_max(sc, red);
        float p = tid < nk ? expf(sc - mx[g]) : 0.0f;
        ps[g * ACH + tid] = p;
        l[g] = block_sum(p, red);
    }
    __syncthreads();
    for (int i = tid; i < D; i += ACH) {
        float acc[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            acc[g] = 0.0f;
#pragma unroll 4
        for (int j = 0; j < nk; j++) {
            int p = jb + j;
            float vv = kv_get(kv, kv_row(kv, tbl, d, layer, 1, p) +
                                      (long)(p % kv.block_tokens) * kvd + (long)kvh * D + i);
#pragma unroll
            for (int g = 0; g < G; g++)
                acc[g] = fmaf(ps[g * ACH + j], vv, acc[g]);
        }
#pragma unroll
        for (int g = 0; g < G; g++)
            part[(((size_t)t * H + h0 + g) * n_chunks + ch) * pstride + 2 + i] = acc[g];
    }
    if (tid == 0)
#pragma unroll
        for (int g = 0; g < G; g++) {
            float *pp = part + (((size_t)t * H + h0 + g) * n_chunks + ch) * pstride;
            pp[0] = mx[g];
            pp[1] = l[g];
        }
}

__global__ void attn_merge_kernel(const float *part, float *out, int H, int D, int n_chunks)
{
    int h = blockIdx.x, t = blockIdx.y;
    size_t pstride = (size_t)D + 2;
    const float *pp = part + ((size_t)t * H + h) * n_chunks * pstride;
    float M = -INFINITY;
    for (int c = 0; c < n_chunks; c++)
        M = fmaxf(M, pp[c * pstride]);
    float L = 0.0f;
    for (int c = 0; c < n_chunks; c++) {
        float m = pp[c * pstride];
        L += m == -INFINITY ? 0.0f : expf(m - M) * pp[c * pstride + 1];
    }
    float inv = 1.0f / L;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < n_chunks; c++) {
            float m = pp[c * pstride];
            if (m != -INFINITY)
                acc += expf(m - M) * pp[c * pstride + 2 + i];
        }
        out[((size_t)t * H + h) * D + i] = acc * inv;
    }
}

extern "C" void rp_cuda_attention(rp_cuda_ctx *c, int layer, const float *q, float *out, int H,
                                  int KVH, int D, float scale, int window)
{
    prof_scope ps(c, P_ATTN);
    if (flash_ok(c, D)) {
        flash_launch(c, layer, q, out, H, KVH, D, scale, window);
        return;
    }
    int span = c->max_pos + 1;
    if (window > 0 && window < span)
        span = window;
    int group = H / KVH;
    int G = group % 8 == 0 ? 8 : group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
    if (G * D > 2048)
        G = 1;
    if (c->dec_attn && rp_cuda_dec_ok(D, G, &c->kv)) {
        int n_split, per_split;
        int loads = 8;
        rp_cuda_dec_plan(D, G, c->kv.dt, c->dec_mode, span, (long)c->n_tok * (H / G), c->sms,
                         &n_split, &per_split, &loads);
        float *part = NULL;
        if (n_split > 1)
            part = (float *)grow(c, (void **)&c->part, &c->part_bytes,
                                 sizeof(float) * (size_t)c->n_tok * H * n_split * (D + 2));
        const rp_cuda_tok *td = c->tok_dev;
        const int32_t *tbl = c->tbl_dev;
        rp_cuda_kv kv = c->kv;
        unsigned *cnt = NULL;
        if (n_split > 1 && c->dec_merge) {
            size_t units = (size_t)c->n_tok * (H / G);
            if (units > c->da_cnt_n) { /* zeroed once; every launch leaves them zero */
                pend_flush(c);
                rec_break(c);
                CK(cudaStreamSynchronize(c->stream));
                CK(cudaFree(c->da_cnt));
                c->da_cnt_n = units + units / 2;
                CK(cudaMalloc((void **)&c->da_cnt, sizeof(unsigned) * c->da_cnt_n));
                CK(cudaMemset(c->da_cnt, 0, sizeof(unsigned) * c->da_cnt_n));
            }
            cnt = c->da_cnt;
        }
        int nt = c->n_tok, pdl = c->pdl_small, pre = c->step_single;
        LAUNCH(c, {
            rp_cuda_dec_attn(c->stream, pdl, td, tbl, kv, layer, q, out, part, H, KVH, D, G,
                             scale, window, nt, n_split, per_split, cnt, pre, loads);
        });
        return;
    }
    /* keys per chunk: 128 (one per thread) when that gives the GPU enough blocks, else 32
     * (decode of a few sequences: more, shorter chunks, so the V loop is 4x shorter) */
    int kc = (long)c->n_tok * (H / G) * ((span + ACH - 1) / ACH) >= 2L * c->sms ? ACH : 32;
    int n_chunks = (span + kc - 1) / kc;
    size_t need = sizeof(float) * (size_t)c->n_tok * H * n_chunks * (D + 2);
    float *part = (float *)grow(c, (void **)&c->part, &c->part_bytes, need);
    dim3 grid((unsigned)(H / G), (unsigned)c->n_tok, (unsigned)n_chunks);
    size_t smem = sizeof(float) * ((size_t)G * D + (size_t)G * ACH + 32);
    const rp_cuda_tok *td = c->tok_dev;
    const int32_t *tbl = c->tbl_dev;
    rp_cuda_kv kv = c->kv;
    int nt = c->n_tok;
    LAUNCH(c, {
        switch (G) {
        case 8:
            attn_chunk_kernel<8><<<grid, ACH, smem, c->stream>>>(td, tbl, kv, layer, q, H, KVH, D, scale,
                                                                 window, n_chunks, kc, part);
            break;
        case 4:
            attn_chunk_kernel<4><<<grid, ACH, smem, c->stream>>>(td, tbl, kv, layer, q, H, KVH, D, scale,
                                                                 window, n_chunks, kc, part);
            break;
        case 2:
            attn_chunk_kernel<2><<<grid, ACH, smem, c->stream>>>(td, tbl, kv, layer, q, H, KVH, D, scale,
                                                                 window, n_chunks, kc, part);
            break;
        default:
            attn_chunk_kernel<1><<<grid, ACH, smem, c->stream>>>(td, tbl, kv, layer, q, H, KVH, D, scale,
                                                                 window, n_chunks, kc, part);
            break;
        }
        LAUNCHED();
        attn_merge_kernel<<<dim3((unsigned)H, (unsigned)nt), D < 256 ? D : 256, 0, c->stream>>>(
            part, out, H, D, n_chunks);
        LAUNCHED();
    });
}

/* ---- bandwidth probe ---------------------------------------------------------------------- */

__global__ void read_kernel(const uint4 *p, long n, unsigned *sink)
{
    uint32_t acc = 0;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        uint4 v = ld_stream(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u)
        atomicAdd(sink, 1u);
}

__global__ void fill_kernel(uint32_t *p, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        p[i] = (uint32_t)i * 2654435761u;
}

extern "C" double rp_cuda_read_bw(rp_cuda_ctx *c, size_t n, int reps)
{
    n &= ~(size_t)4095;
    pend_flush(c);
    rec_break(c);
    void *buf = rp_cuda_malloc(c, n + 256);
    if (!buf)
        return 0.0;
    unsigned *sink = (unsigned *)((char *)buf + n);
    fill_kernel<<<c->sms * 8, 256, 0, c->stream>>>((uint32_t *)buf, (long)(n / 4));
    LAUNCHED();
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    double best = 0.0;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, c->stream));
        read_kernel<<<c->sms * 8, 256, 0, c->stream>>>((const uint4 *)buf, (long)(n / 16), sink);
        LAUNCHED();
        CK(cudaEventRecord(e1, c->stream));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        double gbs = (double)n / (ms * 1e-3) / 1e9;
        best = gbs > best ? gbs : best;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    rp_cuda_free(c, buf);
    return best;
}

/* ---- elementwise ops of the other families (Gemma's GELU MLP and embedding scale, the
 * mixture-of-experts scatter) ------------------------------------------------------------ */

__global__ void gelu_mul_kernel(float *out, const float *g, const float *u, long n)
{
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float x = g[i];
        out[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x))) * u[i];
    }
}

__global__ void scale_kernel(float *x, float s, long n)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x)
        x[i] *= s;
}

/* block i: y[rows[i]] += w[i] * x[i] (rows distinct, so no two blocks write one element) */
__global__ void scatter_add_kernel(float *y, const float *x, const int32_t *rows, const float *w,
                                   int dim)
{
    float *dst = y + (size_t)rows[blockIdx.x] * dim;
    const float *src = x + (size_t)blockIdx.x * dim;
    float wi = w[blockIdx.x];
    for (int d = threadIdx.x; d < dim; d += blockDim.x)
        dst[d] += wi * src[d];
}

extern "C" void rp_cuda_gelu_mul(rp_cuda_ctx *c, float *out, const float *g, const float *u,
                                 int64_t n)
{
    prof_scope ps(c, P_ELEM);
    int nb = ew_blocks(c, n);
    LAUNCH(c, {
        gelu_mul_kernel<<<nb, 256, 0, c->stream>>>(out, g, u, n);
        LAUNCHED();
    });
}

extern "C" void rp_cuda_scale(rp_cuda_ctx *c, float *x, float s, int64_t n)
{
    prof_scope ps(c, P_ELEM);
    int nb = ew_blocks(c, n);
    LAUNCH(c, {
        scale_kernel<<<nb, 256, 0, c->stream>>>(x, s, n);
        LAUNCHED();
    });
}

extern "C" void rp_cuda_scatter_add(rp_cuda_ctx *c, float *y, const float *x,
                                    const int32_t *rows, const float *w, int n, int dim)
{
    prof_scope ps(c, P_ELEM);
    const int32_t *rd = (const int32_t *)stage(c, rows, sizeof(int32_t) * n);
    const float *wd = (const float *)stage(c, w, sizeof(float) * n);
    LAUNCH(c, {
        scatter_add_kernel<<<n, 256, 0, c->stream>>>(y, x, rd, wd, dim);
        LAUNCHED();
    });
}

__global__ void swiglu_clamp_kernel(float *out, const float *g, const float *u, long n,
                                    float limit, float alpha)
{
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long)gridDim.x * blockDim.x) {
        float gi = fminf(g[i], limit), ui = fminf(fmaxf(u[i], -limit), limit);
        out[i] = (ui + 1.0f) * gi * (1.0f / (1.0f + expf(-alpha * gi)));
    }
}

extern "C" void rp_cuda_swiglu_clamp(rp_cuda_ctx *c, float *out, const float *g, const float *u,
                                     int64_t n, float limit, float alpha)
{
    prof_scope ps(c, P_ELEM);
    int nb = ew_blocks(c, n);
    LAUNCH(c, {
        swiglu_clamp_kernel<<<nb, 256, 0, c->stream>>>(out, g, u, n, limit, alpha);
        LAUNCHED();
    });
}

/* ---- attention sinks ---------------------------------------------------------------------
 * A sink logit per head joins the softmax's denominator without a value. With
 * lse = log sum_j exp(s_j) over the keys the query sees, the output with the sink is the
 * output without it times Z / (Z + exp(sink)) = 1 / (1 + exp(sink - lse)); so the attention
 * kernels run unchanged and this pass computes lse (scores again in f32, K rows only) and
 * rescales. Block (head, token): threads stride over the visible keys with an online
 * max / sum, then one block reduction. */
#define SINK_THREADS 128
__global__ void __launch_bounds__(SINK_THREADS)
    attn_sinks_kernel(const rp_cuda_tok *toks, const int32_t *tbl, rp_cuda_kv kv, int layer,
                      const float *q, float *out, const float *sinks, int H, int KVH, int D,
                      float scale, int window)
{
    extern __shared__ float qs[]; /* D, then 2 * SINK_THREADS for the reduction */
    float *rm = qs + D, *rs = rm + SINK_THREADS;
    int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, kvh = h / (H / KVH);
    rp_cuda_tok d = toks[t];
    int pos = d.pos, j0 = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    size_t kvd = (size_t)KVH * D;
    for (int i = tid; i < D; i += SINK_THREADS)
        qs[i] = q[((size_t)t * H + h) * D + i];
    __syncthreads();
    float m = -INFINITY, l = 0.0f;
    for (int p = j0 + tid; p <= pos; p += SINK_THREADS) {
        long kr = kv_row(kv, tbl, d, layer, 0, p) + (long)(p % kv.block_tokens) * kvd +
                  (long)kvh * D;
        float sc = 0.0f;
        for (int i = 0; i < D; i++)
            sc = fmaf(qs[i], kv_get(kv, kr + i), sc);
        sc *= scale;
        if (sc > m) {
            l = l * expf(m - sc) + 1.0f;
            m = sc;
        } else {
            l += expf(sc - m);
        }
    }
    rm[tid] = m;
    rs[tid] = l;
    __syncthreads();
    for (int w = SINK_THREADS / 2; w > 0; w /= 2) {
        if (tid < w) {
            float m1 = rm[tid], m2 = rm[tid + w], mm = fmaxf(m1, m2);
            float l1 = m1 == -INFINITY ? 0.0f : rs[tid] * expf(m1 - mm),
                  l2 = m2 == -INFINITY ? 0.0f : rs[tid + w] * expf(m2 - mm);
            rm[tid] = mm;
            rs[tid] = l1 + l2;
        }
        __syncthreads();
    }
    float lse = rm[0] + logf(rs[0]);
    float f = 1.0f / (1.0f + expf(sinks[h] - lse));
    for (int i = tid; i < D; i += SINK_THREADS)
        out[((size_t)t * H + h) * D + i] *= f;
}

extern "C" void rp_cuda_attn_sinks(rp_cuda_ctx *c, int layer, const float *q, float *out,
                                   const float *sinks, int H, int KVH, int D, float scale,
                                   int window)
{
    prof_scope ps(c, P_ATTN);
    dim3 grid((unsigned)H, (unsigned)c->n_tok);
    size_t smem = sizeof(float) * ((size_t)D + 2 * SINK_THREADS);
    const rp_cuda_tok *td = c->tok_dev;
    const int32_t *tbl = c->tbl_dev;
    rp_cuda_kv kv = c->kv;
    LAUNCH(c, {
        attn_sinks_kernel<<<grid, SINK_THREADS, smem, c->stream>>>(td, tbl, kv, layer, q, out,
                                                                   sinks, H, KVH, D, scale,
                                                                   window);
        LAUNCHED();
    });
}

/* ---- hooks for the quantized-weight kernels (cuda_quant.h) -------------------------------- */

extern "C" void rp_cuda_hook_run(rp_cuda_ctx *c, int kind, rp_cuda_hook_fn fn, const void *args,
                                 size_t n)
{
    prof_scope ps(c, kind == 0 ? P_MATVEC : kind == 1 ? P_TCGEMM : P_EMBED);
    struct blob_t {
        unsigned char b[RP_CUDA_HOOK_ARGS];
    } blob;
    memset(&blob, 0, sizeof blob);
    memcpy(blob.b, args, n < sizeof blob.b ? n : sizeof blob.b);
    cudaStream_t st = c->stream;
    int pdl = c->pdl;
    LAUNCH(c, { fn(blob.b, (void *)st, pdl); });
}

extern "C" int rp_cuda_hook_take_pro(rp_cuda_ctx *c, const float *x, long cols, rp_cuda_pro *p)
{
    return pend_take_pro(c, x, cols, p, c->qmv_silu);
}

extern "C" void rp_cuda_hook_defer(rp_cuda_ctx *c, rp_cuda_hook_fn fn, const void *args, size_t n,
                                   const rp_cuda_mvdesc *d)
{
    pend_op *pd = c->pend;
    pend_flush(c);
    if (pd->off || n > sizeof pd->qargs) {
        rp_cuda_hook_run(c, 0, fn, args, n);
        return;
    }
    pd->kind = PEND_QMV; /* (profiled when it launches: pend_flush) */
    pd->qfn = fn;
    pd->qd = *d;
    pd->qn = n;
    memset(pd->qargs, 0, sizeof pd->qargs);
    memcpy(pd->qargs, args, n);
}

extern "C" void *rp_cuda_qscratch(rp_cuda_ctx *c, int slot, size_t n)
{
    return grow(c, &c->qscr[slot], &c->qscr_bytes[slot], n ? n : 16);
}

extern "C" const void *rp_cuda_hook_stage(rp_cuda_ctx *c, const void *src, size_t n)
{
    return stage(c, src, n);
}

extern "C" int rp_cuda_hook_sms(const rp_cuda_ctx *c) { return c->sms; }

extern "C" int rp_cuda_hook_knob(const rp_cuda_ctx *c) { return c->qknob; }

extern "C" int rp_cuda_hook_qdq(const rp_cuda_ctx *c) { return c->qdq_min; }

extern "C" int rp_cuda_hook_qmm2(const rp_cuda_ctx *c) { return c->qmm2_min; }

extern "C" int *rp_cuda_hook_once(rp_cuda_ctx *c) { return &c->qonce; }
