list(APPEND RP_SOURCES
  src/backend/kv_rows.c
  src/backend/cpu/x86/attn_avx512.c
  src/backend/cpu/x86/attn_avx2.c
)
set_source_files_properties(src/backend/cpu/x86/attn_avx512.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX512_FLAGS}")
set_source_files_properties(src/backend/cpu/x86/attn_avx2.c PROPERTIES COMPILE_OPTIONS "${RP_ISA_AVX2_FLAGS}")
