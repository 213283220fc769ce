/* base/threadpool.c - persistent workers, generation counter, spin-then-sleep.
 *
 * Design notes:
 *  1. A job is published by bumping `generation` after storing fn/ctx. Workers that see a new
 *     generation run their share and increment `n_done`.
 *  2. The submitter runs share 0, then spins until n_done == n_threads - 1.
 *  3. A worker that spins SPIN_ITERS without a new job goes to sleep on `cv`; the submitter
 *     broadcasts only when some worker sleeps (n_sleeping > 0), so hot loops pay no syscall.
 *  4. `join` holds the job's generation (high 32 bits), whether it is rp_pool_run_any's, a
 *     closed bit and the number of workers that joined. A worker joins by a CAS that fails once the generation
 *     moved on or the job is closed; the submitter closes it after its own share and waits
 *     for the joined ones only. fn/ctx are read after joining, so they are still the job's.
 */
#include "base/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "base/alloc.h"

#define SPIN_ITERS 200000
#define JOIN_CLOSED (1ull << 31)
#define JOIN_ANY (1ull << 30)
#define JOIN_COUNT (JOIN_ANY - 1)

struct rp_pool {
    int n_threads;
    pthread_t *threads;
    rp_pool_fn fn;
    void *ctx;
    _Atomic unsigned generation;
    _Atomic uint64_t join; /* generation << 32 | JOIN_CLOSED | JOIN_ANY | joined count */
    _Atomic int n_done;
    _Atomic int n_sleeping;
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct worker_arg {
    rp_pool *pool;
    int index;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Pause first; yield after a while so an oversubscribed machine still makes progress. */
static inline void relax(int spins)
{
    if (spins & 1023)
        cpu_relax();
    else
        sched_yield();
}

static void *worker_main(void *p)
{
    worker_arg arg = *(worker_arg *)p;
    rp_free(p);
    rp_pool *pool = arg.pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load(&pool->stop)) {
            if (++spins < SPIN_ITERS) {
                relax(spins);
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->n_sleeping, 1);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = gen;
        /* the job word names the generation it belongs to: a worker that lagged behind an
         * rp_pool_run_any job that is over sees a newer one (or a closed one) and skips */
        uint64_t v = atomic_load_explicit(&pool->join, memory_order_acquire);
        if ((unsigned)(v >> 32) != gen)
            continue;
        int index = arg.index;
        if (v & JOIN_ANY) {
            int joined = 0;
            while ((unsigned)(v >> 32) == gen && !(v & JOIN_CLOSED))
                if (atomic_compare_exchange_weak_explicit(&pool->join, &v, v + 1,
                                                          memory_order_acq_rel,
                                                          memory_order_acquire)) {
                    joined = 1;
                    index = (int)(v & JOIN_COUNT) + 1;
                    break;
                }
            if (!joined)
                continue; /* closed or over: nothing of it is ours */
        }
        pool->fn(pool->ctx, index, pool->n_threads);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
    }
}

rp_pool *rp_pool_new(int n_threads)
{
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    rp_pool *pool = rp_calloc(1, sizeof *pool);
    if (!pool)
        return NULL;
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = rp_calloc((size_t)n_threads, sizeof(pthread_t));
    if (!pool->threads)
        goto fail;
    for (int i = 1; i < n_threads; i++) {
        worker_arg *arg = rp_alloc(sizeof *arg);
        if (!arg)
            goto fail;
        arg->pool = pool;
        arg->index = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, arg) != 0) {
            rp_free(arg);
            pool->n_threads = i; /* join only the ones that started */
            goto fail;
        }
    }
    return pool;
fail:
    rp_pool_free(pool);
    return NULL;
}

void rp_pool_free(rp_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    if (pool->threads)
        for (int i = 1; i < pool->n_threads; i++)
            pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    rp_free(pool->threads);
    rp_free(pool);
}

int rp_pool_size(const rp_pool *pool) { return pool ? pool->n_threads : 1; }

/* Stores the job, then bumps the generation (release: workers that see it see the job). */
static void publish(rp_pool *pool, rp_pool_fn fn, void *ctx, int any)
{
    pool->fn = fn;
    pool->ctx = ctx;
    unsigned gen = atomic_load_explicit(&pool->generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool->join, (uint64_t)gen << 32 | (any ? JOIN_ANY : 0),
                          memory_order_relaxed);
    atomic_store_explicit(&pool->generation, gen, memory_order_release);
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

void rp_pool_run(rp_pool *pool, rp_pool_fn fn, void *ctx)
{
    if (!pool || pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    publish(pool, fn, ctx, 0);
    fn(ctx, 0, pool->n_threads);
    for (int spins = 1;
         atomic_load_explicit(&pool->n_done, memory_order_acquire) != pool->n_threads - 1; spins++)
        relax(spins);
}

void rp_pool_run_any(rp_pool *pool, rp_pool_fn fn, void *ctx)
{
    if (!pool || pool->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    publish(pool, fn, ctx, 1);
    fn(ctx, 0, pool->n_threads);
    uint64_t v = atomic_fetch_or_explicit(&pool->join, JOIN_CLOSED, memory_order_acq_rel);
    int joined = (int)(v & JOIN_COUNT);
    for (int spins = 1; atomic_load_explicit(&pool->n_done, memory_order_acquire) != joined;
         spins++)
        relax(spins);
}

void rp_pool_split(long n, int i, int n_threads, long align, long *begin, long *end)
{
    if (align < 1)
        align = 1;
    long n_units = (n + align - 1) / align;
    long per = n_units / n_threads, extra = n_units % n_threads;
    long b = i * per + (i < extra ? i : extra);
    long e = b + per + (i < extra ? 1 : 0);
    b *= align;
    e *= align;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}
