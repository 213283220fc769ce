/* cli/cmd_info.c - `rapid info MODEL`: what a model is and what it needs.
 *
 * Reads the model's config.json (the fields are looked up in "text_config" first, for
 * multimodal checkpoints), estimates the parameter count from the shapes, and the memory for
 * the weights (the files on disk, else parameters x bits) and for the KV cache at --context
 * tokens (only full-attention layers keep KV for every token; sliding-window layers keep at
 * most the window; linear-attention and conv layers keep a fixed state, not counted).
 * The core shapes come from the model module's config parser (model/config.h); the keys
 * only some families use (experts, layer types, linear attention) are read here.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/file.h"
#include "cli/args.h"
#include "cli/catalog.h"
#include "cli/commands.h"
#include "cli/hub.h"
#include "model/config.h"

typedef struct shape {
    const char *arch, *model_type, *dtype;
    int64_t vocab, dim, n_layers, n_heads, n_kv_heads, head_dim, ffn, context;
    int64_t n_experts, n_experts_used, moe_ffn, shared_ffn, sliding_window;
    int64_t n_full, n_sliding, n_linear; /* layers by kind */
    int64_t lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim;
    int tied;
    int quant_bits, quant_group;
    const char *quant_method;
} shape;

static json_t *field(json_t *cfg, const char *key)
{
    json_t *tc = json_object_get(cfg, "text_config");
    json_t *v = json_is_object(tc) ? json_object_get(tc, key) : NULL;
    return v ? v : json_object_get(cfg, key);
}

static int64_t ival(json_t *cfg, const char *key, int64_t dflt)
{
    json_t *v = field(cfg, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

static const char *sval(json_t *cfg, const char *key)
{
    return json_string_value(field(cfg, key));
}

static void count_layers(json_t *cfg, shape *s)
{
    json_t *types = field(cfg, "layer_types");
    int64_t interval = ival(cfg, "full_attention_interval", 0);
    if (json_is_array(types) && json_array_size(types) > 0) {
        for (size_t i = 0; i < json_array_size(types); i++) {
            const char *t = json_string_value(json_array_get(types, i));
            if (!t || strcmp(t, "full_attention") == 0 || strcmp(t, "attention") == 0)
                s->n_full++;
            else if (strstr(t, "sliding"))
                s->n_sliding++;
            else
                s->n_linear++; /* linear_attention, conv, ... */
        }
        s->n_layers = (int64_t)json_array_size(types);
    } else if (interval > 0) {
        s->n_full = s->n_layers / interval;
        s->n_linear = s->n_layers - s->n_full;
    } else if (s->sliding_window > 0 && ival(cfg, "sliding_window_pattern", 0) > 0) {
        int64_t p = ival(cfg, "sliding_window_pattern", 1); /* gemma: every p-th is global */
        s->n_full = s->n_layers / p;
        s->n_sliding = s->n_layers - s->n_full;
    } else {
        s->n_full = s->n_layers;
    }
}

static void read_shape(const rp_model_config *mc, shape *s)
{
    json_t *cfg = mc->root;
    memset(s, 0, sizeof *s);
    s->arch = mc->arch[0] ? mc->arch : NULL;
    s->model_type = mc->model_type[0] ? mc->model_type : NULL;
    s->dtype = sval(cfg, "torch_dtype") ? sval(cfg, "torch_dtype") : sval(cfg, "dtype");
    s->vocab = mc->vocab_size;
    s->dim = mc->dim;
    s->n_layers = mc->n_layers;
    s->n_heads = mc->n_heads;
    s->n_kv_heads = mc->n_kv_heads;
    s->head_dim = mc->head_dim;
    s->ffn = mc->ffn_dim ? mc->ffn_dim : ival(cfg, "block_ff_dim", 0);
    s->context = mc->max_pos;
    s->sliding_window = mc->sliding_window;
    s->tied = mc->tied_embeddings;
    s->n_experts = ival(cfg, "num_experts", ival(cfg, "num_local_experts", ival(cfg, "n_routed_experts", 0)));
    s->n_experts_used = ival(cfg, "num_experts_per_tok", ival(cfg, "experts_per_token", 0));
    s->moe_ffn = ival(cfg, "moe_intermediate_size", s->ffn);
    s->shared_ffn = ival(cfg, "shared_expert_intermediate_size", 0);
    s->lin_k_heads = ival(cfg, "linear_num_key_heads", 0);
    s->lin_v_heads = ival(cfg, "linear_num_value_heads", 0);
    s->lin_k_dim = ival(cfg, "linear_key_head_dim", 0);
    s->lin_v_dim = ival(cfg, "linear_value_head_dim", 0);
}

static void read_quant(json_t *cfg, shape *s)
{
    json_t *q = json_object_get(cfg, "quantization");
    if (!json_is_object(q))
        q = json_object_get(cfg, "quantization_config");
    if (json_is_object(q)) {
        json_t *b = json_object_get(q, "bits");
        s->quant_bits = json_is_integer(b) ? (int)json_integer_value(b) : 0;
        json_t *g = json_object_get(q, "group_size");
        s->quant_group = json_is_integer(g) ? (int)json_integer_value(g) : 0;
        s->quant_method = json_string_value(json_object_get(q, "quant_method"));
        if (!s->quant_method && s->quant_bits)
            s->quant_method = "mlx affine";
    }
}

/* Parameters from the shapes (biases and per-head norms are left out: well under 1% on real
 * models). */
static int64_t estimate_params(const shape *s)
{
    int64_t d = s->dim, hd = s->head_dim;
    int64_t attn = d * s->n_heads * hd * 2 + 2 * d * s->n_kv_heads * hd;
    int64_t linear = 4 * d * d; /* LFM2-style short conv block */
    if (s->lin_v_heads) {        /* Gated DeltaNet */
        int64_t kdim = s->lin_k_heads * s->lin_k_dim, vdim = s->lin_v_heads * s->lin_v_dim;
        linear = d * (2 * kdim + 2 * vdim) + d * 2 * s->lin_v_heads + vdim * d;
    }
    int64_t mlp = 3 * d * s->ffn;
    if (s->n_experts > 0)
        mlp = s->n_experts * 3 * d * s->moe_ffn + d * s->n_experts + 3 * d * s->shared_ffn;
    int64_t n_attn = s->n_full + s->n_sliding;
    int64_t total = s->vocab * d * (s->tied ? 1 : 2) + d; /* embeddings, final norm */
    total += s->n_layers * 2 * d;                          /* two norms per layer */
    total += n_attn * attn + s->n_linear * linear + s->n_layers * mlp;
    return total;
}

static int64_t weight_files_bytes(const char *dir, int *n_files, const char **format)
{
    DIR *d = opendir(dir);
    int64_t total = 0;
    *n_files = 0;
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        int st_ = n > 12 && strcmp(de->d_name + n - 12, ".safetensors") == 0;
        int gg = n > 5 && strcmp(de->d_name + n - 5, ".gguf") == 0;
        if (!st_ && !gg)
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(path, &st) == 0) {
            total += st.st_size;
            (*n_files)++;
            if (gg)
                *format = "gguf";
        }
    }
    closedir(d);
    return total;
}

static const char *default_parser(const char *model_type, int reasoning)
{
    static const struct { const char *type, *tool, *reasoning; } t[] = {
        {"qwen3_5", "qwen3_coder", "qwen3"}, {"qwen3_moe", "hermes", "qwen3"},
        {"qwen3", "hermes", "qwen3"},        {"qwen2", "hermes", "none"},
        {"llama", "llama3_json", "none"},    {"mistral", "mistral", "none"},
        {"gemma3", "gemma3", "none"},        {"gpt_oss", "harmony", "harmony"},
        {"lfm2", "lfm2", "none"},            {"phi3", "phi4_mini_json", "none"},
    };
    for (size_t i = 0; model_type && i < RP_ARRAY_LEN(t); i++)
        if (strncmp(model_type, t[i].type, strlen(t[i].type)) == 0)
            return reasoning ? t[i].reasoning : t[i].tool;
    return "none";
}

static void gb(double bytes, char *out, size_t n) { rp_hub_format_bytes(bytes, out, n); }

static int info_catalog_only(const rp_model_ref *ref, int as_json)
{
    const rp_catalog_entry *e = ref->entry;
    if (as_json) {
        json_t *o = json_pack("{s:s, s:s?, s:b, s:s, s:f, s:s, s:i, s:s, s:s, s:f, s:f}", "model",
                              ref->name, "repo", ref->repo, "downloaded", 0, "family", e->family,
                              "params_b", e->params_b, "quant", e->quant, "context", e->context,
                              "tool_parser", e->tool_parser, "reasoning_parser",
                              e->reasoning_parser, "download_gb", e->download_gb, "memory_gb",
                              e->memory_gb);
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("%s\n", s);
        free(s);
        json_decref(o);
        return 0;
    }
    printf("model:         %s\nrepo:          %s\nfamily:        %s\nparameters:    %.1fB\n"
           "quantization:  %s\ncontext:       %d\nparsers:       tool %s, reasoning %s\n"
           "download:      %.1f GB\nmemory:        %.1f GB (catalog estimate)\n"
           "downloaded:    no; run 'rapid pull %s' for the full details\n",
           ref->name, ref->repo ? ref->repo : "-", e->family, e->params_b, e->quant, e->context,
           e->tool_parser, e->reasoning_parser, e->download_gb, e->memory_gb, ref->name);
    return 0;
}

static void quant_label(const shape *s, char *out, size_t n)
{
    if (s->quant_bits && s->quant_group)
        snprintf(out, n, "%s %d-bit, group %d", s->quant_method, s->quant_bits, s->quant_group);
    else if (s->quant_bits)
        snprintf(out, n, "%s %d-bit", s->quant_method, s->quant_bits);
    else if (s->quant_method)
        snprintf(out, n, "%s", s->quant_method);
    else
        snprintf(out, n, "none (%s)", s->dtype ? s->dtype : "unknown dtype");
}

/* A directory of GGUF files without config.json: the files and the catalog's facts (the
 * GGUF metadata reader belongs to the model module). */
static int info_gguf(const rp_model_ref *ref, int64_t file_bytes, int as_json)
{
    DIR *d = opendir(ref->dir);
    json_t *files = json_array();
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n > 5 && strcmp(de->d_name + n - 5, ".gguf") == 0)
            json_array_append_new(files, json_string(de->d_name));
    }
    if (d)
        closedir(d);
    const rp_catalog_entry *e = ref->entry;
    char wb[32];
    gb((double)file_bytes, wb, sizeof wb);
    if (as_json) {
        json_t *o = json_pack("{s:s, s:s?, s:s, s:s, s:O, s:I, s:s?, s:s?, s:s?, s:s?, s:b}",
                              "model", ref->name, "repo", ref->repo, "dir", ref->dir, "format",
                              "gguf", "files", files, "weight_bytes", (json_int_t)file_bytes,
                              "family", e ? e->family : NULL, "quant", e ? e->quant : NULL,
                              "tool_parser", e ? e->tool_parser : NULL, "reasoning_parser",
                              e ? e->reasoning_parser : NULL, "downloaded", 1);
        char *out = json_dumps(o, JSON_INDENT(2));
        printf("%s\n", out);
        free(out);
        json_decref(o);
    } else {
        printf("model:         %s\n", ref->name);
        if (ref->repo)
            printf("repo:          %s\n", ref->repo);
        printf("directory:     %s\nformat:        gguf\n", ref->dir);
        for (size_t i = 0; i < json_array_size(files); i++)
            printf("file:          %s\n", json_string_value(json_array_get(files, i)));
        if (e)
            printf("family:        %s\nparameters:    %.1fB\nquantization:  %s\ncontext:       "
                   "%d\nparsers:       tool %s, reasoning %s\n",
                   e->family, e->params_b, e->quant, e->context, e->tool_parser,
                   e->reasoning_parser);
        printf("memory:        weights %s; KV cache not estimated (the shapes are in the GGUF "
               "header, which 'rapid info' does not read yet)\n", wb);
    }
    json_decref(files);
    return 0;
}

static int info_dir(const rp_model_ref *ref, long ctx, int as_json)
{
    const char *format = "safetensors";
    int n_files = 0;
    int64_t file_bytes = weight_files_bytes(ref->dir, &n_files, &format);
    char *cfg_path = rp_path_join(ref->dir, "config.json");
    int have_cfg = cfg_path && rp_path_exists(cfg_path);
    rp_free(cfg_path);
    if (!have_cfg && strcmp(format, "gguf") == 0)
        return info_gguf(ref, file_bytes, as_json);
    rp_model_config mc;
    rp_err err;
    if (rp_model_config_load(ref->dir, &mc, &err) != RP_OK) {
        fprintf(stderr, "rapid info: %s: %s\n", ref->dir,
                err.code == RP_ERR_NOT_FOUND ? "no config.json (is this a model directory?)"
                                             : err.msg);
        return 1;
    }
    shape s;
    read_shape(&mc, &s);
    count_layers(mc.root, &s);
    read_quant(mc.root, &s);
    int64_t params = estimate_params(&s);
    if (ctx <= 0) /* no --context: 8192 tokens, or the model's whole context when shorter */
        ctx = s.context > 0 && s.context < 8192 ? s.context : 8192;
    double bits = s.quant_bits ? s.quant_bits + (s.quant_group ? 32.0 / s.quant_group : 0)
                  : (s.dtype && strstr(s.dtype, "32")) ? 32 : 16;
    double weights = file_bytes > 0 ? (double)file_bytes : (double)params * bits / 8;
    int64_t kv_tokens_sliding = s.sliding_window > 0 && s.sliding_window < ctx ? s.sliding_window : ctx;
    double kv_per_token_layer = 2.0 * (double)s.n_kv_heads * (double)s.head_dim * 2; /* K+V, f16 */
    double kv = kv_per_token_layer * ((double)s.n_full * (double)ctx +
                                      (double)s.n_sliding * (double)kv_tokens_sliding);
    const char *tool = ref->entry ? ref->entry->tool_parser : default_parser(s.model_type, 0);
    const char *reas = ref->entry ? ref->entry->reasoning_parser : default_parser(s.model_type, 1);
    char q[96], wb[32], kvb[32], tb[32];
    quant_label(&s, q, sizeof q);
    gb(weights, wb, sizeof wb);
    gb(kv, kvb, sizeof kvb);
    gb(weights + kv, tb, sizeof tb);
    if (as_json) {
        json_t *o = json_pack(
            "{s:s, s:s?, s:s, s:s?, s:s?, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s,"
            " s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:b}",
            "model", ref->name, "repo", ref->repo, "dir", ref->dir, "architecture", s.arch,
            "model_type", s.model_type, "params", (json_int_t)params, "vocab_size",
            (json_int_t)s.vocab, "hidden_size", (json_int_t)s.dim, "layers", (json_int_t)s.n_layers,
            "attention_layers", (json_int_t)(s.n_full + s.n_sliding), "heads",
            (json_int_t)s.n_heads, "kv_heads", (json_int_t)s.n_kv_heads, "head_dim",
            (json_int_t)s.head_dim, "experts", (json_int_t)s.n_experts, "max_context",
            (json_int_t)s.context, "quantization", q, "format", format, "tool_parser", tool,
            "reasoning_parser", reas, "weight_bytes", (json_int_t)weights, "kv_context",
            (json_int_t)ctx, "kv_bytes", (json_int_t)kv, "total_bytes", (json_int_t)(weights + kv),
            "weight_files", (json_int_t)n_files, "downloaded", 1);
        char *out = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
        printf("%s\n", out);
        free(out);
        json_decref(o);
    } else {
        printf("model:         %s\n", ref->name);
        if (ref->repo)
            printf("repo:          %s\n", ref->repo);
        printf("directory:     %s\n", ref->dir);
        printf("architecture:  %s (%s)\n", s.arch ? s.arch : "?", s.model_type ? s.model_type : "?");
        if (params >= 1000000000)
            printf("parameters:    %.2fB (estimated from shapes)\n", (double)params / 1e9);
        else if (params >= 1000000)
            printf("parameters:    %.1fM (estimated from shapes)\n", (double)params / 1e6);
        else
            printf("parameters:    %.1fK (estimated from shapes)\n", (double)params / 1e3);
        printf("shape:         %lld layers (%lld attention), hidden %lld, heads %lld/%lld kv, "
               "head_dim %lld, ffn %lld, vocab %lld\n",
               (long long)s.n_layers, (long long)(s.n_full + s.n_sliding), (long long)s.dim,
               (long long)s.n_heads, (long long)s.n_kv_heads, (long long)s.head_dim,
               (long long)(s.n_experts ? s.moe_ffn : s.ffn), (long long)s.vocab);
        if (s.n_experts)
            printf("experts:       %lld, %lld active per token\n", (long long)s.n_experts,
                   (long long)s.n_experts_used);
        printf("quantization:  %s\n", q);
        printf("context:       %lld tokens\n", (long long)s.context);
        printf("parsers:       tool %s, reasoning %s\n", tool, reas);
        printf("memory:        weights %s%s + KV cache %s at %ld tokens (f16) = %s\n", wb,
               file_bytes > 0 ? "" : " (estimated)", kvb, ctx, tb);
    }
    rp_model_config_deinit(&mc);
    return 0;
}

int rp_cmd_info(int argc, char **argv)
{
    const char *ctx_s = NULL, *pos[1];
    int as_json = 0, n_pos = 0;
    rp_opt opts[] = {{"context", &ctx_s, NULL}, {"json", NULL, &as_json}};
    if (rp_args_parse(argc, argv, opts, 2, pos, 1, &n_pos) != 0)
        return 2;
    long ctx = 0;
    if (n_pos != 1 || (ctx_s && (rp_args_int(ctx_s, &ctx) != 0 || ctx <= 0))) {
        fprintf(stderr, "usage: rapid info MODEL [--context N] [--json]\n");
        return 2;
    }
    rp_catalog *cat;
    rp_err err;
    if (rp_catalog_load(&cat, &err) != RP_OK) {
        fprintf(stderr, "rapid info: %s\n", err.msg);
        return 1;
    }
    rp_model_ref ref;
    int status;
    if (rp_catalog_resolve(cat, pos[0], &ref, &err) != RP_OK) {
        fprintf(stderr, "rapid info: %s\n", err.msg);
        status = 1;
    } else {
        if (ref.dir)
            status = info_dir(&ref, ctx, as_json);
        else if (ref.entry && !ref.entry->embedded && !ref.entry->path)
            status = info_catalog_only(&ref, as_json);
        else {
            fprintf(stderr, "rapid info: %s is not on disk%s\n", pos[0],
                    ref.repo ? " (not downloaded); run 'rapid pull' first"
                    : ref.entry && ref.entry->embedded
                        ? " (no embedded model found; set RAPID_DEFAULT_MODEL)"
                        : "");
            status = 1;
        }
        rp_model_ref_deinit(&ref);
    }
    rp_catalog_free(cat);
    return status;
}
