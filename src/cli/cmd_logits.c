/* cli/cmd_logits.c - `rapid logits`: float32 logits for token ids (a stable test interface).
 *
 * Writes n_ids rows of vocab_size little-endian float32, row-major, one per input position.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_opts.h"
#include "model/model.h"

int rp_cmd_logits(int argc, char **argv)
{
    const char *model_dir = NULL, *ids_s = NULL, *out = NULL, *threads_s = NULL;
    int ref = 0;
    rp_device_args dev = {0};
    rp_opt opts[] = {RP_MODEL_DEVICE_OPTS(dev),
                     {"model", &model_dir, NULL},
                     {"ids", &ids_s, NULL},
                     {"out", &out, NULL},
                     {"threads", &threads_s, NULL},
                     {"ref-kernels", NULL, &ref}};
    if (rp_args_parse(argc, argv, opts, RP_ARRAY_LEN(opts), NULL, 0, NULL))
        return 2;
    if (!model_dir || !ids_s || !out) {
        fprintf(stderr, "usage: rapid logits --model DIR --ids 1,2,3 --out FILE "
                        "[--device cuda|cpu] [--gpu-memory-fraction F]\n");
        return 2;
    }
    int *ids = NULL, n = 0;
    long threads = 0;
    if (rp_args_parse_ids(ids_s, &ids, &n)) {
        fprintf(stderr, "rapid logits: --ids must be comma-separated token ids\n");
        return 2;
    }
    if (threads_s && rp_args_int(threads_s, &threads)) {
        fprintf(stderr, "rapid logits: --threads must be a number\n");
        rp_free(ids);
        return 2;
    }
    rp_err err = {0};
    rp_model *m = NULL;
    rp_kv *kv = NULL;
    float *logits = NULL;
    int status = 1;
    rp_model_opts mo = {.n_threads = (int)threads, .ref_kernels = ref};
    if (rp_model_opts_device("logits", &dev, &mo)) {
        rp_free(ids);
        return 2;
    }
    if (rp_model_load(model_dir, &mo, &m, &err) || rp_kv_new(m, n, &kv, &err))
        goto out;
    size_t vocab = (size_t)rp_model_get_info(m)->vocab_size;
    logits = rp_alloc(sizeof(float) * vocab * (size_t)n);
    if (!logits) {
        rp_err_set(&err, RP_ERR_NOMEM, "out of memory for %d x %zu logits", n, vocab);
        goto out;
    }
    if (rp_model_eval(m, kv, (const int32_t *)ids, n, logits, 1, &err) ||
        rp_file_write(out, logits, sizeof(float) * vocab * (size_t)n, &err))
        goto out;
    status = 0;
out:
    if (status)
        fprintf(stderr, "rapid logits: %s\n", err.msg);
    rp_free(logits);
    rp_kv_free(kv);
    rp_model_free(m);
    rp_free(ids);
    return status;
}
