/* text/pretok.c - normalizers and pre-tokenizers, with HF `tokenizers` semantics.
 *
 * Regexes come from tokenizer.json (written for Oniguruma) and run through PCRE2 with JIT
 * and Unicode properties; the one translation needed is \s, which Oniguruma defines as
 * Unicode White_Space (NEL and NBSP included) and PCRE2 does not quite.
 */
#include <limits.h>
#include <string.h>
#include <utf8proc.h>

#include "base/alloc.h"
#include "text/tok_impl.h"
#include "text/unicode.h"

#define WS_CLASS "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* ---- patterns -------------------------------------------------------------------------- */

static rp_status translate_regex(const char *re, rp_buf *out)
{
    int in_class = 0;
    for (size_t i = 0; re[i]; i++) {
        char c = re[i];
        rp_status st = RP_OK;
        if (c == '\\' && re[i + 1]) {
            char e = re[i + 1];
            if (e == 's') {
                st = in_class ? rp_buf_puts(out, WS_CLASS) : rp_buf_puts(out, "[" WS_CLASS "]");
            } else if (e == 'S' && !in_class) {
                st = rp_buf_puts(out, "[^" WS_CLASS "]");
            } else {
                st = rp_buf_append(out, re + i, 2);
            }
            i++;
        } else {
            if (c == '[' && !in_class) {
                in_class = 1;
                st = rp_buf_putc(out, c);
                /* a ']' right after '[' or '[^' is literal */
                if (re[i + 1] == '^') {
                    st = st ? st : rp_buf_putc(out, '^');
                    i++;
                }
                if (re[i + 1] == ']') {
                    st = st ? st : rp_buf_puts(out, "\\]");
                    i++;
                }
            } else if (c == '[' && in_class) {
                st = rp_buf_puts(out, "\\["); /* nested '[' is literal in Oniguruma classes here */
            } else if (c == ']' && in_class) {
                in_class = 0;
                st = rp_buf_putc(out, c);
            } else {
                st = rp_buf_putc(out, c);
            }
        }
        if (st)
            return st;
    }
    return RP_OK;
}

/* ---- hand-written matchers for the common pre-tokenizer regexes -------------------------
 *
 * Llama 3 / Qwen2-3 ("A": contractions, [^\r\n\p{L}\p{N}]?\p{L}+, \p{N}{1,k}, punctuation,
 * whitespace) and o200k (gpt-oss: letters split by case) run a match per piece, which PCRE2
 * spends most of its time setting up. These matchers decide a match from the class of each
 * character they look at, simulating the regex's alternatives and backtracking, but only for
 * ASCII: the moment they need the class of a byte >= 0x80 they give up and PCRE2 does that
 * match. A decision that only looked at ASCII characters is PCRE2's decision (every ASCII
 * character is exactly one of letter, digit, whitespace, other), which the tests check by
 * comparing the two matchers on the golden texts and the fuzzer on arbitrary input. */

enum { FAST_NONE, FAST_A, FAST_O200K };

typedef struct fast_def {
    const char *re;
    int kind, max_digits;
} fast_def;

#define CONTR_CI "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define CONTR_AS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define TAIL_A " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define O200K_UP "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define O200K_LO "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"

static const fast_def k_fast[] = {
    {CONTR_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" TAIL_A, FAST_A, 3}, /* Llama 3 */
    {CONTR_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" TAIL_A, FAST_A, 1},      /* Qwen2/3 */
    {CONTR_AS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|" TAIL_A, FAST_A, 3}, /* GGUF */
    {CONTR_AS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|" TAIL_A, FAST_A, 1},
    {CONTR_AS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     FAST_A, 1}, /* Qwen3.5 (marks are not ASCII) */
    {"[^\\r\\n\\p{L}\\p{N}]?" O200K_UP "*" O200K_LO "+" CONTR_CI "?|[^\\r\\n\\p{L}\\p{N}]?" O200K_UP
     "+" O200K_LO "*" CONTR_CI "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     FAST_O200K, 3},
};

/* ASCII classes; C_NA: a byte >= 0x80 (or the end of the text, see cls()) */
enum { C_UP = 1, C_LO = 2, C_DIG = 4, C_WS = 8, C_OTHER = 16, C_NA = 32 };
#define C_LETTER (C_UP | C_LO)

static int fast_kind(const char *re, int *max_digits)
{
    for (size_t i = 0; i < RP_ARRAY_LEN(k_fast); i++)
        if (!strcmp(re, k_fast[i].re)) {
            *max_digits = k_fast[i].max_digits;
            return k_fast[i].kind;
        }
    return FAST_NONE;
}

/* The class of s[i]; the end of the text is its own class (0). */
static inline int cls(const char *s, size_t n, size_t i)
{
    if (i >= n)
        return 0;
    uint8_t c = (uint8_t)s[i];
    if (c >= 0x80)
        return C_NA;
    if (c >= 'a' && c <= 'z')
        return C_LO;
    if (c >= 'A' && c <= 'Z')
        return C_UP;
    if (c >= '0' && c <= '9')
        return C_DIG;
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return C_WS;
    return C_OTHER;
}

/* End of the run of characters of classes `want` from i; -1 when the run stops at a
 * non-ASCII character (whose class is unknown here). */
static inline long run(const char *s, size_t n, size_t i, int want)
{
    int c;
    while ((c = cls(s, n, i)) & want)
        i++;
    return c == C_NA ? -1 : (long)i;
}

static inline int lower(char c)
{
    return c | 0x20;
}

/* A contraction ('s 't 're 've 'm 'll 'd, any case) at s[i] (a quote): its end, 0 when none,
 * -1 when a non-ASCII character would decide. */
static long contraction(const char *s, size_t n, size_t i)
{
    int c1 = cls(s, n, i + 1);
    if (c1 == C_NA)
        return -1;
    if (!(c1 & C_LETTER))
        return 0;
    char a = (char)lower(s[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return (long)i + 2;
    if (a != 'r' && a != 'v' && a != 'l')
        return 0;
    int c2 = cls(s, n, i + 2);
    if (c2 == C_NA)
        return -1;
    if (!(c2 & C_LETTER))
        return 0;
    char b = (char)lower(s[i + 2]);
    return (a == 'l' ? b == 'l' : b == 'e') ? (long)i + 3 : 0;
}

/* The whitespace alternatives shared by both patterns (\s*[\r\n]+|\s+(?!\S)|\s+) at a
 * whitespace character. */
static long fast_space(const char *s, size_t n, size_t pos)
{
    long e = run(s, n, pos, C_WS);
    if (e < 0)
        return -1;
    for (long k = e - 1; k >= (long)pos; k--) /* \s*[\r\n]+: up to the last line break */
        if (s[k] == '\r' || s[k] == '\n')
            return k + 1;
    if ((size_t)e == n || e - (long)pos == 1) /* \s+(?!\S) at the end, else \s+ */
        return e;
    return e - 1; /* \s+(?!\S): all but the last, which is followed by \S */
}

/* ` ?[^\s\p{L}\p{N}]+` followed by [\r\n]* (slash: also '/') */
static long fast_punct(const char *s, size_t n, size_t pos, int slash)
{
    size_t q = pos;
    if (s[q] == ' ') {
        int c = cls(s, n, q + 1);
        if (c == C_NA)
            return -1;
        if (c != C_OTHER)
            return 0;
        q++;
    } else if (cls(s, n, q) != C_OTHER) {
        return 0;
    }
    long e = run(s, n, q, C_OTHER);
    if (e < 0)
        return -1;
    while ((size_t)e < n && (s[e] == '\r' || s[e] == '\n' || (slash && s[e] == '/')))
        e++;
    return e;
}

/* The end of the match at pos (patterns where every position starts a match); -1: PCRE2
 * must decide. */
static long fast_a(const char *s, size_t n, size_t pos, int max_digits)
{
    int c0 = cls(s, n, pos);
    if (c0 == C_NA || c0 == 0)
        return -1;
    if (s[pos] == '\'') {
        long e = contraction(s, n, pos);
        if (e)
            return e;
    }
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c0 & C_LETTER)
        return run(s, n, pos, C_LETTER);
    if ((c0 & (C_WS | C_OTHER)) && s[pos] != '\r' && s[pos] != '\n') {
        int c1 = cls(s, n, pos + 1);
        if (c1 == C_NA)
            return -1;
        if (c1 & C_LETTER)
            return run(s, n, pos + 1, C_LETTER);
    }
    if (c0 == C_DIG) {
        size_t e = pos + 1;
        while ((long)(e - pos) < max_digits && cls(s, n, e) == C_DIG)
            e++;
        if ((long)(e - pos) < max_digits && cls(s, n, e) == C_NA)
            return -1; /* another (non-ASCII) digit may follow */
        return (long)e;
    }
    long e = fast_punct(s, n, pos, 0);
    if (e)
        return e;
    return fast_space(s, n, pos);
}

/* [UP]*[LO]+ (lower_first) or [UP]+[LO]* from q, then an optional contraction: the end, 0 when
 * the alternative fails, -1 when a non-ASCII character would decide. */
static long o200k_word(const char *s, size_t n, size_t q, int lower_first)
{
    long u = run(s, n, q, C_UP);
    if (u < 0)
        return -1;
    long e;
    if (lower_first) {
        if (cls(s, n, (size_t)u) != C_LO)
            return 0; /* backtracking the [UP]* run cannot help: it holds no lowercase */
        e = run(s, n, (size_t)u, C_LO);
    } else {
        if (u == (long)q)
            return 0;
        e = run(s, n, (size_t)u, C_LO);
    }
    if (e < 0)
        return -1;
    if ((size_t)e < n && s[e] == '\'') {
        long c = contraction(s, n, (size_t)e);
        if (c < 0)
            return -1;
        if (c)
            return c;
    }
    return e;
}

static long fast_o200k(const char *s, size_t n, size_t pos)
{
    int c0 = cls(s, n, pos);
    if (c0 == C_NA || c0 == 0)
        return -1;
    /* the two word alternatives, with the optional prefix when s[pos] can be one (with no
     * prefix they would start at a character that is no letter, and fail) */
    size_t q = pos;
    if (!(c0 & C_LETTER)) {
        if (c0 == C_DIG || s[pos] == '\r' || s[pos] == '\n')
            q = SIZE_MAX;
        else
            q = pos + 1;
    }
    if (q != SIZE_MAX) {
        for (int lf = 1; lf >= 0; lf--) {
            long e = o200k_word(s, n, q, lf);
            if (e)
                return e;
        }
    }
    if (c0 == C_DIG) {
        size_t e = pos + 1;
        while (e - pos < 3 && cls(s, n, e) == C_DIG)
            e++;
        if (e - pos < 3 && cls(s, n, e) == C_NA)
            return -1;
        return (long)e;
    }
    long e = fast_punct(s, n, pos, 1);
    if (e)
        return e;
    return fast_space(s, n, pos);
}

const char *tk_fast_regex(int i)
{
    return i >= 0 && (size_t)i < RP_ARRAY_LEN(k_fast) ? k_fast[i].re : NULL;
}

long tk_pattern_fast(const tk_pattern *p, const char *s, size_t n, size_t pos)
{
    if (!p->fast || pos >= n || n > (size_t)LONG_MAX)
        return -1;
    return p->fast == FAST_A ? fast_a(s, n, pos, p->fast_digits) : fast_o200k(s, n, pos);
}

rp_status tk_pattern_compile(tk_pattern *p, const char *regex, rp_err *err)
{
    rp_buf b = {0};
    rp_status st = translate_regex(regex, &b);
    if (st) {
        rp_buf_deinit(&b);
        return rp_err_set(err, st, "out of memory");
    }
    int ec;
    PCRE2_SIZE eo;
    p->re = pcre2_compile((PCRE2_SPTR)b.data, b.len, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK,
                          &ec, &eo, NULL);
    rp_buf_deinit(&b);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        return rp_err_set(err, RP_ERR_UNSUPPORTED, "regex '%.200s': %s at %zu", regex,
                          (const char *)msg, (size_t)eo);
    }
    pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    int max_digits = 0;
    p->fast = fast_kind(regex, &max_digits);
    p->fast_digits = max_digits;
    return RP_OK;
}

void tk_pattern_free(tk_pattern *p)
{
    if (p->re)
        pcre2_code_free(p->re);
    rp_free(p->lit);
    memset(p, 0, sizeof(*p));
}

/* Finds the next match at or after pos. Returns 1 with [*ms, *me), 0 when none. */
int tk_pattern_next(const tk_pattern *p, pcre2_match_data *md, const char *s, size_t n,
                        size_t pos, size_t *ms, size_t *me)
{
    if (!p->re) {
        if (!p->lit_len)
            return 0;
        while (pos + p->lit_len <= n) {
            const char *f = memchr(s + pos, p->lit[0], n - pos - p->lit_len + 1);
            if (!f)
                return 0;
            size_t at = (size_t)(f - s);
            if (memcmp(f, p->lit, p->lit_len) == 0) {
                *ms = at;
                *me = at + p->lit_len;
                return 1;
            }
            pos = at + 1;
        }
        return 0;
    }
    if (p->fast) {
        long e = tk_pattern_fast(p, s, n, pos);
        if (e > 0) {
            *ms = pos;
            *me = (size_t)e;
            return 1;
        }
    }
    return tk_pattern_next_pcre(p, md, s, n, pos, ms, me);
}

int tk_pattern_next_pcre(const tk_pattern *p, pcre2_match_data *md, const char *s, size_t n,
                         size_t pos, size_t *ms, size_t *me)
{
    if (!p->re)
        return tk_pattern_next(p, md, s, n, pos, ms, me);
    while (pos <= n) {
        int rc = pcre2_jit_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_BADOPTION)
            rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0)
            return 0;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return 1;
        }
        /* empty match: step one character and search again */
        pos = ov[0] + 1;
        while (pos < n && ((uint8_t)s[pos] & 0xC0) == 0x80)
            pos++;
    }
    return 0;
}

/* ---- normalizers ----------------------------------------------------------------------- */

static int all_ascii(const char *s, size_t n)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) { /* 4 words at a time: the compiler vectorises this */
        uint64_t w[4];
        memcpy(w, s + i, sizeof(w));
        if ((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ULL)
            return 0;
    }
    for (; i < n; i++)
        if ((uint8_t)s[i] >= 0x80)
            return 0;
    return 1;
}

static rp_status normalize_span(const char *s, size_t n, int opts, rp_buf *out);

/* Normalization is local: a boundary before an ASCII character that is followed by another
 * ASCII character (or the end) cannot be crossed by composition, decomposition or
 * reordering. ASCII runs are copied; only the spans around other characters go through
 * utf8proc. */
static rp_status unicode_normalize(const char *s, size_t n, int opts, rp_buf *out)
{
    if (all_ascii(s, n))
        return rp_buf_append(out, s, n);
    rp_status st = rp_buf_reserve(out, n);
    size_t i = 0;
    while (!st && i < n) {
        size_t j = i;
        while (j < n && (uint8_t)s[j] < 0x80 && (j + 1 == n || (uint8_t)s[j + 1] < 0x80))
            j++;
        if (j > i)
            st = rp_buf_append(out, s + i, j - i);
        if (st || j >= n)
            break;
        size_t k = j + 1;
        while (k < n && !((uint8_t)s[k] < 0x80 && (k + 1 == n || (uint8_t)s[k + 1] < 0x80)))
            k++;
        st = normalize_span(s + j, k - j, opts, out);
        i = k;
    }
    return st;
}

static rp_status normalize_span(const char *s, size_t n, int opts, rp_buf *out)
{
    size_t cap = n + 16;
    utf8proc_int32_t *buf = NULL;
    for (;;) {
        buf = rp_alloc(cap * sizeof(utf8proc_int32_t));
        if (!buf)
            return RP_ERR_NOMEM;
        utf8proc_ssize_t r = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n,
                                                buf, (utf8proc_ssize_t)cap, opts);
        if (r < 0) {
            rp_free(buf);
            return RP_ERR_INVALID;
        }
        if ((size_t)r <= cap) {
            utf8proc_ssize_t l = utf8proc_reencode(buf, r, opts);
            rp_status st = l < 0 ? RP_ERR_INVALID : rp_buf_append(out, buf, (size_t)l);
            rp_free(buf);
            return st;
        }
        rp_free(buf);
        cap = (size_t)r;
    }
}

static rp_status lowercase(const char *s, size_t n, rp_buf *out)
{
    rp_status st = rp_buf_reserve(out, n);
    if (st)
        return st;
    size_t i = 0;
    while (i < n) {
        uint8_t c = (uint8_t)s[i];
        if (c < 0x80) {
            st = rp_buf_putc(out, (char)(c >= 'A' && c <= 'Z' ? c + 32 : c));
            i++;
        } else {
            uint32_t cp;
            int l = rp_utf8_decode(s + i, n - i, &cp);
            if (!l)
                return RP_ERR_INVALID;
            char tmp[8];
            if (cp == 0x130) {
                st = rp_buf_append(out, "i\xcc\x87", 3);
            } else {
                int m = rp_utf8_encode((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), tmp);
                st = rp_buf_append(out, tmp, (size_t)m);
            }
            i += (size_t)l;
        }
        if (st)
            return st;
    }
    return RP_OK;
}

static rp_status strip(const char *s, size_t n, int left, int right, rp_buf *out)
{
    size_t a = 0, b = n;
    while (left && a < b) {
        uint32_t cp;
        int l = rp_utf8_decode(s + a, b - a, &cp);
        if (!l || !rp_uni_is_space(cp))
            break;
        a += (size_t)l;
    }
    while (right && b > a) {
        size_t k = b - 1;
        while (k > a && ((uint8_t)s[k] & 0xC0) == 0x80)
            k--;
        uint32_t cp;
        int l = rp_utf8_decode(s + k, b - k, &cp);
        if (!l || !rp_uni_is_space(cp))
            break;
        b = k;
    }
    return rp_buf_append(out, s + a, b - a);
}

static rp_status replace_all(const tk_pattern *p, const char *content, size_t content_len,
                             const char *s, size_t n, rp_buf *out)
{
    pcre2_match_data *md = NULL;
    if (p->re) {
        md = pcre2_match_data_create_from_pattern(p->re, NULL);
        if (!md)
            return RP_ERR_NOMEM;
    }
    size_t pos = 0, ms, me;
    rp_status st = RP_OK;
    while (!st && tk_pattern_next(p, md, s, n, pos, &ms, &me)) {
        st = rp_buf_append(out, s + pos, ms - pos);
        if (!st)
            st = rp_buf_append(out, content, content_len);
        pos = me;
    }
    if (!st)
        st = rp_buf_append(out, s + pos, n - pos);
    if (md)
        pcre2_match_data_free(md);
    return st;
}

static rp_status bert_normalize(const tk_norm *nm, const char *s, size_t n, rp_buf *out)
{
    rp_buf a = {0}, b = {0};
    rp_status st = RP_OK;
    size_t i = 0;
    while (i < n && !st) {
        uint32_t cp;
        int l = rp_utf8_decode(s + i, n - i, &cp);
        if (!l) {
            st = RP_ERR_INVALID;
            break;
        }
        if (nm->bert_clean && (cp == 0 || cp == 0xFFFD || rp_uni_is_control(cp))) {
            /* dropped */
        } else if (nm->bert_clean && rp_uni_is_space(cp)) {
            st = rp_buf_putc(&a, ' ');
        } else if (nm->bert_chinese && rp_uni_is_cjk(cp)) {
            st = rp_buf_putc(&a, ' ');
            if (!st)
                st = rp_buf_append(&a, s + i, (size_t)l);
            if (!st)
                st = rp_buf_putc(&a, ' ');
        } else {
            st = rp_buf_append(&a, s + i, (size_t)l);
        }
        i += (size_t)l;
    }
    const char *cur = a.data ? a.data : "";
    size_t cur_n = a.len;
    if (!st && nm->bert_strip_accents) {
        st = unicode_normalize(cur, cur_n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, &b);
        rp_buf_reset(&a);
        for (size_t k = 0; !st && k < b.len;) {
            uint32_t cp;
            int l = rp_utf8_decode(b.data + k, b.len - k, &cp);
            if (!l) {
                st = RP_ERR_INVALID;
                break;
            }
            if (utf8proc_category((utf8proc_int32_t)cp) != UTF8PROC_CATEGORY_MN)
                st = rp_buf_append(&a, b.data + k, (size_t)l);
            k += (size_t)l;
        }
        cur = a.data ? a.data : "";
        cur_n = a.len;
    }
    if (!st) {
        if (nm->bert_lower)
            st = lowercase(cur, cur_n, out);
        else
            st = rp_buf_append(out, cur, cur_n);
    }
    rp_buf_deinit(&a);
    rp_buf_deinit(&b);
    return st;
}

rp_status tk_normalize(const tk_norm *nm, const char *s, size_t n, rp_buf *out)
{
    switch (nm->kind) {
    case TK_NORM_NFC:
        return unicode_normalize(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
    case TK_NORM_NFD:
        return unicode_normalize(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, out);
    case TK_NORM_NFKC:
        return unicode_normalize(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case TK_NORM_NFKD:
        return unicode_normalize(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
                                 out);
    case TK_NORM_LOWER:
        return lowercase(s, n, out);
    case TK_NORM_STRIP:
        return strip(s, n, nm->left, nm->right, out);
    case TK_NORM_REPLACE:
        return replace_all(&nm->pat, nm->content, nm->content_len, s, n, out);
    case TK_NORM_PREPEND:
        if (n > 0) {
            rp_status st = rp_buf_append(out, nm->content, nm->content_len);
            if (st)
                return st;
        }
        return rp_buf_append(out, s, n);
    case TK_NORM_BERT:
        return bert_normalize(nm, s, n, out);
    case TK_NORM_SEQ: {
        rp_buf cur = {0}, nxt = {0};
        rp_status st = rp_buf_append(&cur, s, n);
        for (int i = 0; !st && i < nm->n_sub; i++) {
            rp_buf_reset(&nxt);
            st = tk_normalize(&nm->sub[i], cur.data ? cur.data : "", cur.len, &nxt);
            rp_buf t = cur;
            cur = nxt;
            nxt = t;
        }
        if (!st)
            st = rp_buf_append(out, cur.data ? cur.data : "", cur.len);
        rp_buf_deinit(&cur);
        rp_buf_deinit(&nxt);
        return st;
    }
    }
    return RP_ERR_UNSUPPORTED;
}

/* ---- pre-tokenizers -------------------------------------------------------------------- */

static rp_status pieces_push(tk_pieces *p, uint32_t off, uint32_t len)
{
    if (len == 0)
        return RP_OK;
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 256;
        tk_piece *v = rp_realloc(p->v, (size_t)cap * sizeof(tk_piece));
        if (!v)
            return RP_ERR_NOMEM;
        p->v = v;
        p->cap = cap;
    }
    p->v[p->n].off = off;
    p->v[p->n].len = len;
    p->n++;
    return RP_OK;
}

/* Split events of one piece, then the behavior (HF SplitDelimiterBehavior). */
typedef struct ev {
    uint32_t a, b;
    int m;
} ev;

typedef struct evs {
    ev *v;
    int n, cap;
} evs;

static rp_status evs_push(evs *e, uint32_t a, uint32_t b, int m)
{
    if (e->n == e->cap) {
        int cap = e->cap ? e->cap * 2 : 64;
        ev *v = rp_realloc(e->v, (size_t)cap * sizeof(ev));
        if (!v)
            return RP_ERR_NOMEM;
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n++] = (ev){a, b, m};
    return RP_OK;
}

static rp_status apply_behavior(evs *e, tk_split_behavior bh, int invert, tk_pieces *out)
{
    rp_status st = RP_OK;
    if (invert)
        for (int i = 0; i < e->n; i++)
            e->v[i].m = !e->v[i].m;
    switch (bh) {
    case TK_SPLIT_REMOVED:
        for (int i = 0; !st && i < e->n; i++)
            if (!e->v[i].m)
                st = pieces_push(out, e->v[i].a, e->v[i].b - e->v[i].a);
        return st;
    case TK_SPLIT_ISOLATED:
        for (int i = 0; !st && i < e->n; i++)
            st = pieces_push(out, e->v[i].a, e->v[i].b - e->v[i].a);
        return st;
    case TK_SPLIT_MERGED_PREV:
    case TK_SPLIT_CONTIGUOUS: {
        /* fold into ranges, then push the non-empty ones */
        int k = 0, prev = 0;
        for (int i = 0; i < e->n; i++) {
            int merge = bh == TK_SPLIT_MERGED_PREV ? (e->v[i].m && !prev) : (e->v[i].m == prev);
            if (merge && k > 0)
                e->v[k - 1].b = e->v[i].b;
            else
                e->v[k++] = e->v[i];
            prev = e->v[i].m;
        }
        for (int i = 0; !st && i < k; i++)
            st = pieces_push(out, e->v[i].a, e->v[i].b - e->v[i].a);
        return st;
    }
    case TK_SPLIT_MERGED_NEXT: {
        int k = e->n, prev = 0;
        /* fold from the end; results collected at the end of the array going left */
        int w = e->n; /* write index (exclusive start) */
        for (int i = e->n - 1; i >= 0; i--) {
            ev cur = e->v[i];
            if (cur.m && !prev && w < e->n)
                e->v[w].a = cur.a;
            else
                e->v[--w] = cur;
            prev = cur.m;
        }
        (void)k;
        for (int i = w; !st && i < e->n; i++)
            st = pieces_push(out, e->v[i].a, e->v[i].b - e->v[i].a);
        return st;
    }
    }
    return RP_ERR_UNSUPPORTED;
}

typedef int (*char_pred)(uint32_t cp);

static int is_bert_punct(uint32_t cp)
{
    return rp_uni_is_punct(cp);
}

/* Every character matching pred is its own match. */
static rp_status events_chars(const char *s, uint32_t base, uint32_t n, char_pred pred, evs *e)
{
    uint32_t last = 0, i = 0;
    rp_status st = RP_OK;
    while (i < n && !st) {
        uint32_t cp;
        int l = rp_utf8_decode(s + i, n - i, &cp);
        if (!l)
            l = 1, cp = 0xFFFD;
        if (pred(cp)) {
            if (last < i)
                st = evs_push(e, base + last, base + i, 0);
            if (!st)
                st = evs_push(e, base + i, base + i + (uint32_t)l, 1);
            last = i + (uint32_t)l;
        }
        i += (uint32_t)l;
    }
    if (!st && last < n)
        st = evs_push(e, base + last, base + n, 0);
    return st;
}

static rp_status events_pattern(const tk_pattern *p, pcre2_match_data *md, const char *s,
                                uint32_t base, uint32_t n, evs *e)
{
    size_t pos = 0, ms, me;
    rp_status st = RP_OK;
    while (!st && tk_pattern_next(p, md, s, n, pos, &ms, &me)) {
        if (ms > pos)
            st = evs_push(e, base + (uint32_t)pos, base + (uint32_t)ms, 0);
        if (!st)
            st = evs_push(e, base + (uint32_t)ms, base + (uint32_t)me, 1);
        pos = me;
    }
    if (!st && pos < n)
        st = evs_push(e, base + (uint32_t)pos, base + n, 0);
    return st;
}

static int is_ws(uint32_t cp)
{
    return rp_uni_is_space(cp);
}

/* Applies one pre-tokenizer to every piece of sc->a, result in sc->a. */
static rp_status pre_one(const tk_pre *p, tk_scratch *sc, int section_first, uint32_t base_off)
{
    rp_status st = RP_OK;
    if (p->kind == TK_PRE_SEQ) {
        for (int i = 0; !st && i < p->n_sub; i++)
            st = pre_one(&p->sub[i], sc, section_first, base_off);
        return st;
    }
    if (p->kind == TK_PRE_BERT) {
        tk_pre a = {.kind = TK_PRE_WSSPLIT}, b = {.kind = TK_PRE_PUNCT,
                                                   .behavior = TK_SPLIT_ISOLATED};
        st = pre_one(&a, sc, section_first, base_off);
        return st ? st : pre_one(&b, sc, section_first, base_off);
    }
    tk_pieces *in = &sc->a, *out = &sc->b;
    out->n = 0;
    evs e = {0};
    for (int i = 0; !st && i < in->n; i++) {
        tk_piece pc = in->v[i];
        e.n = 0;
        switch (p->kind) {
        case TK_PRE_BYTELEVEL:
            if (p->add_prefix_space && sc->store.data[pc.off] != ' ') {
                uint32_t off = (uint32_t)sc->store.len;
                st = rp_buf_putc(&sc->store, ' ');
                if (!st)
                    st = rp_buf_reserve(&sc->store, pc.len);
                if (!st)
                    st = rp_buf_append(&sc->store, sc->store.data + pc.off, pc.len);
                pc.off = off;
                pc.len += 1;
            }
            if (st)
                break;
            if (p->use_regex && p->pat.re) {
                st = events_pattern(&p->pat, sc->md, sc->store.data + pc.off, pc.off, pc.len, &e);
                if (!st)
                    st = apply_behavior(&e, TK_SPLIT_ISOLATED, 0, out);
            } else {
                st = pieces_push(out, pc.off, pc.len);
            }
            break;
        case TK_PRE_SPLIT:
            st = events_pattern(&p->pat, sc->md, sc->store.data + pc.off, pc.off, pc.len, &e);
            if (!st)
                st = apply_behavior(&e, p->behavior, p->invert, out);
            break;
        case TK_PRE_DIGITS:
            st = events_chars(sc->store.data + pc.off, pc.off, pc.len, rp_uni_is_numeric, &e);
            if (!st)
                st = apply_behavior(&e, p->individual ? TK_SPLIT_ISOLATED : TK_SPLIT_CONTIGUOUS,
                                    0, out);
            break;
        case TK_PRE_WSSPLIT:
            st = events_chars(sc->store.data + pc.off, pc.off, pc.len, is_ws, &e);
            if (!st)
                st = apply_behavior(&e, TK_SPLIT_REMOVED, 0, out);
            break;
        case TK_PRE_PUNCT:
            st = events_chars(sc->store.data + pc.off, pc.off, pc.len, is_bert_punct, &e);
            if (!st)
                st = apply_behavior(&e, p->behavior, 0, out);
            break;
        case TK_PRE_WHITESPACE:
            st = events_pattern(&p->pat, sc->md, sc->store.data + pc.off, pc.off, pc.len, &e);
            if (!st)
                st = apply_behavior(&e, TK_SPLIT_REMOVED, 1, out);
            break;
        case TK_PRE_METASPACE: {
            /* replace ' ' by the replacement; maybe prepend it */
            uint32_t off = (uint32_t)sc->store.len;
            int first = pc.off == base_off && i == 0 && section_first;
            const char *src_needs_copy = NULL;
            (void)src_needs_copy;
            int starts = pc.len >= (uint32_t)p->repl_len &&
                         memcmp(sc->store.data + pc.off, p->repl, (size_t)p->repl_len) == 0;
            int starts_space = sc->store.data[pc.off] == ' ';
            int prepend = (p->prepend == TK_PREPEND_ALWAYS ||
                           (p->prepend == TK_PREPEND_FIRST && first)) &&
                          !starts && !starts_space;
            st = rp_buf_reserve(&sc->store, pc.len * (size_t)p->repl_len + 8);
            if (st)
                break;
            if (prepend)
                st = rp_buf_append(&sc->store, p->repl, (size_t)p->repl_len);
            for (uint32_t k = 0; !st && k < pc.len; k++) {
                char c = sc->store.data[pc.off + k];
                if (c == ' ')
                    st = rp_buf_append(&sc->store, p->repl, (size_t)p->repl_len);
                else
                    st = rp_buf_putc(&sc->store, c);
            }
            if (st)
                break;
            uint32_t len = (uint32_t)sc->store.len - off;
            if (p->split) {
                tk_pattern lit = {.lit = (char *)p->repl, .lit_len = (size_t)p->repl_len};
                st = events_pattern(&lit, NULL, sc->store.data + off, off, len, &e);
                if (!st)
                    st = apply_behavior(&e, TK_SPLIT_MERGED_NEXT, 0, out);
            } else {
                st = pieces_push(out, off, len);
            }
            break;
        }
        default:
            st = RP_ERR_UNSUPPORTED;
        }
    }
    rp_free(e.v);
    tk_pieces t = sc->a;
    sc->a = sc->b;
    sc->b = t;
    return st;
}

rp_status tk_pretokenize(const tk_pre *p, tk_scratch *sc, int section_first)
{
    if (!p)
        return RP_OK;
    uint32_t base = sc->a.n ? sc->a.v[0].off : 0;
    return pre_one(p, sc, section_first, base);
}

const tk_pattern *tk_pre_single_regex(const tk_pre *p)
{
    if (!p)
        return NULL;
    if (p->kind == TK_PRE_SPLIT && p->behavior == TK_SPLIT_ISOLATED && !p->invert && p->pat.re)
        return &p->pat;
    if (p->kind == TK_PRE_BYTELEVEL && !p->add_prefix_space && p->use_regex && p->pat.re)
        return &p->pat;
    if (p->kind == TK_PRE_SEQ) {
        /* [Split Isolated, ByteLevel without regex and prefix]: the ByteLevel step is free */
        if (p->n_sub == 2 && p->sub[1].kind == TK_PRE_BYTELEVEL && !p->sub[1].use_regex &&
            !p->sub[1].add_prefix_space)
            return tk_pre_single_regex(&p->sub[0]);
        if (p->n_sub == 1)
            return tk_pre_single_regex(&p->sub[0]);
    }
    return NULL;
}

int tk_pre_has_bytelevel(const tk_pre *p)
{
    if (!p)
        return 0;
    if (p->kind == TK_PRE_BYTELEVEL)
        return 1;
    for (int i = 0; i < p->n_sub; i++)
        if (tk_pre_has_bytelevel(&p->sub[i]))
            return 1;
    return 0;
}

void tk_norm_free(tk_norm *n)
{
    if (!n)
        return;
    tk_pattern_free(&n->pat);
    rp_free(n->content);
    n->content = NULL;
    for (int i = 0; i < n->n_sub; i++)
        tk_norm_free(&n->sub[i]);
    rp_free(n->sub);
    n->sub = NULL;
    n->n_sub = 0;
}

void tk_pre_free(tk_pre *p)
{
    if (!p)
        return;
    tk_pattern_free(&p->pat);
    for (int i = 0; i < p->n_sub; i++)
        tk_pre_free(&p->sub[i]);
    rp_free(p->sub);
    p->sub = NULL;
    p->n_sub = 0;
}

void tk_dec_free(tk_dec *d)
{
    if (!d)
        return;
    tk_pattern_free(&d->pat);
    rp_free(d->content);
    rp_free(d->prefix);
    for (int i = 0; i < d->n_sub; i++)
        tk_dec_free(&d->sub[i]);
    rp_free(d->sub);
    d->sub = NULL;
    d->n_sub = 0;
}
