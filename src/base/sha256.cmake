list(APPEND RP_SOURCES src/base/sha256.c)
