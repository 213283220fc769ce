# CUDA backend (included by cmake/cuda.cmake when nvcc is found and CUDA != 0).
# Kernels are CUDA C++ for Hopper (sm_90a machine code) plus PTX for newer GPUs; the C side
# is plain C17. Links cuBLASLt from the CUDA toolkit; the runtime is linked statically.
# The source-fragment glob of CMakeLists.txt also reaches this file, before rapid_core
# exists: nothing to do then.
if(NOT TARGET rapid_core)
  return()
endif()
if(NOT DEFINED RP_CUDA_ARCHS)
  set(RP_CUDA_ARCHS "90a-real;90-virtual")
endif()
# every target that links CUDA code needs an architecture list, not only rapid_cuda
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "${RP_CUDA_ARCHS}")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
add_library(rapid_cuda STATIC src/backend/cuda/cuda_kernels.cu src/backend/cuda/cuda_quant.cu
  src/backend/cuda/cuda_wgmma.cu src/backend/cuda/cuda_wgmma_q4.cu
  src/backend/cuda/cuda_decode.cu src/backend/cuda/cuda_sample.cu)
# the GPU draw repeats the host's arithmetic operation for operation (cuda_sample.cu)
set_source_files_properties(src/backend/cuda/cuda_sample.cu PROPERTIES COMPILE_OPTIONS "--fmad=false")
set_target_properties(rapid_cuda PROPERTIES CUDA_ARCHITECTURES "${RP_CUDA_ARCHS}"
  CUDA_STANDARD 17 POSITION_INDEPENDENT_CODE ON)
target_include_directories(rapid_cuda PRIVATE ${CMAKE_SOURCE_DIR}/src)
# the directory's C warning flags (-Wextra -Werror ...) are not nvcc options: start clean
set_property(TARGET rapid_cuda PROPERTY COMPILE_OPTIONS "")
# -Werror etc. are C flags; keep nvcc's own warnings, and pass host flags through -Xcompiler
target_compile_options(rapid_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3 -Xcompiler=-Wall,-Wno-unused-parameter>)
target_link_libraries(rapid_cuda PUBLIC CUDA::cublasLt CUDA::cudart_static)
target_sources(rapid_core PRIVATE src/backend/cuda/cuda_backend.c)
# rapid_core was made before CMAKE_CUDA_ARCHITECTURES was set here
set_target_properties(rapid_core PROPERTIES CUDA_ARCHITECTURES "${RP_CUDA_ARCHS}")
target_compile_definitions(rapid_core PUBLIC RP_HAVE_CUDA=1)
target_link_libraries(rapid_core PUBLIC rapid_cuda)
