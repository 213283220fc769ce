/* cli/cmd_quantize.c - `rapid quantize`: a float checkpoint into an MLX-layout 4/8-bit one. */
#include <stdio.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/quantize.h"

int rp_cmd_quantize(int argc, char **argv)
{
    const char *model = NULL, *out = NULL, *bits_s = NULL, *gs_s = "64";
    rp_opt opts[] = {{"model", &model, NULL},
                     {"out", &out, NULL},
                     {"bits", &bits_s, NULL},
                     {"group-size", &gs_s, NULL}};
    if (rp_args_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), NULL, 0, NULL))
        return 2;
    long bits = 0, gs = 0;
    if (!model || !out || !bits_s || rp_args_int(bits_s, &bits) || rp_args_int(gs_s, &gs) ||
        (bits != 4 && bits != 8) || (gs != 32 && gs != 64 && gs != 128)) {
        fprintf(stderr, "usage: rapid quantize --model DIR --bits 4|8 [--group-size 32|64|128] "
                        "--out DIR2\n");
        return 2;
    }
    rp_err err = {0};
    if (rp_quantize_dir(model, out, (int)bits, (int)gs, &err)) {
        fprintf(stderr, "rapid quantize: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s (MLX %ld-bit, group size %ld)\n", out, bits, gs);
    return 0;
}
