list(APPEND RP_SOURCES
  src/backend/backend.c
  src/backend/quant.c
  src/backend/cpu/cpu_backend.c
  src/backend/cpu/kernels_scalar.c
  src/backend/cpu/ref_ops.c
  src/backend/cpu/x86/kernels_avx2.c
  src/backend/cpu/x86/kernels_avx512.c
  src/backend/cpu/x86/kernels_amx.c
  src/backend/cpu/x86/kernels_qx86.c
  src/backend/cpu/x86/kernels_qx86_prefill.c
  src/backend/cpu/x86/kernels_qx86_avx2.c
  src/backend/cpu/x86/kernels_qx86_prefill_avx2.c
  src/backend/cpu/x86/qx86_pack.c
)
set_source_files_properties(src/backend/cpu/x86/kernels_avx2.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX2_FLAGS}")
set_source_files_properties(src/backend/cpu/x86/kernels_avx512.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX512_FLAGS}")
set_source_files_properties(src/backend/cpu/x86/kernels_amx.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX512_FLAGS};-mamx-tile;-mamx-bf16;-mamx-int8")
set_source_files_properties(src/backend/cpu/x86/kernels_qx86_avx2.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX2_FLAGS}")
set_source_files_properties(src/backend/cpu/x86/kernels_qx86_prefill_avx2.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX2_FLAGS}")
set_source_files_properties(src/backend/cpu/x86/kernels_qx86.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX512_FLAGS}")
set_source_files_properties(src/backend/cpu/x86/kernels_qx86_prefill.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX512_FLAGS};-mamx-tile;-mamx-bf16")
