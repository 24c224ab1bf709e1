#!/usr/bin/env bash
# Prepares what `cargo bench -p lisp-syntax --bench paren_repair` compares
# against: the held-out corpus (Lisp libraries Debian ships that the repair's
# rules were not tuned on, unpacked under target/paren-corpus without being
# installed) and parinfer (npm, under target/parinfer). Idempotent.
set -euo pipefail
exec 1>&2
cd "$(dirname "$0")/.."

HELD_OUT=(cl-anaphora cl-chipz cl-closer-mop cl-closure-common cl-containers
          cl-contextl cl-csv cl-curry-compose-reader-macros cl-cxml cl-drakma
          cl-dynamic-classes cl-esrap cl-global-vars cl-graph cl-ieee-floats
          cl-ironclad cl-local-time cl-log cl-lparallel cl-lw-compat
          cl-markdown cl-metabang-bind cl-metatilities-base cl-nibbles
          cl-parse-number cl-postgres cl-postmodern cl-puri cl-quri cl-regex
          cl-s-sql cl-salza2 cl-trivial-utf-8 cl-uax-15 cl-utilities cl-uuid
          cl-who cl-xmls cl-zpb-ttf)

mkdir -p target/paren-corpus/debs
cd target/paren-corpus/debs
for p in "${HELD_OUT[@]}"; do
  ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download "$p"
done
for d in *.deb; do dpkg-deb -x "$d" ..; done
cd ../../..
echo "paren-corpus: $(ls target/paren-corpus/usr/share/common-lisp/source | wc -l) libraries under target/paren-corpus/usr/share/common-lisp/source"

if [ ! -e target/parinfer/node_modules/parinfer/parinfer.js ]; then
  npm install --prefix target/parinfer parinfer
fi
