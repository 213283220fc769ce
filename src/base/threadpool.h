/* base/threadpool.h - fork-join worker pool for the kernels.
 *
 * rp_pool_run(pool, fn, ctx) calls fn(ctx, i, n) once for every i in [0, n) where n is the
 * pool's thread count; the caller runs i = 0 itself and returns when all have finished. Workers
 * spin briefly between jobs (a decode step issues hundreds of jobs) and then sleep on a
 * condition variable, so an idle server burns no CPU.
 *
 * rp_pool_run_any(pool, fn, ctx) is for jobs that share their work out themselves (an atomic
 * counter in ctx): fn(ctx, i, n) runs on the caller (i = 0) and on every worker that picks
 * the job up before the caller has finished its own call (distinct i in [1, n)); it returns
 * once those have finished. A worker the OS has not scheduled yet is not waited for, so on a
 * loaded machine one descheduled thread does not stall the step.
 *
 * Ownership: rp_pool_new -> rp_pool_free (joins the workers).
 * Threading: one thread submits at a time (the engine thread); fn runs on all pool threads.
 */
#ifndef RP_BASE_THREADPOOL_H
#define RP_BASE_THREADPOOL_H

typedef struct rp_pool rp_pool;
typedef void (*rp_pool_fn)(void *ctx, int i_thread, int n_threads);

/* n_threads <= 0 means one per online CPU. Returns NULL on failure. */
rp_pool *rp_pool_new(int n_threads);
void rp_pool_free(rp_pool *pool);
int rp_pool_size(const rp_pool *pool);
void rp_pool_run(rp_pool *pool, rp_pool_fn fn, void *ctx);
void rp_pool_run_any(rp_pool *pool, rp_pool_fn fn, void *ctx);

/* Splits [0, n) into n_threads contiguous parts; part i is [*begin, *end). `align` rounds
 * the split points to multiples (e.g. 16 rows) so SIMD tails stay at the end. */
void rp_pool_split(long n, int i, int n_threads, long align, long *begin, long *end);

#endif
