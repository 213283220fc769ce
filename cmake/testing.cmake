# Test helpers. Unit tests use Criterion and carry the label "unit" (the ASan build runs
# those); everything else is labelled by kind ("golden", "integration").
pkg_check_modules(CRITERION REQUIRED IMPORTED_TARGET criterion)

# rp_add_unit_test(NAME SOURCES...): one Criterion binary, registered with ctest.
function(rp_add_unit_test name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE rapid_core PkgConfig::CRITERION)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests)
  add_test(NAME ${name} COMMAND ${name} --jobs 1)
  set_tests_properties(${name} PROPERTIES LABELS unit
    ENVIRONMENT "RP_SOURCE_DIR=${CMAKE_SOURCE_DIR};RP_BUILD_DIR=${CMAKE_BINARY_DIR}")
endfunction()

# rp_add_script_test(NAME LABEL COMMAND...): a test run by a script (node, python, bash).
function(rp_add_script_test name label)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS ${label}
    ENVIRONMENT "RP_SOURCE_DIR=${CMAKE_SOURCE_DIR};RP_BUILD_DIR=${CMAKE_BINARY_DIR};RAPID=$<TARGET_FILE:rapid>")
endfunction()
