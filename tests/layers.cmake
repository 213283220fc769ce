rp_add_script_test(check_layers lint ${CMAKE_SOURCE_DIR}/tools/check_layers.sh)
