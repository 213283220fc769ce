list(APPEND RP_SOURCES
  src/base/alloc.c
  src/base/arena.c
  src/base/buf.c
  src/base/cpu.c
  src/base/file.c
  src/base/log.c
  src/base/status.c
  src/base/threadpool.c
)
