/* cli/cmd_perplexity.c - `rapid perplexity`: a model's perplexity on a text file.
 *
 * The measure is the one scripts/default-model/train.py reports (training.json): the file's
 * text is encoded without special tokens and cut into consecutive pieces of CTX-1 tokens;
 * each piece is evaluated from an empty cache as [BOS] + piece and every token of the piece
 * is predicted; perplexity = exp(total NLL / tokens). Without a BOS token the pieces are CTX
 * tokens long and their first token is not predicted. Log-softmax runs in double.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/clock.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "model/model.h"
#include "text/tokenizer.h"

/* NLL of ids[1..n) given logits rows 0..n-2 (row i predicts ids[i+1]). */
static double piece_nll(const float *logits, int vocab, const int32_t *ids, int n)
{
    double total = 0.0;
    for (int i = 0; i + 1 < n; i++) {
        const float *row = logits + (size_t)i * (size_t)vocab;
        double mx = row[0];
        for (int v = 1; v < vocab; v++)
            if (row[v] > mx)
                mx = row[v];
        double sum = 0.0;
        for (int v = 0; v < vocab; v++)
            sum += exp((double)row[v] - mx);
        total += (mx + log(sum)) - (double)row[ids[i + 1]];
    }
    return total;
}

int rp_cmd_perplexity(int argc, char **argv)
{
    const char *model_dir = NULL, *text_file = NULL, *ctx_s = NULL, *threads_s = NULL;
    int ref = 0, json = 0;
    rp_opt opts[] = {{"model", &model_dir, NULL},     {"text-file", &text_file, NULL},
                     {"ctx", &ctx_s, NULL},           {"threads", &threads_s, NULL},
                     {"ref-kernels", NULL, &ref},     {"json", NULL, &json}};
    if (rp_args_parse(argc, argv, opts, (int)RP_ARRAY_LEN(opts), NULL, 0, NULL))
        return 2;
    long ctx = 0, threads = 0;
    if (!model_dir || !text_file || (ctx_s && (rp_args_int(ctx_s, &ctx) || ctx < 2)) ||
        (threads_s && rp_args_int(threads_s, &threads))) {
        fprintf(stderr, "usage: rapid perplexity --model DIR --text-file FILE [--ctx N] "
                        "[--threads N] [--ref-kernels] [--json]\n");
        return 2;
    }

    rp_err err = {0};
    char *text = NULL;
    size_t text_len = 0;
    rp_tokenizer *tok = NULL;
    rp_model *m = NULL;
    rp_kv *kv = NULL;
    int32_t *ids = NULL, *piece = NULL;
    float *logits = NULL;
    int n_ids = 0, status = 1;
    double t0 = rp_now_s();

    if (rp_file_read(text_file, &text, &text_len, &err) ||
        rp_tokenizer_load(model_dir, &tok, &err) ||
        rp_tokenizer_encode(tok, text, text_len, 0, &ids, &n_ids, &err))
        goto out;
    rp_model_opts mo = {.n_threads = (int)threads, .ref_kernels = ref};
    if (rp_model_load(model_dir, &mo, &m, &err))
        goto out;
    const rp_model_info *info = rp_model_get_info(m);
    if (ctx == 0)
        ctx = info->max_context > 0 ? info->max_context : 2048;
    int32_t bos = rp_tokenizer_bos_id(tok);
    if (bos < 0)
        bos = info->bos_id;
    if (rp_kv_new(m, (int)ctx, &kv, &err))
        goto out;
    int vocab = info->vocab_size;
    piece = rp_alloc(sizeof(int32_t) * (size_t)ctx);
    logits = rp_alloc(sizeof(float) * (size_t)vocab * (size_t)ctx);
    if (!piece || !logits) {
        rp_err_set(&err, RP_ERR_NOMEM, "out of memory for %ld x %d logits", ctx, vocab);
        goto out;
    }
    /* With BOS: each piece holds ctx-1 text tokens, all predicted. Without: ctx tokens,
     * all but the first predicted. */
    int step = bos >= 0 ? (int)ctx - 1 : (int)ctx;
    double nll = 0.0;
    long counted = 0;
    int n_pieces = 0;
    for (int start = 0; start < n_ids; start += step) {
        int take = n_ids - start < step ? n_ids - start : step;
        int n = 0;
        if (bos >= 0)
            piece[n++] = bos;
        memcpy(piece + n, ids + start, sizeof(int32_t) * (size_t)take);
        n += take;
        if (n < 2)
            break;
        rp_kv_truncate(kv, 0);
        if (rp_model_eval(m, kv, piece, n, logits, 1, &err))
            goto out;
        nll += piece_nll(logits, vocab, piece, n);
        counted += n - 1;
        n_pieces++;
    }
    if (counted == 0) {
        rp_err_set(&err, RP_ERR_INVALID, "%s holds too little text to measure", text_file);
        goto out;
    }
    double ppl = exp(nll / (double)counted);
    double secs = rp_now_s() - t0;
    if (json)
        printf("{\"perplexity\":%.6f,\"tokens\":%ld,\"nll_sum\":%.6f,\"pieces\":%d,\"ctx\":%ld,"
               "\"bos_id\":%d,\"seconds\":%.2f}\n",
               ppl, counted, nll, n_pieces, ctx, (int)bos, secs);
    else
        printf("perplexity %.4f over %ld tokens (%d pieces of up to %ld, bos %d, %.1f s)\n", ppl,
               counted, n_pieces, ctx, (int)bos, secs);
    status = 0;
out:
    if (status)
        fprintf(stderr, "rapid perplexity: %s\n", err.msg);
    rp_free(logits);
    rp_free(piece);
    rp_free(ids);
    rp_kv_free(kv);
    rp_model_free(m);
    rp_tokenizer_free(tok);
    rp_free(text);
    return status;
}
