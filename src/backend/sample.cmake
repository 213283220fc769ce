list(APPEND RP_SOURCES src/backend/sample.c)
