# src/api/metrics: the metrics registry behind GET /metrics and GET /v1/status.
list(APPEND RP_SOURCES src/api/metrics.c)
