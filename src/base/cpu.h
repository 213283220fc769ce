/* base/cpu.h - CPU feature detection, done once (rp_cpu_detect) from main or a test.
 *
 * The detected flags are one of the allowed process globals (docs/architecture.md). RAPID_ISA
 * (scalar|avx2|avx512) caps what is used, so every kernel path can be tested on one machine.
 * Threading: call rp_cpu_detect before starting threads; reads are then safe anywhere.
 */
#ifndef RP_BASE_CPU_H
#define RP_BASE_CPU_H

typedef enum rp_isa {
    RP_ISA_SCALAR = 0,
    RP_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    RP_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ (+ BF16, VNNI flags below) */
} rp_isa;

typedef struct rp_cpu_info {
    rp_isa isa; /* best usable level after the RAPID_ISA cap */
    int has_avx512_bf16;
    int has_avx512_vnni;
    int has_amx;
    int n_cores_online;
    char brand[64];
} rp_cpu_info;

void rp_cpu_detect(void);
const rp_cpu_info *rp_cpu(void);
const char *rp_isa_name(rp_isa isa);

#endif
