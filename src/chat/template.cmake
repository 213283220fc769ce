list(APPEND RP_SOURCES
  src/chat/jinja_value.c
  src/chat/jinja_lex.c
  src/chat/jinja_parse.c
  src/chat/jinja_eval.c
  src/chat/jinja_filters.c
  src/chat/jinja_methods.c
  src/chat/template.c
)
