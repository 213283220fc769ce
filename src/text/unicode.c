/* text/unicode.c - UTF-8 and character classes for the tokenizer (see unicode.h). */
#include "text/unicode.h"

#include <utf8proc.h>

int rp_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const uint8_t *u = (const uint8_t *)s;
    uint8_t c = u[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (n < (size_t)len)
        return 0;
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (u[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

int rp_utf8_encode(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

int rp_utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int l = rp_utf8_decode(s + i, n - i, &cp);
        if (!l)
            return 0;
        i += (size_t)l;
    }
    return 1;
}

/* Number of bytes of s that form a valid prefix of some UTF-8 sequence (1..3), or 0 when
 * s[0] cannot start one; sets *complete when they are a whole sequence. */
static int valid_prefix_len(const uint8_t *u, size_t n, int *complete)
{
    uint8_t c = u[0];
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    *complete = 0;
    if (c < 0x80) {
        *complete = 1;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    int i = 1;
    for (; i < need && (size_t)i < n; i++) {
        uint8_t b = u[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h)
            return i; /* i bytes were a valid prefix; sequence broken */
    }
    if (i == need)
        *complete = 1;
    return i;
}

size_t rp_utf8_complete_prefix(const char *s, size_t n, int *bad)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    *bad = 0;
    while (i < n) {
        int complete;
        int l = valid_prefix_len(u + i, n - i, &complete);
        if (complete) {
            i += (size_t)l;
            continue;
        }
        /* incomplete at the end of the buffer, or broken */
        if (l > 0 && i + (size_t)l == n)
            return i;
        *bad = 1;
        return i;
    }
    return i;
}

int rp_utf8_invalid_len(const char *s, size_t n)
{
    int complete;
    int l = valid_prefix_len((const uint8_t *)s, n, &complete);
    return l > 0 ? l : 1;
}

int rp_uni_is_space(uint32_t cp)
{
    return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

static int cat(uint32_t cp)
{
    return utf8proc_category((utf8proc_int32_t)cp);
}

int rp_uni_is_alnum(uint32_t cp)
{
    if (cp < 128)
        return (cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z');
    int c = cat(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

int rp_uni_is_numeric(uint32_t cp)
{
    if (cp < 128)
        return cp >= '0' && cp <= '9';
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}

int rp_uni_is_punct(uint32_t cp)
{
    if (cp < 128)
        return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

int rp_uni_is_mark(uint32_t cp)
{
    int c = cat(cp);
    return c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME;
}

int rp_uni_is_control(uint32_t cp)
{
    if (cp == '\t' || cp == '\n' || cp == '\r')
        return 0;
    int c = cat(cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF;
}

int rp_uni_is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* GPT-2: printable bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF map to themselves; the other 68
 * bytes map, in order, to 256, 257, ... */
uint32_t rp_bytelevel_cp(uint8_t b)
{
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))
        return b;
    /* rank of b among the unmapped bytes */
    uint32_t r;
    if (b <= 0x20)
        r = b;                   /* 0..32 -> 0..32 */
    else if (b == 0x7F)
        r = 33;
    else if (b <= 0xA0)
        r = 34 + (b - 0x80);     /* 0x80..0xA0 -> 34..66 */
    else
        r = 67;                  /* 0xAD */
    return 256 + r;
}

int rp_bytelevel_byte(uint32_t cp)
{
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF))
        return (int)cp;
    if (cp < 256 || cp > 256 + 67)
        return -1;
    uint32_t r = cp - 256;
    if (r <= 32)
        return (int)r;
    if (r == 33)
        return 0x7F;
    if (r <= 66)
        return (int)(0x80 + (r - 34));
    return 0xAD;
}
