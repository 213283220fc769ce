/* cli/model_opts.c - --device and --gpu-memory-fraction (see model_opts.h). */
#include "cli/model_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

int rp_model_opts_device(const char *cmd, const rp_device_args *a, rp_model_opts *mo)
{
    const char *d = a->device ? a->device : getenv("RAPID_DEVICE");
    if (!d || !*d || strcmp(d, "auto") == 0)
        mo->device = RP_DEVICE_AUTO;
    else if (strcmp(d, "cuda") == 0 || strcmp(d, "gpu") == 0)
        mo->device = RP_DEVICE_CUDA;
    else if (strcmp(d, "cpu") == 0)
        mo->device = RP_DEVICE_CPU;
    else
        return fprintf(stderr, "rapid %s: --device must be cuda, cpu or auto (got '%s')\n", cmd, d),
               2;
    mo->gpu_memory_fraction = 0.9;
    if (a->fraction) {
        double f;
        if (rp_args_float(a->fraction, &f) || !(f > 0.0 && f <= 1.0))
            return fprintf(stderr, "rapid %s: --gpu-memory-fraction must be in (0, 1]\n", cmd), 2;
        mo->gpu_memory_fraction = f;
    }
    return 0;
}

int rp_engine_opts_parse(const char *cmd, const rp_engine_args *a, rp_engine_config *ec)
{
    const char *mb = a->kv_cache_mb ? a->kv_cache_mb : getenv("RAPID_KV_CACHE_MB");
    const char *dt = a->kv_cache_dtype ? a->kv_cache_dtype : getenv("RAPID_KV_CACHE_DTYPE");
    if (mb && *mb) {
        double v;
        if (rp_args_float(mb, &v) || !(v > 0))
            return fprintf(stderr, "rapid %s: --kv-cache-mb must be a positive number of MiB\n",
                           cmd), 2;
        ec->kv_cache_mb = v;
    }
    if (dt && *dt && rp_kv_dtype_parse(dt, &ec->kv_dtype))
        return fprintf(stderr, "rapid %s: --kv-cache-dtype must be f32, bf16, f16, int8 or int4 "
                               "(got '%s')\n", cmd, dt), 2;
    long n;
    if (a->max_num_seqs) {
        if (rp_args_int(a->max_num_seqs, &n) || n < 1 || n > 128)
            return fprintf(stderr, "rapid %s: --max-num-seqs must be in 1..128\n", cmd), 2;
        ec->max_num_seqs = (int)n;
    }
    const char *sp = a->spec_tokens ? a->spec_tokens : getenv("RAPID_SPECULATIVE_TOKENS");
    if (sp && *sp) {
        if (rp_args_int(sp, &n) || n < 0 || n > RP_MAX_SPEC_TOKENS)
            return fprintf(stderr, "rapid %s: --speculative-tokens must be in 0..%d\n", cmd,
                           RP_MAX_SPEC_TOKENS), 2;
        ec->spec_tokens = (int)n;
    }
    if (a->prefill_chunk) {
        if (rp_args_int(a->prefill_chunk, &n) || n < 1 || n > 128)
            return fprintf(stderr, "rapid %s: --prefill-chunk must be in 1..128\n", cmd), 2;
        ec->prefill_chunk = (int)n;
    }
    return 0;
}
