/* backend/cpu/x86/kv_walk.h - a walk over one KV head's rows at consecutive positions of
 * the paged KV pool, for the fused attention kernels (attn_avx512.c, attn_avx2.c). Plain C:
 * safe to include from a file of any ISA. */
#ifndef RP_BACKEND_CPU_X86_KV_WALK_H
#define RP_BACKEND_CPU_X86_KV_WALK_H

#include "backend/backend.h"

/* Rows of one KV head at consecutive positions: the next row is n_kv_heads rows on within a
 * block, the block table's next block at a block's end (no division per row). */
typedef struct kv_walk {
    const rp_kv_layout *L;
    const int32_t *table;
    int layer, v, head, pos, left; /* left: rows before the block's end */
    const char *p;
} kv_walk;

static inline kv_walk kv_walk_at(const rp_kv_layout *L, const int32_t *table, int layer, int v,
                                 int pos, int head)
{
    return (kv_walk){.L = L,
                     .table = table,
                     .layer = layer,
                     .v = v,
                     .head = head,
                     .pos = pos,
                     .left = L->block_tokens - pos % L->block_tokens,
                     .p = rp_kv_row_at(L, table, layer, v, pos, head)};
}

/* The row at the walk's position, then a step to the next one (a block's first row is looked
 * up only when it is reached, so the table is never read past the last row asked for). */
static inline const float *kv_walk_next(kv_walk *w)
{
    if (w->left == 0) {
        w->left = w->L->block_tokens;
        w->p = rp_kv_row_at(w->L, w->table, w->layer, w->v, w->pos, w->head);
    }
    const float *r = (const float *)w->p;
    w->pos++;
    w->left--;
    w->p += (size_t)w->L->n_kv_heads * w->L->row_bytes;
    return r;
}

#endif
