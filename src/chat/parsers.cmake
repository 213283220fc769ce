list(APPEND RP_SOURCES
  src/chat/output_parser.c
  src/chat/parse_harmony.c
  src/chat/parse_json.c
  src/chat/parse_pythonic.c
  src/chat/parse_xml.c
)
