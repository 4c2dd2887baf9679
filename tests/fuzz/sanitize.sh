#!/usr/bin/env bash
# The compiled wire module built with AddressSanitizer + UndefinedBehaviorSanitizer (gcc):
# a coverage-guided fuzz run on the ordinary build grows a corpus, then the sanitized build
# runs the twin property tests and fuzzes from that corpus (under gcc's ASan atheris gets no
# coverage signal, so the corpus carries it over).
# Usage: tests/fuzz/sanitize.sh [FUZZ_SECONDS]     (from the repository root, after make install)
set -euo pipefail
SECS=${1:-60}
PY=$(pwd)/${PY:-.venv/bin/python}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
echo "== coverage-guided fuzz, ordinary build, ${SECS}s"
$PY -m tests.fuzz.fuzz_wire -max_total_time="$SECS" -seed=7 "$W/corpus" 2>&1 | grep -E "DONE|Done"
cp -r ledgermq tests "$W/"
rm -f "$W"/ledgermq/wire/_native*.so
INC=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined -I"$INC" ledgermq/wire/_native*.c -lz \
    -o "$W/ledgermq/wire/_native$EXT"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
export PYTHONMALLOC=malloc  # every object from malloc, so ASan sees their bounds
cd "$W"
$PY -c 'import ledgermq.wire._native as n; print("== sanitized build:", n.__file__)'
$PY -m pytest -q -p no:cacheprovider tests/wire/test_native_twins.py \
    tests/wire/test_message.py tests/wire/test_scan.py tests/broker/test_send_parsing.py \
    tests/remoting/test_command.py
echo "== fuzz under ASan/UBSan from $(ls corpus | wc -l) corpus units, ${SECS}s"
$PY -m tests.fuzz.fuzz_wire --mutate "$SECS" corpus
echo "sanitizer run: clean"
