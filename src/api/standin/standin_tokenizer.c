/* api/standin/standin_tokenizer.c - stand-in for text/tokenizer.h (see standin.h). */
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "text/tokenizer.h"

static const char *const g_special[] = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
#define N_BYTES 256
#define N_VOCAB (N_BYTES + 3)

struct rp_tokenizer {
    int unused;
};

struct rp_detok {
    const rp_tokenizer *tok;
    int skip_special;
    unsigned char pend[4];
    int n_pend;
};

rp_status rp_tokenizer_load(const char *path, rp_tokenizer **out, rp_err *err)
{
    *out = NULL;
    if (!rp_path_exists(path))
        return rp_err_set(err, RP_ERR_NOT_FOUND, "tokenizer: '%s' does not exist", path);
    *out = rp_calloc(1, sizeof **out);
    return *out ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

void rp_tokenizer_free(rp_tokenizer *tok) { rp_free(tok); }

rp_status rp_tokenizer_encode(const rp_tokenizer *tok, const char *text, size_t len,
                              int add_special, int32_t **out_ids, int *out_n, rp_err *err)
{
    int32_t *ids = rp_alloc((len + 1) * sizeof(int32_t));
    if (!ids)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    int n = 0;
    for (size_t i = 0; i < len;) {
        int sp = -1;
        for (int k = 0; k < 3 && sp < 0; k++) {
            size_t l = strlen(g_special[k]);
            if (l <= len - i && memcmp(text + i, g_special[k], l) == 0)
                sp = k;
        }
        if (sp >= 0) {
            ids[n++] = N_BYTES + sp;
            i += strlen(g_special[sp]);
        } else {
            ids[n++] = (unsigned char)text[i++];
        }
    }
    *out_ids = ids;
    *out_n = n;
    return RP_OK;
}

rp_status rp_tokenizer_decode(const rp_tokenizer *tok, const int32_t *ids, int n,
                              int skip_special, char **out_text, size_t *out_len, rp_err *err)
{
    rp_buf b = {0};
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= N_VOCAB)
            continue;
        rp_status st = ids[i] < N_BYTES ? rp_buf_putc(&b, (char)ids[i])
                       : skip_special   ? RP_OK
                                        : rp_buf_puts(&b, g_special[ids[i] - N_BYTES]);
        if (st != RP_OK) {
            rp_buf_deinit(&b);
            return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
        }
    }
    *out_len = b.len;
    *out_text = b.data ? rp_buf_take(&b) : rp_strdup("");
    return *out_text ? RP_OK : rp_err_set(err, RP_ERR_NOMEM, "out of memory");
}

int rp_tokenizer_vocab_size(const rp_tokenizer *tok) { return N_VOCAB; }

int32_t rp_tokenizer_token_id(const rp_tokenizer *tok, const char *token)
{
    for (int k = 0; k < 3; k++)
        if (!strcmp(token, g_special[k]))
            return N_BYTES + k;
    return strlen(token) == 1 ? (unsigned char)token[0] : -1;
}

const char *rp_tokenizer_token_str(const rp_tokenizer *tok, int32_t id)
{
    return id >= N_BYTES && id < N_VOCAB ? g_special[id - N_BYTES] : NULL;
}

int rp_tokenizer_is_special(const rp_tokenizer *tok, int32_t id) { return id >= N_BYTES; }
int32_t rp_tokenizer_bos_id(const rp_tokenizer *tok) { return -1; }
int32_t rp_tokenizer_eos_id(const rp_tokenizer *tok) { return N_BYTES + 1; }
const char *rp_tokenizer_bos_str(const rp_tokenizer *tok) { return NULL; }
const char *rp_tokenizer_eos_str(const rp_tokenizer *tok) { return g_special[1]; }
const char *rp_tokenizer_chat_template(const rp_tokenizer *tok, const char *name) { return NULL; }

rp_detok *rp_detok_new(const rp_tokenizer *tok, int skip_special)
{
    rp_detok *d = rp_calloc(1, sizeof *d);
    if (d) {
        d->tok = tok;
        d->skip_special = skip_special;
    }
    return d;
}

static int seq_len(unsigned char c)
{
    return c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
}

rp_status rp_detok_feed(rp_detok *d, int32_t id, rp_buf *out)
{
    if (id >= N_BYTES)
        return d->skip_special || id >= N_VOCAB ? RP_OK : rp_buf_puts(out, g_special[id - N_BYTES]);
    if (id < 0)
        return RP_OK;
    d->pend[d->n_pend++] = (unsigned char)id;
    if (d->n_pend < seq_len(d->pend[0]) && d->n_pend < 4)
        return RP_OK;
    rp_status st = rp_buf_append(out, d->pend, (size_t)d->n_pend);
    d->n_pend = 0;
    return st;
}

rp_status rp_detok_flush(rp_detok *d, rp_buf *out)
{
    rp_status st = d->n_pend ? rp_buf_puts(out, "\xef\xbf\xbd") : RP_OK;
    d->n_pend = 0;
    return st;
}

void rp_detok_free(rp_detok *d) { rp_free(d); }
