# src/server: libmicrohttpd glue, routes, SSE framing, configuration.
list(APPEND RP_SOURCES
  src/server/config.c
  src/server/sse.c
  src/server/server.c
  src/server/routes.c
)
