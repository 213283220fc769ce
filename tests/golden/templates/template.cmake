rp_add_script_test(template_golden golden
  /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/golden/templates/golden.py)
