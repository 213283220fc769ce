/* chat/jinja_value.h - the values a Jinja template computes with, modelled on Python's.
 *
 * A jv is a small tagged value passed by copy. Scalars live inside it; strings, lists and dicts
 * point into the render arena (or the template's arena for literals), so nothing is reference
 * counted: everything a render allocates is freed at once with its arena. Lists and dicts are
 * mutable in place only where Jinja2's immutable sandbox allows it (namespace attributes).
 *
 * Python semantics kept: bool is an int (True == 1, True + 1 == 2), str() and repr() of every
 * value as Python prints it (None, True, [1, 'a'], {'k': 1.5}), float repr is the shortest
 * round-trip form, dicts keep insertion order, tuples print with parentheses.
 *
 * Ownership: values borrow arena memory; the arena passed to a constructor must outlive them.
 * Threading: a value is used by one render at a time (template literals are read-only).
 * Errors:    constructors return -1 when the arena runs out of memory (callers report NOMEM).
 */
#ifndef RP_CHAT_JINJA_VALUE_H
#define RP_CHAT_JINJA_VALUE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/arena.h"
#include "base/buf.h"

typedef enum jv_type {
    JV_UNDEF = 0, /* Jinja2 Undefined; .s holds the hint for the error it raises ("'x' is undefined") */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,   /* also tuples (JV_F_TUPLE) */
    JV_DICT,
    JV_NS,     /* namespace(): a dict whose keys are attributes */
    JV_FUNC,   /* built-in global function (range, namespace, raise_exception, ...) */
    JV_MACRO,  /* a {% macro %} closure */
    JV_METHOD, /* a bound method of a str/dict/list/loop value */
    JV_LOOP,   /* the loop variable of a for loop */
} jv_type;

enum {
    JV_F_TUPLE = 1,  /* JV_LIST printed as a tuple */
    JV_F_UNSAFE = 2, /* JV_UNDEF made by the sandbox: calling it raises SecurityError */
    JV_F_SAFE = 4,   /* JV_STR marked safe (markupsafe.Markup): "+" escapes plain operands */
    JV_F_GEN = 8,    /* JV_LIST that Python holds as a lazy iterator (map, select, ...): always
                      * true, no len(), not JSON serializable, not subscriptable */
    JV_F_GROUP = 16, /* a (grouper, list) tuple from groupby: .grouper and .list attributes */
    JV_F_RANGE = 32, /* JV_LIST made by range(): prints as range(a, b), not JSON serializable */
    JV_F_KEYS = 64,  /* dict.keys() view; with JV_F_VALUES: dict.items(); alone: dict.values() */
    JV_F_VALUES = 128,
};
#define JV_F_VIEW (JV_F_KEYS | JV_F_VALUES)

typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;

typedef struct jv {
    uint8_t type;
    uint8_t flags;
    uint32_t n; /* JV_STR: byte length */
    union {
        int64_t i; /* JV_INT, JV_BOOL */
        double f;
        const char *s; /* JV_STR bytes (not NUL-terminated), JV_UNDEF hint (NUL-terminated) */
        jv_list *l;
        jv_dict *d; /* JV_DICT, JV_NS */
        const void *p; /* JV_FUNC, JV_MACRO, JV_METHOD, JV_LOOP: owner-defined */
    } u;
} jv;

struct jv_list {
    jv *items;
    size_t n, cap;
    size_t pos; /* JV_F_GEN: items before pos were consumed (a Python iterator runs once) */
    int64_t range_start, range_stop, range_step; /* JV_F_RANGE: the range() arguments */
    const char *lazy_error; /* JV_F_GEN: the error Python's generator raises when consumed */
};

struct jv_dict {
    jv *keys;
    jv *vals;
    size_t n, cap;
};

/* memcpy that accepts (NULL, 0): empty lists have no item array. */
static inline void jv_copy(void *dst, const void *src, size_t n_bytes)
{
    if (n_bytes)
        memcpy(dst, src, n_bytes);
}

static inline jv jv_undef(const char *hint) { return (jv){.type = JV_UNDEF, .u.s = hint}; }
static inline jv jv_none(void) { return (jv){.type = JV_NONE}; }
static inline jv jv_bool(bool b) { return (jv){.type = JV_BOOL, .u.i = b ? 1 : 0}; }
static inline jv jv_int(int64_t i) { return (jv){.type = JV_INT, .u.i = i}; }
static inline jv jv_float(double f) { return (jv){.type = JV_FLOAT, .u.f = f}; }
/* Borrows s (must outlive the value). */
static inline jv jv_str(const char *s, size_t n) { return (jv){.type = JV_STR, .n = (uint32_t)n, .u.s = s}; }

/* Copies s into the arena. Returns -1 on NOMEM or strings over 4 GiB. */
int jv_str_dup(rp_arena *a, const char *s, size_t n, jv *out);
int jv_list_new(rp_arena *a, size_t cap, jv *out);
int jv_dict_new(rp_arena *a, size_t cap, jv *out);
int jv_list_push(rp_arena *a, jv_list *l, jv v);
/* Inserts or replaces key (Python dict semantics: 1 == 1.0 == True). */
int jv_dict_set(rp_arena *a, jv_dict *d, jv key, jv val);
/* Returns the value slot for key, or NULL. */
jv *jv_dict_get(const jv_dict *d, jv key);
jv *jv_dict_get_str(const jv_dict *d, const char *s, size_t n);

static inline bool jv_is_num(jv v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }
static inline bool jv_is_seq(jv v) { return v.type == JV_LIST; }
static inline bool jv_is_map(jv v) { return v.type == JV_DICT; }
static inline double jv_num(jv v) { return v.type == JV_FLOAT ? v.u.f : (double)v.u.i; }

/* Python truthiness. */
bool jv_truthy(jv v);
/* Python ==. */
bool jv_equal(jv a, jv b);
/* Python ordering: sets *cmp to <0, 0, >0; returns -1 when the types do not order (TypeError). */
int jv_compare(jv a, jv b, int *cmp);
/* Python type name as in error messages: 'str', 'int', 'dict', 'list', 'NoneType', ... */
const char *jv_type_name(jv v);

/* Appends str(v) (as Jinja2 prints {{ v }}) or repr(v). Return -1 on NOMEM. */
int jv_write_str(rp_buf *b, jv v);
int jv_write_repr(rp_buf *b, jv v);
/* Python repr of a float (shortest round-trip, 1e+16 style exponents, inf/nan). */
int jv_write_float(rp_buf *b, double f);

/* str(v) as a jv string: strings pass through, everything else is printed into the arena. */
int jv_to_str(rp_arena *a, jv v, jv *out);

/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys). indent NULL: no newlines,
 * else the string repeated per level; item_sep/key_sep NULL: Python's defaults for the indent.
 * Returns 0, -1 on NOMEM, -2 when v holds something JSON cannot encode (its Python type name
 * in *bad_type), -3 when sort_keys meets keys that do not order. */
int jv_write_json(rp_buf *b, jv v, const char *indent, const char *item_sep, const char *key_sep,
                  bool sort_keys, const char **bad_type);

/* Converts a jansson value (deep copy into the arena). Returns -1 on NOMEM. */
int jv_from_json(rp_arena *a, const json_t *j, jv *out);

#endif
