#!/usr/bin/env bash
# Debian packages used by tests only: the Jinja2 reference renderer (Debian's python3 at
# /usr/bin/python3, which tests call by that path), numpy for golden checks, curl, clang
# (libFuzzer), wamerican (the word list the default-model test checks English against).
# Node.js comes from Debian unless a node is already installed (npm included).
set -euo pipefail
extra="python3 python3-jinja2 python3-numpy curl clang wamerican"
command -v node >/dev/null || extra="$extra nodejs npm"
RAPID_EXTRA_PACKAGES="$extra" "$(dirname "$0")/../install-deps.sh"
