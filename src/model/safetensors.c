/* model/safetensors.c - safetensors reader (mmap, validated header, sharded index). */
#include "model/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"

#define MAX_HEADER_BYTES (100u << 20)

struct rp_st {
    rp_mmap *maps;
    int n_maps;
    rp_st_tensor *tensors; /* sorted by name after open */
    int n_tensors, cap_tensors;
    void **owned; /* rp_st_add buffers */
    int n_owned;
    void (*on_close)(void *);
    void *on_close_ctx;
};

static int dtype_from_str(const char *s, rp_dtype *dt, size_t *elem)
{
    static const struct {
        const char *name;
        int dt; /* -1: raw, no rp_dtype */
        size_t size;
    } table[] = {{"F32", RP_DT_F32, 4}, {"F16", RP_DT_F16, 2}, {"BF16", RP_DT_BF16, 2},
                 {"U32", -1, 4},        {"I32", -1, 4},       {"U8", -1, 1},
                 {"I8", -1, 1},         {"U16", -1, 2},       {"I16", -1, 2},
                 {"F64", -1, 8},        {"I64", -1, 8},       {"U64", -1, 8},
                 {"BOOL", -1, 1},       {"F8_E4M3", -1, 1},   {"F8_E5M2", -1, 1}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(s, table[i].name) == 0) {
            *elem = table[i].size;
            if (table[i].dt >= 0)
                *dt = (rp_dtype)table[i].dt;
            return table[i].dt >= 0 ? 1 : 0;
        }
    return -1;
}

static rp_status add_tensor(rp_st *st, const char *file, const char *name, json_t *info,
                            const unsigned char *data, uint64_t data_len, rp_err *err)
{
    json_t *dt = json_object_get(info, "dtype"), *shape = json_object_get(info, "shape");
    json_t *offs = json_object_get(info, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || json_array_size(offs) != 2 ||
        json_array_size(shape) > 4)
        return rp_err_set(err, RP_ERR_INVALID, "%s: tensor '%s' has a malformed entry", file,
                          name);
    if (st->n_tensors == st->cap_tensors) {
        int cap = st->cap_tensors ? st->cap_tensors * 2 : 256;
        rp_st_tensor *t = rp_realloc(st->tensors, sizeof *t * (size_t)cap);
        if (!t)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        st->tensors = t;
        st->cap_tensors = cap;
    }
    rp_st_tensor *t = &st->tensors[st->n_tensors];
    memset(t, 0, sizeof *t);
    size_t elem = 0;
    rp_dtype d = RP_DT_F32;
    int known = dtype_from_str(json_string_value(dt), &d, &elem);
    if (known < 0)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "%s: tensor '%s' has unknown dtype %s", file,
                          name, json_string_value(dt));
    snprintf(t->dtype, sizeof t->dtype, "%s", json_string_value(dt));
    t->known = known;
    t->t.dtype = d;
    t->t.n_dims = (int)json_array_size(shape);
    uint64_t n = 1;
    for (int i = 0; i < t->t.n_dims; i++) {
        json_t *v = json_array_get(shape, (size_t)i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1ll << 40))
            return rp_err_set(err, RP_ERR_INVALID, "%s: tensor '%s' has a bad shape", file, name);
        t->t.shape[i] = json_integer_value(v);
        n *= (uint64_t)t->t.shape[i];
    }
    json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b) ||
        (uint64_t)json_integer_value(e) > data_len)
        return rp_err_set(err, RP_ERR_INVALID, "%s: tensor '%s' lies outside the file", file,
                          name);
    uint64_t nb = (uint64_t)(json_integer_value(e) - json_integer_value(b));
    if (nb != n * elem)
        return rp_err_set(err, RP_ERR_INVALID,
                          "%s: tensor '%s' has %llu bytes, its shape needs %llu", file, name,
                          (unsigned long long)nb, (unsigned long long)(n * elem));
    t->name = rp_strdup(name);
    if (!t->name)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    t->t.data = data + json_integer_value(b);
    t->t.n_bytes = nb;
    st->n_tensors++;
    return RP_OK;
}

static rp_status open_file(rp_st *st, const char *path, rp_err *err)
{
    rp_mmap *maps = rp_realloc(st->maps, sizeof *maps * (size_t)(st->n_maps + 1));
    if (!maps)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    st->maps = maps;
    rp_mmap *m = &st->maps[st->n_maps];
    rp_status rc = rp_mmap_open(path, m, err);
    if (rc)
        return rc;
    st->n_maps++;
    const unsigned char *p = m->data;
    if (m->n_bytes < 8)
        return rp_err_set(err, RP_ERR_INVALID, "%s: too short for a safetensors file", path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | p[i];
    if (hlen > MAX_HEADER_BYTES || hlen > m->n_bytes - 8)
        return rp_err_set(err, RP_ERR_INVALID, "%s: header length %llu is impossible", path,
                          (unsigned long long)hlen);
    json_error_t je;
    json_t *h = json_loadb((const char *)p + 8, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(h)) {
        json_decref(h);
        return rp_err_set(err, RP_ERR_INVALID, "%s: bad header JSON: %s", path, je.text);
    }
    const char *name;
    json_t *info;
    rc = RP_OK;
    json_object_foreach(h, name, info)
    {
        if (strcmp(name, "__metadata__") == 0)
            continue;
        if ((rc = add_tensor(st, path, name, info, p + 8 + hlen, m->n_bytes - 8 - hlen, err)))
            break;
    }
    json_decref(h);
    return rc;
}

static int cmp_tensor(const void *a, const void *b)
{
    return strcmp(((const rp_st_tensor *)a)->name, ((const rp_st_tensor *)b)->name);
}

rp_st *rp_st_new(void) { return rp_calloc(1, sizeof(rp_st)); }

rp_status rp_st_add(rp_st *st, const char *name, const char *dtype, int known,
                    const rp_tensor *t, void *owned, rp_err *err)
{
    if (owned) {
        void **o = rp_realloc(st->owned, sizeof *o * (size_t)(st->n_owned + 1));
        if (!o) {
            rp_free(owned);
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        }
        st->owned = o;
        st->owned[st->n_owned++] = owned;
    }
    if (st->n_tensors == st->cap_tensors) {
        int cap = st->cap_tensors ? st->cap_tensors * 2 : 256;
        rp_st_tensor *n = rp_realloc(st->tensors, sizeof *n * (size_t)cap);
        if (!n)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        st->tensors = n;
        st->cap_tensors = cap;
    }
    rp_st_tensor *e = &st->tensors[st->n_tensors];
    memset(e, 0, sizeof *e);
    e->name = rp_strdup(name);
    if (!e->name)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
    e->known = known;
    e->t = *t;
    st->n_tensors++;
    return RP_OK;
}

void rp_st_on_close(rp_st *st, void (*fn)(void *), void *ctx)
{
    st->on_close = fn;
    st->on_close_ctx = ctx;
}

rp_status rp_st_finish(rp_st *st, rp_err *err)
{
    qsort(st->tensors, (size_t)st->n_tensors, sizeof *st->tensors, cmp_tensor);
    for (int i = 1; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i - 1].name, st->tensors[i].name) == 0)
            return rp_err_set(err, RP_ERR_INVALID, "tensor '%s' appears twice",
                              st->tensors[i].name);
    return RP_OK;
}

/* Opens every distinct shard named by the index's weight_map. */
static rp_status open_sharded(rp_st *st, const char *dir, const char *index_path, rp_err *err)
{
    json_error_t je;
    json_t *idx = json_load_file(index_path, 0, &je);
    json_t *wm = idx ? json_object_get(idx, "weight_map") : NULL;
    rp_status rc = RP_OK;
    if (!json_is_object(wm)) {
        rc = rp_err_set(err, RP_ERR_INVALID, "%s: no weight_map", index_path);
        goto out;
    }
    json_t *seen = json_object();
    const char *key;
    json_t *file;
    json_object_foreach(wm, key, file)
    {
        const char *f = json_string_value(file);
        if (!f || strchr(f, '/')) {
            rc = rp_err_set(err, RP_ERR_INVALID, "%s: bad shard name for '%s'", index_path, key);
            break;
        }
        if (json_object_get(seen, f))
            continue;
        json_object_set_new(seen, f, json_true());
        char *path = rp_path_join(dir, f);
        rc = path ? open_file(st, path, err) : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        rp_free(path);
        if (rc)
            break;
    }
    json_decref(seen);
out:
    json_decref(idx);
    return rc;
}

rp_status rp_st_open(const char *dir, rp_st **out, rp_err *err)
{
    rp_st *st = rp_calloc(1, sizeof *st);
    char *single = rp_path_join(dir, "model.safetensors");
    char *index = rp_path_join(dir, "model.safetensors.index.json");
    rp_status rc;
    if (!st || !single || !index) {
        rc = rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (rp_path_exists(index))
        rc = open_sharded(st, dir, index, err);
    else if (rp_path_exists(single))
        rc = open_file(st, single, err);
    else
        rc = rp_err_set(err, RP_ERR_NOT_FOUND,
                        "%s has no model.safetensors or model.safetensors.index.json", dir);
    if (rc)
        goto fail;
    if ((rc = rp_st_finish(st, err)))
        goto fail;
    rp_free(single);
    rp_free(index);
    *out = st;
    return RP_OK;
fail:
    rp_free(single);
    rp_free(index);
    rp_st_close(st);
    return rc;
}

void rp_st_close(rp_st *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n_tensors; i++)
        rp_free((void *)st->tensors[i].name);
    rp_free(st->tensors);
    for (int i = 0; i < st->n_owned; i++)
        rp_free(st->owned[i]);
    rp_free(st->owned);
    if (st->on_close)
        st->on_close(st->on_close_ctx);
    for (int i = 0; i < st->n_maps; i++)
        rp_mmap_close(&st->maps[i]);
    rp_free(st->maps);
    rp_free(st);
}

int rp_st_count(const rp_st *st) { return st->n_tensors; }
const rp_st_tensor *rp_st_at(const rp_st *st, int i) { return &st->tensors[i]; }

const rp_st_tensor *rp_st_find(const rp_st *st, const char *name)
{
    rp_st_tensor key = {.name = name};
    return bsearch(&key, st->tensors, (size_t)st->n_tensors, sizeof key, cmp_tensor);
}

rp_st_tensor *rp_st_at_mut(rp_st *st, int i) { return &st->tensors[i]; }

rp_st_tensor *rp_st_find_mut(rp_st *st, const char *name)
{
    rp_st_tensor key = {.name = name};
    return bsearch(&key, st->tensors, (size_t)st->n_tensors, sizeof key, cmp_tensor);
}
