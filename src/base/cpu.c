/* base/cpu.c - cpuid and xgetbv checks (OS must save the wide registers). */
#include "base/cpu.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static rp_cpu_info g_cpu;
static int g_detected;

#if defined(__x86_64__)
static unsigned long long xgetbv0(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static void detect_x86(rp_cpu_info *c)
{
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d))
        return;
    int osxsave = (cx >> 27) & 1, fma = (cx >> 12) & 1, f16c = (cx >> 29) & 1;
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    int ymm_ok = (xcr0 & 0x6) == 0x6, zmm_ok = (xcr0 & 0xe6) == 0xe6;
    __cpuid_count(7, 0, a, b, cx, d);
    int avx2 = (b >> 5) & 1;
    int avx512 = ((b >> 16) & 1) && ((b >> 17) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1);
    c->has_avx512_vnni = (cx >> 11) & 1;
    c->has_amx = (d >> 24) & 1;
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    c->has_avx512_bf16 = (a1 >> 5) & 1;
    if (avx2 && fma && f16c && ymm_ok)
        c->isa = RP_ISA_AVX2;
    if (c->isa == RP_ISA_AVX2 && avx512 && zmm_ok)
        c->isa = RP_ISA_AVX512;
    if (c->isa != RP_ISA_AVX512)
        c->has_avx512_bf16 = c->has_avx512_vnni = 0;
    unsigned brand[12];
    if (__get_cpuid(0x80000000, &a, &b, &cx, &d) && a >= 0x80000004) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2],
                        &brand[4 * i + 3]);
        memcpy(c->brand, brand, 48);
        c->brand[48] = '\0';
    }
}
#endif

void rp_cpu_detect(void)
{
    memset(&g_cpu, 0, sizeof g_cpu);
#if defined(__x86_64__)
    detect_x86(&g_cpu);
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    g_cpu.n_cores_online = n > 0 ? (int)n : 1;
    const char *cap = getenv("RAPID_ISA");
    if (cap) {
        rp_isa want = strcmp(cap, "scalar") == 0 ? RP_ISA_SCALAR
                      : strcmp(cap, "avx2") == 0 ? RP_ISA_AVX2
                                                 : RP_ISA_AVX512;
        if (want < g_cpu.isa)
            g_cpu.isa = want;
        if (g_cpu.isa != RP_ISA_AVX512)
            g_cpu.has_avx512_bf16 = g_cpu.has_avx512_vnni = 0;
    }
    g_detected = 1;
}

const rp_cpu_info *rp_cpu(void)
{
    if (!g_detected)
        rp_cpu_detect();
    return &g_cpu;
}

const char *rp_isa_name(rp_isa isa)
{
    switch (isa) {
    case RP_ISA_SCALAR: return "scalar";
    case RP_ISA_AVX2: return "avx2";
    case RP_ISA_AVX512: return "avx512";
    }
    return "?";
}
