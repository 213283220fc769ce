/* api/standin/standin_model.c - stand-in for model/model.h (see standin.h). */
#include <jansson.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "model/model.h"

struct rp_model {
    rp_model_info info;
};

rp_status rp_model_load(const char *dir, const rp_model_opts *opts, rp_model **out, rp_err *err)
{
    *out = NULL;
    char *cfg_path = rp_path_join(dir, "config.json");
    if (!cfg_path)
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    char *text = NULL;
    size_t len = 0;
    rp_status st = rp_file_read(cfg_path, &text, &len, err);
    rp_free(cfg_path);
    if (st != RP_OK)
        return rp_err_wrap(err, "model '%s'", dir);
    json_t *cfg = json_loadb(text, len, 0, NULL);
    rp_free(text);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return rp_err_set(err, RP_ERR_INVALID, "model '%s': config.json is not a JSON object", dir);
    }
    rp_model *m = rp_calloc(1, sizeof *m);
    if (!m) {
        json_decref(cfg);
        return rp_err_set(err, RP_ERR_NOMEM, "out of memory");
    }
    json_t *ctx = json_object_get(cfg, "max_position_embeddings");
    m->info.max_context = json_is_integer(ctx) ? (int)json_integer_value(ctx) : 2048;
    snprintf(m->info.arch, sizeof m->info.arch, "StandIn");
    snprintf(m->info.model_type, sizeof m->info.model_type, "standin");
    snprintf(m->info.dtype, sizeof m->info.dtype, "none");
    m->info.vocab_size = 259;
    m->info.bos_id = -1;
    m->info.eos_ids[0] = 257;
    m->info.n_eos = 1;
    json_decref(cfg);
    *out = m;
    return RP_OK;
}

void rp_model_free(rp_model *model) { rp_free(model); }
const rp_model_info *rp_model_get_info(const rp_model *model) { return &model->info; }

rp_status rp_kv_new(rp_model *model, int max_tokens, rp_kv **out, rp_err *err)
{
    *out = NULL;
    return rp_err_set(err, RP_ERR_UNSUPPORTED, "the model layer is a stand-in in this build");
}
void rp_kv_free(rp_kv *kv) { (void)kv; }
int rp_kv_len(const rp_kv *kv) { return 0; }
int rp_kv_capacity(const rp_kv *kv) { return 0; }
void rp_kv_truncate(rp_kv *kv, int n) { (void)kv; }
rp_status rp_model_eval(rp_model *model, rp_kv *kv, const int32_t *ids, int n, float *logits,
                        int all_logits, rp_err *err)
{
    return rp_err_set(err, RP_ERR_UNSUPPORTED, "the model layer is a stand-in in this build");
}
