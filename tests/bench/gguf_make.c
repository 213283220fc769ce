/* tests/bench/gguf_make.c - writes a GGUF (Q4_0, Q8_0, F16, ...) of a safetensors checkpoint
 * for benchmarks, with the tests' GGUF writer (tests/unit/model/gguf_writer.c: llama.cpp's
 * layout, Q/K rows permuted for "llama", weights quantized with backend/quant.c).
 *
 * Not a test: `build/gguf_make DIR TYPE OUT.gguf [vocab]` (TYPE: q4_0, q8_0, f16, bf16, f32),
 * used by scripts/bench-quant.sh on the random Llama-3.2-1B-shaped checkpoint. With `vocab`
 * the file also carries the writer's placeholder SentencePiece vocabulary (gguf_writer.h), which
 * llama.cpp needs to load it (scripts/bench-llamacpp.sh). Exit 1 on failure.
 */
#include <stdio.h>
#include <string.h>

#include "unit/model/gguf_writer.h"

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        rp_dtype dt;
    } types[] = {{"q4_0", RP_DT_Q4_0}, {"q8_0", RP_DT_Q8_0}, {"f16", RP_DT_F16},
                 {"bf16", RP_DT_BF16}, {"f32", RP_DT_F32}};
    if ((argc != 4 && argc != 5) || (argc == 5 && strcmp(argv[4], "vocab"))) {
        fprintf(stderr, "usage: gguf_make DIR q4_0|q8_0|f16|bf16|f32 OUT.gguf [vocab]\n");
        return 1;
    }
    gguf_opts o = {.vocab = argc == 5};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(argv[2], types[i].name))
            return gguf_write_ex(argv[1], types[i].dt, 0, argv[3], &o) ? 1 : 0;
    fprintf(stderr, "gguf_make: unknown type '%s'\n", argv[2]);
    return 1;
}
