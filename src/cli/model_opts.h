/* cli/model_opts.h - the model-loading options shared by the commands that run a model.
 *
 * --device cuda|cpu|auto (default: $RAPID_DEVICE, else auto = CUDA when a GPU is found) and
 * --gpu-memory-fraction F (0 < F <= 1, default 0.9). Commands add the two rp_opt entries
 * (RP_MODEL_DEVICE_OPTS) to their table and call rp_model_opts_device after parsing.
 *
 * Ownership: nothing allocated. Threading: any. Errors: returns 2 (usage) with a message on
 * stderr naming the command, 0 when the values are good.
 */
#ifndef RP_CLI_MODEL_OPTS_H
#define RP_CLI_MODEL_OPTS_H

#include "model/model.h"

typedef struct rp_device_args {
    const char *device;   /* --device */
    const char *fraction; /* --gpu-memory-fraction */
} rp_device_args;

#define RP_MODEL_DEVICE_OPTS(a)                                                                \
    {"device", &(a).device, NULL}, { "gpu-memory-fraction", &(a).fraction, NULL }

int rp_model_opts_device(const char *cmd, const rp_device_args *a, rp_model_opts *mo);

#endif
