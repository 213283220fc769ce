#!/usr/bin/env bash
# Installs the Debian 12 packages rapid builds and runs with, when any is missing.
# Uses sudo when not root. Safe to run again: it does nothing when all are present.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libjansson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev
  libcurl4-openssl-dev libxxhash-dev libedit-dev
  libcriterion-dev
)
if [ -n "${RAPID_EXTRA_PACKAGES:-}" ]; then
  read -r -a extra <<<"$RAPID_EXTRA_PACKAGES"
  PACKAGES+=("${extra[@]}")
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
