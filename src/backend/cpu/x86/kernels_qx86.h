/* backend/cpu/x86/kernels_qx86.h - fast x86 kernels for quantized weights (decode in
 * kernels_qx86.c, prefill in kernels_qx86_prefill.c):
 * MLX decode on AVX-512 VNNI (row kernels on the stored layout, and tile kernels on MLX4/MLX8/
 * Q4_0/Q8_0 weights repacked at load), and prefill of every quantized type on AMX-BF16 tiles.
 *
 * Ownership: every pointer is the caller's; nothing is allocated (the repacked weights of
 * rp_qx_repack are a buffer the caller allocates and owns). Threading: pure functions;
 * concurrent calls need distinct rowbuf / y rows. Errors: none; callers check *_fits first.
 * Only call with rp_cpu() reporting AVX-512 VNNI (decode) or AMX + AVX512-BF16 with the tile
 * state granted by rp_amx_enable (prefill); the repack (qx86_pack.c),
 * rp_qx_packed_decode_avx2, rp_qx_packed_prefill_avx2 and rp_qx_quant_act_avx2 need only AVX2
 * (and FMA).
 */
#ifndef RP_BACKEND_CPU_X86_KERNELS_QX86_H
#define RP_BACKEND_CPU_X86_KERNELS_QX86_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend_impl.h"

/* Fewest tokens for which rp_qx_prefill beats the int8 decode kernels. */
#define RP_QX_MIN_TOKENS 8

/* Decode: MLX 4/8-bit, group size 64 or 128, cols % 1024 == 0, run64 activations (and
 * even_odd for 4-bit), as rp_quant_act writes them. An rp_qmatmul_kernel. */
int rp_qx_decode_fits(const rp_tensor *w, const rp_qact *a);
void rp_qx_mlx_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                      float *y);

/* Decode of GGUF Q8_0 / Q4_0: cols % 512 == 0 (<= 32768), natural activations (no run64).
 * The backend dispatches Q4_0 only (Q8_0 measured slower than the 256-bit kernel). */
int rp_qx_gguf_decode_fits(const rp_tensor *w, const rp_qact *a);
void rp_qx_gguf_decode(const rp_tensor *w, long r0, long r1, const rp_qact *a, int n_tok,
                       float *y);

/* Decode on weights repacked at load (the CPU backend's weight op; a layout built for the
 * kernel). MLX4 / MLX8 with group 64 or 128, GGUF Q4_0 / Q8_0; cols % 64 == 0. Rows in tiles
 * (4-bit: 32 rows, 8-bit: 16; the last zero-padded); a tile is its groups in order (MLX: gs
 * columns; GGUF: 64 columns = two 32-blocks), each group = gs / 64 blocks of 1024 bytes of
 * codes (4 consecutive k of one row per int32 lane; 4-bit: row i low nibble, row 16 + i high
 * nibble of the same byte), then the tile rows' scales and biases as stored (MLX:
 * scale_dtype), or the two 32-blocks' f16 d (GGUF). Q8_0 codes are stored as q + 128 (u8).
 * Every group is a multiple of 64 bytes and a tile is contiguous, so a thread's rows are one
 * sequential stream.
 * Memory: the packed copy (rp_qx_repack_bytes: the original's size plus tile padding) is heap
 * memory the backend owns, in addition to the original view (mmap), which stays valid for the
 * kernels that read that layout (embedding rows; AMX prefill when not given the copy); after
 * the repack only those touch the original's pages (file-backed, so the kernel may drop them).
 * rp_qx_repack writes tiles [t0, t1) (of rp_qx_repack_tiles) of out (64-byte aligned).
 * rp_qx_packed_decode: rows [r0, r1), r0 a multiple of 32, any n_tok (4, 2 or 1 tokens per
 * pass over a tile); activations from rp_quant_act with even_odd 0 and
 * run64 = rp_qx_repack_run64(dtype). Error: the int8 activation bound of rp_qact (per
 * 64-block for MLX, per 32-run for GGUF), with f32 sums (integer sums exact). */
int rp_qx_repack_fits(const rp_tensor *w);
size_t rp_qx_repack_bytes(const rp_tensor *w);
long rp_qx_repack_tiles(const rp_tensor *w);
int rp_qx_repack_run64(rp_dtype dt);
void rp_qx_repack(const rp_tensor *w, long t0, long t1, void *out);
void rp_qx_packed_decode(const rp_tensor *w, const void *packed, long r0, long r1,
                         const rp_qact *a, int n_tok, float *y);
typedef void (*rp_qx_packed_fn)(const rp_tensor *w, const void *packed, long r0, long r1,
                                const rp_qact *a, int n_tok, float *y);
/* The same on AVX2 (kernels_qx86_avx2.c; rp_cpu() reporting AVX2 and FMA): the same integer
 * sums (maddubs + madd in place of VPDPBUSD) and the same f32 operations per row in the same
 * order, so the same results as rp_qx_packed_decode, bit for bit. */
void rp_qx_packed_decode_avx2(const rp_tensor *w, const void *packed, long r0, long r1,
                              const rp_qact *a, int n_tok, float *y);
/* Prefill on AVX2 (kernels_qx86_prefill_avx2.c): the same arguments and results as
 * rp_qx_packed_decode_avx2, bit for bit, in passes of 6 tokens over half a tile (the last
 * n_tok % 6 tokens through the decode kernel). The backend takes it from
 * RP_QX_AVX2_PREFILL_MIN tokens, its first full pass (one thread, 2048 x 2048, Q4_0 and Q8_0:
 * faster than the decode kernel at 6, 7, 8 and 12 tokens). */
#define RP_QX_AVX2_PREFILL_MIN 6
void rp_qx_packed_prefill_avx2(const rp_tensor *w, const void *packed, long r0, long r1,
                               const rp_qact *a, int n_tok, float *y);
/* Tile `tile`'s 64-column block kb in a packed copy: its 1024 bytes of codes, and (*scales)
 * its group's scales (MLX: scales then biases, GGUF: the two 32-blocks' d, tile rows each). */
const uint8_t *rp_qx_packed_block(const rp_tensor *w, const void *packed, long tile, long kb,
                                  const uint8_t **scales);

/* rp_quant_act(x, n_tok, cols, 0, run64, q, d, s) on AVX-512 (cols % 64 == 0): q and d
 * bit-identical, s the same sums in another order (f32 rounding of a 32-term sum). */
void rp_qx_quant_act(const float *x, int n_tok, long cols, int run64, int8_t *q, float *d,
                     float *s);
/* The same on AVX2 (kernels_qx86_avx2.c), bit-identical to rp_qx_quant_act: s summed in the
 * AVX-512 reduction's order. */
void rp_qx_quant_act_avx2(const float *x, int n_tok, long cols, int run64, int8_t *q, float *d,
                          float *s);

/* Prefill: any quantized type but MXFP4, and bf16 (rows read in place), n_tok >=
 * RP_QX_MIN_TOKENS. x is packed once per call
 * by rp_qx_pack_bf16 into rp_qx_pack_bytes; each thread passes a rowbuf of
 * rp_qx_rowbuf_bytes(cols) (64-byte aligned) and does rows [r0, r1) of y[n_tok][rows].
 * packed: NULL, or w's copy from rp_qx_repack (then r0 is a multiple of 32 and the weight rows
 * are read from it: the same bf16 values as from the view, bit for bit). */
int rp_qx_prefill_fits(const rp_tensor *w, int n_tok);
size_t rp_qx_pack_bytes(int n_tok, long cols);
size_t rp_qx_rowbuf_bytes(long cols);
void rp_qx_pack_bf16(const float *x, int n_tok, long cols, uint16_t *out);
void rp_qx_prefill(const rp_tensor *w, const void *packed, long r0, long r1,
                   const uint16_t *xb, int n_tok, void *rowbuf, float *y);

/* Row `row` of a quantized 2-D tensor into bf16 (the reference's f32 value rounded to nearest
 * even); f32 is scratch of shape[1] floats. */
void rp_qx_dequant_bf16(const rp_tensor *w, long row, uint16_t *out, float *f32);

#endif
