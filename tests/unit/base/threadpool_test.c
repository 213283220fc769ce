/* tests/unit/base/threadpool_test.c - rp_pool_run_any: work shared through a counter is done
 * exactly once, indices are distinct, and it interleaves with rp_pool_run jobs (a worker that
 * missed an "any" job must neither run it late nor run the next job twice). */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "base/threadpool.h"

typedef struct any_ctx {
    long n_items;
    _Atomic long next;
    _Atomic long sum;
    _Atomic int seen_mask; /* bit i: index i ran */
    _Atomic int bad;
} any_ctx;

static void any_part(void *p, int i, int n)
{
    any_ctx *c = p;
    if (i < 0 || i >= n || (atomic_fetch_or(&c->seen_mask, 1 << i) & (1 << i)))
        atomic_store(&c->bad, 1); /* out of range, or one index twice */
    for (;;) {
        long k = atomic_fetch_add(&c->next, 1);
        if (k >= c->n_items)
            return;
        atomic_fetch_add(&c->sum, k);
    }
}

typedef struct all_ctx {
    _Atomic int calls;
    _Atomic int mask;
} all_ctx;

static void all_part(void *p, int i, int n)
{
    all_ctx *c = p;
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_or(&c->mask, 1 << i);
}

Test(threadpool, run_any_interleaved_with_run)
{
    for (int nt = 1; nt <= 4; nt++) {
        rp_pool *pool = rp_pool_new(nt);
        cr_assert_not_null(pool);
        for (int rep = 0; rep < 3000; rep++) {
            any_ctx a = {.n_items = rep % 7 == 0 ? 1 : 50 + rep % 300};
            rp_pool_run_any(pool, any_part, &a);
            cr_assert_eq(a.sum, a.n_items * (a.n_items - 1) / 2, "rep %d", rep);
            cr_assert_eq(a.bad, 0, "rep %d: an index out of range or twice", rep);
            cr_assert(a.seen_mask & 1, "the caller runs index 0");
            if (rep % 3 == 0) {
                all_ctx c = {0};
                rp_pool_run(pool, all_part, &c);
                cr_assert_eq(c.calls, nt, "rep %d: %d calls", rep, c.calls);
                cr_assert_eq(c.mask, (1 << nt) - 1);
            }
        }
        rp_pool_free(pool);
    }
}
