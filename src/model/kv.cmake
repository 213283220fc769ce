list(APPEND RP_SOURCES
  src/model/kv_cache.c
)
