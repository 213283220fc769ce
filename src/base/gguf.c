/* base/gguf.c - GGUF container reader (see gguf.h). One pass over the header builds small
 * index tables (kv entries, string-array element offsets, tensor infos); every read is
 * bounds-checked against the mapping.
 */
#include "base/gguf.h"

#include <string.h>

#include "base/alloc.h"
#include "base/file.h"

#define MAX_KV (1u << 20)
#define MAX_TENSORS (1u << 20)

typedef struct kv {
    const char *key;
    size_t key_len;
    rp_gguf_type type;
    uint64_t off;        /* value's file offset (for arrays: first element) */
    rp_gguf_type elem;   /* arrays */
    uint64_t n;          /* arrays: element count */
    uint64_t str_index;  /* arrays of strings: first slot in g->str_offs */
} kv;

struct rp_gguf {
    rp_mmap map;
    int mapped;
    const uint8_t *p;
    size_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_off;
    kv *kvs;
    int64_t n_kv;
    uint64_t *str_offs; /* offsets of string elements (their u64 length field) */
    uint64_t n_str_offs;
    rp_gguf_tensor *tensors;
    int64_t n_tensors;
};

typedef struct cur {
    const uint8_t *p;
    size_t size, pos;
} cur;

static int rd(cur *c, void *out, size_t n)
{
    if (n > c->size - c->pos)
        return -1;
    memcpy(out, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int skip(cur *c, uint64_t n)
{
    if (n > c->size - c->pos)
        return -1;
    c->pos += (size_t)n;
    return 0;
}

static int rd_str(cur *c, const char **s, size_t *len)
{
    uint64_t n;
    if (rd(c, &n, 8) || n > c->size - c->pos)
        return -1;
    *s = (const char *)c->p + c->pos;
    *len = (size_t)n;
    c->pos += (size_t)n;
    return 0;
}

static size_t scalar_size(rp_gguf_type t)
{
    switch (t) {
    case RP_GGUF_UINT8:
    case RP_GGUF_INT8:
    case RP_GGUF_BOOL:
        return 1;
    case RP_GGUF_UINT16:
    case RP_GGUF_INT16:
        return 2;
    case RP_GGUF_UINT32:
    case RP_GGUF_INT32:
    case RP_GGUF_FLOAT32:
        return 4;
    case RP_GGUF_UINT64:
    case RP_GGUF_INT64:
    case RP_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *rp_gguf_type_name(rp_gguf_type t)
{
    static const char *const names[] = {"u8",  "i8",   "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < RP_ARRAY_LEN(names) ? names[t] : "?";
}

typedef struct ggml_type_size {
    uint32_t block, bytes;
} ggml_type_size;

static const ggml_type_size k_types[] = {
    [0] = {1, 4},     [1] = {1, 2},     [2] = {32, 18},   [3] = {32, 20},   [6] = {32, 22},
    [7] = {32, 24},   [8] = {32, 34},   [9] = {32, 36},   [10] = {256, 84}, [11] = {256, 110},
    [12] = {256, 144}, [13] = {256, 176}, [14] = {256, 210}, [15] = {256, 292}, [16] = {256, 66},
    [17] = {256, 74}, [18] = {256, 98}, [19] = {256, 50}, [20] = {32, 18},  [21] = {256, 110},
    [22] = {256, 82}, [23] = {256, 136}, [24] = {1, 1},   [25] = {1, 2},    [26] = {1, 4},
    [27] = {1, 8},    [28] = {1, 8},    [29] = {256, 56}, [30] = {1, 2},    [34] = {256, 54},
    [35] = {256, 66}, [39] = {32, 17},
};

uint64_t rp_gguf_type_bytes(uint32_t type, int64_t n)
{
    if (type >= RP_ARRAY_LEN(k_types) || !k_types[type].block || n < 0)
        return 0;
    const ggml_type_size *t = &k_types[type];
    if ((uint64_t)n % t->block)
        return 0;
    uint64_t blocks = (uint64_t)n / t->block;
    if (blocks > UINT64_MAX / t->bytes)
        return 0;
    return blocks * t->bytes;
}

static rp_status bad(rp_err *err, const char *what, size_t pos)
{
    return rp_err_set(err, RP_ERR_INVALID, "gguf: %s (at byte %zu)", what, pos);
}

static rp_status parse(rp_gguf *g, rp_err *err)
{
    cur c = {g->p, g->size, 0};
    char magic[4];
    uint64_t n_tensors, n_kv;
    if (rd(&c, magic, 4) || memcmp(magic, "GGUF", 4) != 0)
        return bad(err, "not a GGUF file (magic)", 0);
    if (rd(&c, &g->version, 4))
        return bad(err, "truncated header", c.pos);
    if (g->version < 2 || g->version > 3)
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "gguf: version %u is not supported",
                          g->version);
    if (rd(&c, &n_tensors, 8) || rd(&c, &n_kv, 8))
        return bad(err, "truncated header", c.pos);
    if (n_kv > MAX_KV || n_tensors > MAX_TENSORS)
        return bad(err, "implausible kv or tensor count", c.pos);
    g->kvs = rp_calloc(n_kv ? n_kv : 1, sizeof(kv));
    if (!g->kvs)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    /* pass 1: kvs; count string-array elements */
    uint64_t n_strs = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        kv *e = &g->kvs[i];
        uint32_t t;
        if (rd_str(&c, &e->key, &e->key_len) || rd(&c, &t, 4))
            return bad(err, "truncated metadata key", c.pos);
        if (t >= RP_GGUF_TYPE_COUNT)
            return bad(err, "unknown metadata type", c.pos);
        e->type = (rp_gguf_type)t;
        if (e->type == RP_GGUF_ARRAY) {
            uint32_t et;
            if (rd(&c, &et, 4) || rd(&c, &e->n, 8))
                return bad(err, "truncated array header", c.pos);
            if (et >= RP_GGUF_TYPE_COUNT || et == RP_GGUF_ARRAY)
                return bad(err, "bad array element type", c.pos);
            e->elem = (rp_gguf_type)et;
            e->off = c.pos;
            if (e->elem == RP_GGUF_STRING) {
                if (e->n > (c.size - c.pos) / 8)
                    return bad(err, "string array longer than the file", c.pos);
                for (uint64_t k = 0; k < e->n; k++) {
                    const char *s;
                    size_t l;
                    if (rd_str(&c, &s, &l))
                        return bad(err, "truncated string array", c.pos);
                }
                e->str_index = n_strs;
                n_strs += e->n;
            } else {
                size_t es = scalar_size(e->elem);
                if (e->n > (c.size - c.pos) / es)
                    return bad(err, "array longer than the file", c.pos);
                c.pos += (size_t)(e->n * es);
            }
        } else if (e->type == RP_GGUF_STRING) {
            const char *s;
            size_t l;
            e->off = c.pos;
            if (rd_str(&c, &s, &l))
                return bad(err, "truncated string value", c.pos);
        } else {
            e->off = c.pos;
            if (skip(&c, scalar_size(e->type)))
                return bad(err, "truncated value", c.pos);
        }
        g->n_kv = (int64_t)i + 1;
    }
    size_t after_kv = c.pos;
    /* string offsets */
    if (n_strs) {
        g->str_offs = rp_alloc_tagged((size_t)n_strs * sizeof(uint64_t), RP_TAG_MISC);
        if (!g->str_offs)
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < g->n_kv; i++) {
            kv *e = &g->kvs[i];
            if (e->type != RP_GGUF_ARRAY || e->elem != RP_GGUF_STRING)
                continue;
            cur s = {g->p, g->size, (size_t)e->off};
            for (uint64_t k = 0; k < e->n; k++) {
                const char *str;
                size_t l;
                g->str_offs[e->str_index + k] = s.pos;
                (void)rd_str(&s, &str, &l); /* checked in pass 1 */
            }
        }
        g->n_str_offs = n_strs;
    }
    c.pos = after_kv;
    g->alignment = 32;
    int64_t ia = rp_gguf_find(g, "general.alignment");
    if (ia >= 0) {
        uint32_t a;
        if (rp_gguf_get_u32(g, "general.alignment", &a, err))
            return rp_err_wrap(err, "gguf: general.alignment");
        if (a == 0 || (a & (a - 1)) != 0)
            return bad(err, "general.alignment is not a power of two", c.pos);
        g->alignment = a;
    }
    g->tensors = rp_calloc(n_tensors ? n_tensors : 1, sizeof(rp_gguf_tensor));
    if (!g->tensors)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n_tensors; i++) {
        rp_gguf_tensor *t = &g->tensors[i];
        uint32_t nd;
        if (rd_str(&c, &t->name, &t->name_len) || rd(&c, &nd, 4))
            return bad(err, "truncated tensor info", c.pos);
        if (nd == 0 || nd > RP_GGUF_MAX_DIMS)
            return bad(err, "tensor with a bad dimension count", c.pos);
        t->n_dims = (int)nd;
        uint64_t ne = 1;
        for (int d = 0; d < RP_GGUF_MAX_DIMS; d++)
            t->dims[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t v;
            if (rd(&c, &v, 8))
                return bad(err, "truncated tensor dims", c.pos);
            if (v > (uint64_t)INT64_MAX || (v && ne > (uint64_t)INT64_MAX / v))
                return bad(err, "tensor dims overflow", c.pos);
            t->dims[d] = (int64_t)v;
            ne *= v;
        }
        if (rd(&c, &t->type, 4) || rd(&c, &t->offset, 8))
            return bad(err, "truncated tensor info", c.pos);
        t->n_bytes = rp_gguf_type_bytes(t->type, (int64_t)ne);
        if (t->offset % g->alignment)
            return bad(err, "tensor offset is not aligned", c.pos);
        g->n_tensors = (int64_t)i + 1;
    }
    uint64_t data_off = ((uint64_t)c.pos + g->alignment - 1) / g->alignment * g->alignment;
    g->data_off = data_off;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        rp_gguf_tensor *t = &g->tensors[i];
        if (t->n_bytes == 0) /* unknown type: no data pointer */
            continue;
        if (data_off > g->size || t->offset > g->size - data_off ||
            t->n_bytes > g->size - data_off - t->offset)
            return rp_err_set(err, RP_ERR_INVALID,
                              "gguf: tensor '%.*s' data lies outside the file",
                              (int)(t->name_len > 200 ? 200 : t->name_len), t->name);
        t->data = g->p + data_off + t->offset;
    }
    return RP_OK;
}

rp_status rp_gguf_open_mem(const void *data, size_t n_bytes, rp_gguf **out, rp_err *err)
{
    *out = NULL;
    rp_gguf *g = rp_calloc(1, sizeof(*g));
    if (!g)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    g->p = data;
    g->size = n_bytes;
    rp_status st = parse(g, err);
    if (st) {
        rp_gguf_close(g);
        return st;
    }
    *out = g;
    return RP_OK;
}

rp_status rp_gguf_open(const char *path, rp_gguf **out, rp_err *err)
{
    *out = NULL;
    rp_mmap m;
    rp_status st = rp_mmap_open(path, &m, err);
    if (st)
        return st;
    st = rp_gguf_open_mem(m.data, m.n_bytes, out, err);
    if (st) {
        rp_mmap_close(&m);
        return rp_err_wrap(err, "%s", path);
    }
    (*out)->map = m;
    (*out)->mapped = 1;
    return RP_OK;
}

void rp_gguf_close(rp_gguf *g)
{
    if (!g)
        return;
    if (g->mapped)
        rp_mmap_close(&g->map);
    rp_free(g->kvs);
    rp_free(g->str_offs);
    rp_free(g->tensors);
    rp_free(g);
}

uint32_t rp_gguf_version(const rp_gguf *g)
{
    return g->version;
}

uint32_t rp_gguf_alignment(const rp_gguf *g)
{
    return g->alignment;
}

uint64_t rp_gguf_data_offset(const rp_gguf *g)
{
    return g->data_off;
}

const void *rp_gguf_base(const rp_gguf *g, size_t *n_bytes)
{
    if (n_bytes)
        *n_bytes = g->size;
    return g->p;
}

int64_t rp_gguf_n_kv(const rp_gguf *g)
{
    return g->n_kv;
}

int64_t rp_gguf_find(const rp_gguf *g, const char *key)
{
    size_t n = strlen(key);
    for (int64_t i = 0; i < g->n_kv; i++)
        if (g->kvs[i].key_len == n && memcmp(g->kvs[i].key, key, n) == 0)
            return i;
    return -1;
}

const char *rp_gguf_key(const rp_gguf *g, int64_t i, size_t *len)
{
    if (i < 0 || i >= g->n_kv)
        return NULL;
    if (len)
        *len = g->kvs[i].key_len;
    return g->kvs[i].key;
}

rp_gguf_type rp_gguf_kv_type(const rp_gguf *g, int64_t i)
{
    if (i < 0 || i >= g->n_kv)
        return RP_GGUF_TYPE_COUNT;
    return g->kvs[i].type;
}

/* Reads a scalar integer value of type t at off as int64 (u64 beyond INT64_MAX fails). */
static int read_int(const uint8_t *p, rp_gguf_type t, int64_t *v, uint64_t *uv, int *is_neg)
{
    uint8_t u8;
    int8_t i8;
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    *is_neg = 0;
    switch (t) {
    case RP_GGUF_UINT8:
    case RP_GGUF_BOOL:
        memcpy(&u8, p, 1), *uv = u8;
        break;
    case RP_GGUF_INT8:
        memcpy(&i8, p, 1), *v = i8, *is_neg = i8 < 0, *uv = (uint64_t)(int64_t)i8;
        return 0;
    case RP_GGUF_UINT16:
        memcpy(&u16, p, 2), *uv = u16;
        break;
    case RP_GGUF_INT16:
        memcpy(&i16, p, 2), *v = i16, *is_neg = i16 < 0, *uv = (uint64_t)(int64_t)i16;
        return 0;
    case RP_GGUF_UINT32:
        memcpy(&u32, p, 4), *uv = u32;
        break;
    case RP_GGUF_INT32:
        memcpy(&i32, p, 4), *v = i32, *is_neg = i32 < 0, *uv = (uint64_t)(int64_t)i32;
        return 0;
    case RP_GGUF_UINT64:
        memcpy(&u64, p, 8), *uv = u64;
        *v = u64 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u64;
        return u64 > (uint64_t)INT64_MAX ? 1 : 0;
    case RP_GGUF_INT64:
        memcpy(&i64, p, 8), *v = i64, *is_neg = i64 < 0, *uv = (uint64_t)i64;
        return 0;
    default:
        return -1;
    }
    *v = (int64_t)*uv;
    return 0;
}

static const kv *lookup(const rp_gguf *g, const char *key, rp_err *err)
{
    int64_t i = rp_gguf_find(g, key);
    if (i < 0) {
        rp_err_set(err, RP_ERR_NOT_FOUND, "gguf: no key '%s'", key);
        return NULL;
    }
    return &g->kvs[i];
}

static rp_status get_int(const rp_gguf *g, const char *key, int64_t *v, uint64_t *uv,
                         int *is_neg, int *big, rp_err *err)
{
    const kv *e = lookup(g, key, err);
    if (!e)
        return RP_ERR_NOT_FOUND;
    int r = read_int(g->p + e->off, e->type, v, uv, is_neg);
    if (r < 0)
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' is %s, not an integer", key,
                          rp_gguf_type_name(e->type));
    *big = r == 1;
    return RP_OK;
}

rp_status rp_gguf_get_i64(const rp_gguf *g, const char *key, int64_t *out, rp_err *err)
{
    int64_t v = 0;
    uint64_t uv = 0;
    int neg = 0, big = 0;
    rp_status st = get_int(g, key, &v, &uv, &neg, &big, err);
    if (st)
        return st;
    if (big)
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' does not fit in i64", key);
    *out = v;
    return RP_OK;
}

rp_status rp_gguf_get_u64(const rp_gguf *g, const char *key, uint64_t *out, rp_err *err)
{
    int64_t v = 0;
    uint64_t uv = 0;
    int neg = 0, big = 0;
    rp_status st = get_int(g, key, &v, &uv, &neg, &big, err);
    if (st)
        return st;
    if (neg)
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' is negative", key);
    *out = uv;
    return RP_OK;
}

rp_status rp_gguf_get_i32(const rp_gguf *g, const char *key, int32_t *out, rp_err *err)
{
    int64_t v = 0;
    rp_status st = rp_gguf_get_i64(g, key, &v, err);
    if (st)
        return st;
    if (v < INT32_MIN || v > INT32_MAX)
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' does not fit in i32", key);
    *out = (int32_t)v;
    return RP_OK;
}

rp_status rp_gguf_get_u32(const rp_gguf *g, const char *key, uint32_t *out, rp_err *err)
{
    uint64_t v = 0;
    rp_status st = rp_gguf_get_u64(g, key, &v, err);
    if (st)
        return st;
    if (v > UINT32_MAX)
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' does not fit in u32", key);
    *out = (uint32_t)v;
    return RP_OK;
}

rp_status rp_gguf_get_f64(const rp_gguf *g, const char *key, double *out, rp_err *err)
{
    const kv *e = lookup(g, key, err);
    if (!e)
        return RP_ERR_NOT_FOUND;
    if (e->type == RP_GGUF_FLOAT32) {
        float f;
        memcpy(&f, g->p + e->off, 4);
        *out = f;
    } else if (e->type == RP_GGUF_FLOAT64) {
        memcpy(out, g->p + e->off, 8);
    } else {
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' is %s, not a float", key,
                          rp_gguf_type_name(e->type));
    }
    return RP_OK;
}

rp_status rp_gguf_get_f32(const rp_gguf *g, const char *key, float *out, rp_err *err)
{
    double d;
    rp_status st = rp_gguf_get_f64(g, key, &d, err);
    if (!st)
        *out = (float)d;
    return st;
}

rp_status rp_gguf_get_bool(const rp_gguf *g, const char *key, int *out, rp_err *err)
{
    int64_t v = 0;
    uint64_t uv = 0;
    int neg = 0, big = 0;
    rp_status st = get_int(g, key, &v, &uv, &neg, &big, err);
    if (st)
        return st;
    *out = uv != 0;
    return RP_OK;
}

rp_status rp_gguf_get_str(const rp_gguf *g, const char *key, const char **s, size_t *len,
                          rp_err *err)
{
    const kv *e = lookup(g, key, err);
    if (!e)
        return RP_ERR_NOT_FOUND;
    if (e->type != RP_GGUF_STRING)
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' is %s, not a string", key,
                          rp_gguf_type_name(e->type));
    uint64_t n;
    memcpy(&n, g->p + e->off, 8);
    *s = (const char *)g->p + e->off + 8;
    *len = (size_t)n;
    return RP_OK;
}

rp_status rp_gguf_get_strdup(const rp_gguf *g, const char *key, char **out, rp_err *err)
{
    const char *s;
    size_t n;
    rp_status st = rp_gguf_get_str(g, key, &s, &n, err);
    if (st)
        return st;
    *out = rp_strndup(s, n);
    return *out ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

rp_status rp_gguf_get_arr(const rp_gguf *g, const char *key, rp_gguf_type *elem_type,
                          uint64_t *n, rp_err *err)
{
    const kv *e = lookup(g, key, err);
    if (!e)
        return RP_ERR_NOT_FOUND;
    if (e->type != RP_GGUF_ARRAY)
        return rp_err_set(err, RP_ERR_INVALID, "gguf: key '%s' is %s, not an array", key,
                          rp_gguf_type_name(e->type));
    *elem_type = e->elem;
    *n = e->n;
    return RP_OK;
}

static const kv *arr_at(const rp_gguf *g, int64_t i_kv, uint64_t i)
{
    if (i_kv < 0 || i_kv >= g->n_kv)
        return NULL;
    const kv *e = &g->kvs[i_kv];
    if (e->type != RP_GGUF_ARRAY || i >= e->n)
        return NULL;
    return e;
}

rp_status rp_gguf_arr_str(const rp_gguf *g, int64_t i_kv, uint64_t i, const char **s,
                          size_t *len)
{
    const kv *e = arr_at(g, i_kv, i);
    if (!e || e->elem != RP_GGUF_STRING)
        return RP_ERR_INVALID;
    uint64_t off = g->str_offs[e->str_index + i], n;
    memcpy(&n, g->p + off, 8);
    *s = (const char *)g->p + off + 8;
    *len = (size_t)n;
    return RP_OK;
}

rp_status rp_gguf_arr_i64(const rp_gguf *g, int64_t i_kv, uint64_t i, int64_t *out)
{
    const kv *e = arr_at(g, i_kv, i);
    if (!e)
        return RP_ERR_INVALID;
    size_t es = scalar_size(e->elem);
    if (!es || e->elem == RP_GGUF_FLOAT32 || e->elem == RP_GGUF_FLOAT64)
        return RP_ERR_INVALID;
    int64_t v;
    uint64_t uv;
    int neg;
    if (read_int(g->p + e->off + i * es, e->elem, &v, &uv, &neg) != 0)
        return RP_ERR_INVALID;
    *out = v;
    return RP_OK;
}

rp_status rp_gguf_arr_f64(const rp_gguf *g, int64_t i_kv, uint64_t i, double *out)
{
    const kv *e = arr_at(g, i_kv, i);
    if (!e)
        return RP_ERR_INVALID;
    const uint8_t *p = g->p + e->off;
    if (e->elem == RP_GGUF_FLOAT32) {
        float f;
        memcpy(&f, p + i * 4, 4);
        *out = f;
    } else if (e->elem == RP_GGUF_FLOAT64) {
        memcpy(out, p + i * 8, 8);
    } else {
        return RP_ERR_INVALID;
    }
    return RP_OK;
}

const void *rp_gguf_arr_data(const rp_gguf *g, int64_t i_kv, size_t *elem_size, uint64_t *n)
{
    if (i_kv < 0 || i_kv >= g->n_kv)
        return NULL;
    const kv *e = &g->kvs[i_kv];
    if (e->type != RP_GGUF_ARRAY || e->elem == RP_GGUF_STRING)
        return NULL;
    *elem_size = scalar_size(e->elem);
    *n = e->n;
    return g->p + e->off;
}

int64_t rp_gguf_n_tensors(const rp_gguf *g)
{
    return g->n_tensors;
}

int64_t rp_gguf_find_tensor(const rp_gguf *g, const char *name)
{
    size_t n = strlen(name);
    for (int64_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i].name_len == n && memcmp(g->tensors[i].name, name, n) == 0)
            return i;
    return -1;
}

rp_status rp_gguf_tensor_info(const rp_gguf *g, int64_t i, rp_gguf_tensor *out)
{
    if (i < 0 || i >= g->n_tensors)
        return RP_ERR_INVALID;
    *out = g->tensors[i];
    return RP_OK;
}
