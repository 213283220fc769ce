rp_add_script_test(template_golden golden
  /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/golden/templates/golden.py)
rp_add_script_test(template_model_dir integration
  bash ${CMAKE_SOURCE_DIR}/tests/golden/templates/model_dir_test.sh)
