list(APPEND RP_SOURCES
  src/text/bpe.c
  src/text/detok.c
  src/text/pretok.c
  src/text/tok_gguf.c
  src/text/tok_json.c
  src/text/tokenizer.c
  src/text/unicode.c
)
