# The embedded default model: rapid's perplexity on the committed held-out sample equals the
# PyTorch value in models/default/training.json within 1%.
rp_add_script_test(default_model_perplexity golden
  bash ${CMAKE_SOURCE_DIR}/tests/golden/default_model/check_perplexity.sh)
