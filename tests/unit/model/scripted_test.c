/* tests/unit/model/scripted_test.c - the scripted test model (model/scripted.c): rules over
 * the prompt, the script, EOS at its end, continuing a primed prefix, prefill in chunks and
 * cache truncation, malformed rapid_script. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "model/model.h"

#define VOCAB 50
#define EOS 2

/* A model dir in /tmp with config.json (script = the given JSON) and a 1-tensor checkpoint. */
static void make_dir(char *dir, const char *script)
{
    snprintf(dir, 64, "/tmp/rp_scripted_XXXXXX");
    cr_assert(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"architectures\": [\"RapidScriptedForCausalLM\"], \"model_type\": \"test\", "
            "\"vocab_size\": %d, \"hidden_size\": 8, \"num_hidden_layers\": 1, "
            "\"num_attention_heads\": 1, \"eos_token_id\": %d, \"rapid_script\": %s}",
            VOCAB, EOS, script);
    fclose(f);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "wb");
    const char hdr[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}    ";
    unsigned long long n = sizeof hdr - 1;
    fwrite(&n, 8, 1, f);
    fwrite(hdr, 1, n, f);
    float z = 0;
    fwrite(&z, 4, 1, f);
    fclose(f);
}

static void remove_dir(const char *dir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

static int argmax(const float *v)
{
    int b = 0;
    for (int i = 1; i < VOCAB; i++)
        if (v[i] > v[b])
            b = i;
    return b;
}

/* Greedy continuation of prompt, up to max tokens or EOS (included). */
static int generate(rp_model *m, const int32_t *prompt, int n, int32_t *out, int max)
{
    rp_kv *kv = NULL;
    rp_err err;
    cr_assert_eq(rp_kv_new(m, 256, &kv, &err), RP_OK, "%s", err.msg);
    float logits[VOCAB];
    cr_assert_eq(rp_model_eval(m, kv, prompt, n, logits, 0, &err), RP_OK, "%s", err.msg);
    int k = 0;
    while (k < max) {
        int32_t t = argmax(logits);
        out[k++] = t;
        if (t == EOS)
            break;
        cr_assert_eq(rp_model_eval(m, kv, &t, 1, logits, 0, &err), RP_OK, "%s", err.msg);
    }
    rp_kv_free(kv);
    return k;
}

/* after = [10, 11]; prompt containing 20 -> [30, 31, 32]; else -> [40, 41] */
static const char k_script[] = "{\"after\": [10, 11], \"rules\": [{\"if_contains\": [20], "
                               "\"emit\": [30, 31, 32]}, {\"emit\": [40, 41]}]}";

Test(scripted, rules_script_and_eos)
{
    char dir[64];
    make_dir(dir, k_script);
    rp_model *m = NULL;
    rp_err err;
    cr_assert_eq(rp_model_load(dir, NULL, &m, &err), RP_OK, "%s", err.msg);
    int32_t out[8];
    int32_t p1[] = {5, 20, 6, 10, 11};
    cr_assert_eq(generate(m, p1, 5, out, 8), 4);
    cr_assert(out[0] == 30 && out[1] == 31 && out[2] == 32 && out[3] == EOS);
    int32_t p2[] = {5, 6, 10, 11};
    cr_assert_eq(generate(m, p2, 4, out, 8), 3);
    cr_assert(out[0] == 40 && out[1] == 41 && out[2] == EOS);
    /* 20 after the generation prompt is output, not prompt: the fallback rule */
    int32_t p3[] = {10, 11, 20};
    generate(m, p3, 3, out, 8);
    cr_assert_eq(out[0], 40);
    /* no generation prompt at all: EOS at once */
    int32_t p4[] = {5, 6};
    cr_assert_eq(generate(m, p4, 2, out, 8), 1);
    cr_assert_eq(out[0], EOS);
    /* primed with the script's ids 31: carries on with 32; primed with foreign ids: from 30 */
    int32_t p5[] = {20, 10, 11, 31};
    generate(m, p5, 4, out, 8);
    cr_assert(out[0] == 32 && out[1] == EOS);
    int32_t p6[] = {20, 10, 11, 7, 8};
    generate(m, p6, 5, out, 8);
    cr_assert(out[0] == 30 && out[1] == 31 && out[2] == 32);
    rp_model_free(m);
    remove_dir(dir);
}

Test(scripted, all_logits_and_truncate)
{
    char dir[64];
    make_dir(dir, k_script);
    rp_model *m = NULL;
    rp_err err;
    cr_assert_eq(rp_model_load(dir, NULL, &m, &err), RP_OK, "%s", err.msg);
    rp_kv *kv = NULL;
    cr_assert_eq(rp_kv_new(m, 256, &kv, &err), RP_OK, "%s", err.msg);
    int32_t ids[] = {20, 10, 11, 30, 31};
    float *logits = rp_alloc(5 * VOCAB * sizeof(float));
    cr_assert_eq(rp_model_eval(m, kv, ids, 5, logits, 1, &err), RP_OK, "%s", err.msg);
    cr_assert_eq(argmax(logits + 2 * VOCAB), 30); /* row i follows ids[0..i] */
    cr_assert_eq(argmax(logits + 3 * VOCAB), 31);
    cr_assert_eq(argmax(logits + 4 * VOCAB), 32);
    rp_kv_truncate(kv, 3); /* back to [20, 10, 11] then a different token */
    int32_t t = 40;
    cr_assert_eq(rp_model_eval(m, kv, &t, 1, logits, 0, &err), RP_OK, "%s", err.msg);
    cr_assert_eq(argmax(logits), 30); /* 40 is not in this script: it starts over */
    rp_free(logits);
    rp_kv_free(kv);
    rp_model_free(m);
    remove_dir(dir);
}

Test(scripted, malformed_script)
{
    const char *bad[] = {
        "null",
        "{\"after\": [10], \"rules\": []}",
        "{\"after\": [], \"rules\": [{\"emit\": [1]}]}",
        "{\"after\": [10], \"rules\": [{\"emit\": [99]}]}",
        "{\"after\": [10], \"rules\": [{\"if_contains\": \"x\", \"emit\": [1]}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char dir[64];
        make_dir(dir, bad[i]);
        rp_model *m = NULL;
        rp_err err = {0};
        cr_assert_eq(rp_model_load(dir, NULL, &m, &err), RP_ERR_INVALID, "%s", bad[i]);
        cr_assert(strstr(err.msg, "rapid_script") || strstr(err.msg, "RapidScripted"), "%s",
                  err.msg);
        remove_dir(dir);
    }
}
