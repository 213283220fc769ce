# The GPU check (scripts/gpu-test.sh runs it on a machine with a GPU; CI only builds it).
if(RP_HAVE_CUDA)
  add_executable(rapid_gpu_check tests/gpu/gpu_check.c tests/gpu/gpu_check_quant.c
    tests/gpu/gpu_check_gemm.c tests/gpu/gpu_check_gguf.c tests/gpu/gpu_check_decode.c
    tests/gpu/gpu_check_mv1.c tests/gpu/gpu_check_qmv.c tests/gpu/gpu_check_sample.c
    tests/gpu/gpu_check_wgmma.c tests/gpu/gpu_check_q4wg.c
    tests/unit/model/fixture_util.c
    tests/unit/model/gguf_writer.c)
  target_link_libraries(rapid_gpu_check PRIVATE rapid_core)
  target_include_directories(rapid_gpu_check PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit/model)
endif()
