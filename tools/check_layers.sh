#!/usr/bin/env bash
# Fails when a source file includes a header from a layer above its own (docs/architecture.md).
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
  [base]="base"
  [text]="text base"
  [chat]="chat text base"
  [backend]="backend base"
  [model]="model backend base"
  [engine]="engine model backend text base"
  [api]="api engine chat text model backend base"
  [server]="server api engine chat text model backend base"
  [cli]="cli server api engine chat text model backend base"
)
bad=0
while IFS= read -r f; do
  layer=$(echo "$f" | cut -d/ -f2)
  [ -n "${allowed[$layer]:-}" ] || continue
  while IFS= read -r inc; do
    dep=$(echo "$inc" | sed -E 's/#include "([^/"]+)\/.*/\1/')
    [ "$dep" = "$inc" ] && continue
    case " ${allowed[$layer]} " in
      *" $dep "*) ;;
      *) echo "layer violation: $f includes $dep/ ($inc)"; bad=1 ;;
    esac
  done < <(grep -E '^#include "[^"]+/' "$f" || true)
done < <(find src -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh')
exit $bad
