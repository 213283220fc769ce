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
