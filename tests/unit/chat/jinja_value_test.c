/* Unit tests for src/chat/jinja_value.c: Python's float repr, str()/repr() of containers,
 * json.dumps formatting, equality and ordering. Expected strings are CPython's output. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "chat/jinja_value.h"

static void float_is(double f, const char *want)
{
    rp_buf b = {0};
    cr_assert_eq(jv_write_float(&b, f), 0);
    cr_assert_str_eq(b.data, want, "repr(%.17g)", f);
    rp_buf_deinit(&b);
}

Test(jinja_value, float_repr_matches_python)
{
    float_is(0.0, "0.0");
    float_is(-0.0, "-0.0");
    float_is(1.0, "1.0");
    float_is(0.1, "0.1");
    float_is(1.0 / 3, "0.3333333333333333");
    float_is(2.0 / 3, "0.6666666666666666");
    float_is(1e16, "1e+16");
    float_is(1e15, "1000000000000000.0");
    float_is(123456789012345678.0, "1.2345678901234568e+17");
    float_is(1e-4, "0.0001");
    float_is(1e-5, "1e-05");
    float_is(1.5e-7, "1.5e-07");
    float_is(5e-324, "5e-324");
    float_is(1.7976931348623157e308, "1.7976931348623157e+308");
    float_is(-2.5, "-2.5");
    float_is(1e22, "1e+22");
    float_is(12345.678, "12345.678");
    float_is(0.1 + 0.2, "0.30000000000000004");
    float_is(INFINITY, "inf");
    float_is(NAN, "nan");
}

static char *json_of(const char *text, const char *indent, const char *item, const char *key, bool sort)
{
    rp_arena *a = rp_arena_new(0);
    json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
    cr_assert_not_null(j);
    jv v;
    cr_assert_eq(jv_from_json(a, j, &v), 0);
    rp_buf b = {0};
    const char *bad = NULL;
    cr_assert_eq(jv_write_json(&b, v, indent, item, key, sort, &bad), 0);
    json_decref(j);
    rp_arena_free(a);
    return rp_buf_take(&b);
}

Test(jinja_value, json_dumps_layout)
{
    char *s = json_of("{\"b\":[1,2.0,null,true],\"a\":\"\\u00e9\\\"\\n\\u0001\",\"c\":{}}", NULL, NULL, NULL, false);
    cr_assert_str_eq(s, "{\"b\": [1, 2.0, null, true], \"a\": \"é\\\"\\n\\u0001\", \"c\": {}}");
    rp_free(s);
    s = json_of("{\"b\":[1,[]],\"a\":1}", "  ", NULL, NULL, true);
    cr_assert_str_eq(s, "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    []\n  ]\n}");
    rp_free(s);
    s = json_of("[1,{\"k\":\"v\"}]", NULL, ",", ":", false);
    cr_assert_str_eq(s, "[1,{\"k\":\"v\"}]");
    rp_free(s);
}

Test(jinja_value, repr_and_str)
{
    rp_arena *a = rp_arena_new(0);
    json_t *j = json_loads("[\"it's\", \"say \\\"hi\\\"\", \"both ' \\\"\", null, false, 3, {\"k\": [1.5]}]", 0, NULL);
    jv v;
    cr_assert_eq(jv_from_json(a, j, &v), 0);
    rp_buf b = {0};
    cr_assert_eq(jv_write_str(&b, v), 0);
    cr_assert_str_eq(b.data, "[\"it's\", 'say \"hi\"', 'both \\' \"', None, False, 3, {'k': [1.5]}]");
    rp_buf_deinit(&b);
    jv tup;
    cr_assert_eq(jv_list_new(a, 1, &tup), 0);
    tup.flags = JV_F_TUPLE;
    tup.u.l->items[tup.u.l->n++] = jv_int(1);
    cr_assert_eq(jv_write_repr(&b, tup), 0);
    cr_assert_str_eq(b.data, "(1,)");
    rp_buf_deinit(&b);
    json_decref(j);
    rp_arena_free(a);
}

Test(jinja_value, equality_and_order)
{
    cr_assert(jv_equal(jv_int(1), jv_float(1.0)));
    cr_assert(jv_equal(jv_bool(true), jv_int(1)));
    cr_assert(!jv_equal(jv_none(), jv_int(0)));
    cr_assert(jv_equal(jv_undef("a"), jv_undef("b")));
    int c;
    cr_assert_eq(jv_compare(jv_str("a", 1), jv_str("b", 1), &c), 0);
    cr_assert_lt(c, 0);
    cr_assert_eq(jv_compare(jv_str("é", 2), jv_str("z", 1), &c), 0); /* code point order */
    cr_assert_gt(c, 0);
    cr_assert_eq(jv_compare(jv_str("a", 1), jv_int(1), &c), -1); /* TypeError in Python */
    cr_assert(!jv_truthy(jv_str("", 0)));
    cr_assert(jv_truthy(jv_float(0.5)));
}
