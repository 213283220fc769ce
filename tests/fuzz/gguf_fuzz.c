/* tests/fuzz/gguf_fuzz.c - libFuzzer target: arbitrary bytes as a GGUF file; every kv and
 * tensor is read back through the typed getters. A heap copy of exactly the input size makes
 * ASan see any read past the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = rp_alloc(size ? size : 1);
    memcpy(buf, data, size);
    rp_gguf *g;
    rp_err err;
    if (rp_gguf_open_mem(buf, size, &g, &err) == RP_OK) {
        for (int64_t i = 0; i < rp_gguf_n_kv(g); i++) {
            size_t kl;
            const char *k = rp_gguf_key(g, i, &kl);
            char key[256];
            if (kl >= sizeof(key))
                continue;
            memcpy(key, k, kl);
            key[kl] = 0;
            int64_t v;
            double d;
            const char *s;
            size_t n;
            rp_gguf_get_i64(g, key, &v, &err);
            rp_gguf_get_f64(g, key, &d, &err);
            if (rp_gguf_get_str(g, key, &s, &n, &err) == RP_OK && n)
                (void)(volatile char)s[n - 1];
            rp_gguf_type et;
            uint64_t cnt;
            if (rp_gguf_get_arr(g, key, &et, &cnt, &err) == RP_OK) {
                for (uint64_t j = 0; j < cnt && j < 64; j++) {
                    if (rp_gguf_arr_str(g, i, j, &s, &n) == RP_OK && n)
                        (void)(volatile char)s[n - 1];
                    rp_gguf_arr_i64(g, i, j, &v);
                    rp_gguf_arr_f64(g, i, j, &d);
                }
            }
        }
        for (int64_t i = 0; i < rp_gguf_n_tensors(g); i++) {
            rp_gguf_tensor t;
            if (rp_gguf_tensor_info(g, i, &t) == RP_OK && t.data && t.n_bytes)
                (void)(volatile char)((const char *)t.data)[t.n_bytes - 1];
        }
        rp_gguf_close(g);
    }
    rp_free(buf);
    return 0;
}
