list(APPEND RP_SOURCES src/base/gguf.c)
