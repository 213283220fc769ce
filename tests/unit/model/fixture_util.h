/* tests/unit/model/fixture_util.h - helpers for tests over tests/golden/models fixtures.
 *
 * Fixtures (made on the device by scripts/fixtures/make_fixtures.py): config.json,
 * safetensors, ids.json {ids, greedy, vocab_size}, logits.bin (float32 [n_ids][vocab]).
 */
#ifndef RP_TESTS_FIXTURE_UTIL_H
#define RP_TESTS_FIXTURE_UTIL_H

#include <stdint.h>

#include "backend/backend.h"
#include "base/status.h"

typedef struct fixture {
    char dir[512];
    int32_t ids[64];
    int n_ids;
    int32_t greedy[64];
    int n_greedy;
    int vocab;
    float *logits; /* n_ids * vocab, rp_free */
} fixture;

/* Loads tests/golden/models/<name> (RP_SOURCE_DIR from the environment). 0 ok. */
int fixture_load(const char *name, fixture *f);
void fixture_free(fixture *f);

/* Copies a fixture into a fresh temp dir with every 2-D weight converted to `dt` (1-D tensors
 * stay f32), and config.json rewritten into transformers-4 key style when v4_config. Returns
 * the new dir (static buffer per call site is the caller's: out must hold 512 bytes). */
int fixture_convert(const fixture *f, rp_dtype dt, int v4_config, char *out_dir);

/* As fixture_convert; round_bf16 stores f32 weights whose values went through bf16, so
 * bf16 kernels can be checked against f32 math on identical values. */
int fixture_convert_ex(const fixture *f, rp_dtype dt, int v4_config, int round_bf16,
                       char *out_dir);

/* Removes a model directory a test made (fixture_convert, quantize, a GGUF twin). */
void fixture_remove(const char *dir);

/* max |a - b| over n floats */
float max_abs_diff(const float *a, const float *b, long n);
/* max |a| over n floats */
float max_abs(const float *a, long n);
/* index of the largest of x[0..n) (the first on ties) */
int argmax_f32(const float *x, int n);

/* Loads the model in dir (ref_kernels as rp_model_opts: 0 fast, 1 reference, 2 exact),
 * evaluates ids[0..n) from an empty cache and returns every position's logits (n * vocab
 * floats, rp_free). NULL on failure, with the reason in *err, or on stderr when err is NULL. */
float *fixture_eval(const char *dir, const int32_t *ids, int n, int vocab, int ref_kernels,
                    rp_err *err);

#endif
