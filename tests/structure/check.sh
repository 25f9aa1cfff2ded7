#!/bin/sh
# The size rules of issue 25, held by a test: no source file (.cc, .h) over
# 500 lines, no function over 120, in the folders named (tests excluded).
# A function is a definition at namespace level: from the first line of its
# declaration (in column 0) to its closing brace in column 0, as
# .clang-format lays them out; namespaces, classes, structs and enums are
# containers, not functions (their inline members are short, or the file
# limit holds them). Before it checks the tree, the check proves on files
# it writes that it finds an over-long function and an over-long file.
# Usage: check.sh SOURCE_DIR FOLDER...
set -u
src=$1
shift
max_file=500
max_function=120

# Prints "FILE:LINE: N lines: SIGNATURE" for each function over LIMIT lines.
long_functions() {
  awk -v lim="$1" '
    function reset() { start = 0; sig = "" }
    /^[ \t]*$/ { if (!open) reset(); next }
    /^(#|\/\/)/ { if (!open) reset(); next }
    !open && /^[A-Za-z~]/ { if (!start) { start = FNR; sig = $0 } }
    !open && start && /;[ \t]*(\/\/.*)?$/ { reset(); next }
    !open && start && /\{[ \t]*(\/\/.*)?$/ {
      if (sig ~ /^(namespace|class|struct|enum|union|extern|template <[^>]*> (class|struct))/) {
        reset(); next
      }
      open = 1; next
    }
    open && /^\}/ {
      n = FNR - start + 1
      if (n > lim) printf "%s:%d: %d lines: %s\n", FILENAME, start, n, sig
      open = 0; reset(); next
    }
    FNR == 1 && open { open = 0; reset() }
  ' "$2"
}

# The check on what it must find.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo 'namespace x {'
  echo 'int Long(int a,'
  echo '         int b) {'
  i=0; while [ $i -lt $((max_function - 2)) ]; do echo '  a += b;'; i=$((i + 1)); done
  echo '}'
  echo 'int Short() {'
  echo '  return 0;'
  echo '}'
  echo '}  // namespace x'
} > "$tmp/probe.cc"
found=$(long_functions $max_function "$tmp/probe.cc")
case $found in
  *":2: $((max_function + 1)) lines: int Long(int a,") ;;
  *) echo "the check missed a function of $((max_function + 1)) lines: '$found'"; exit 1 ;;
esac

status=0
for folder in "$@"; do
  for f in $(find "$src/$folder" -name '*.cc' -o -name '*.h' | grep -v '_test\.' | sort); do
    lines=$(wc -l < "$f")
    if [ "$lines" -gt $max_file ]; then
      echo "${f#$src/}: $lines lines (at most $max_file)"
      status=1
    fi
    out=$(long_functions $max_function "$f")
    if [ -n "$out" ]; then
      echo "$out" | sed "s|^$src/||; s|\$| (at most $max_function)|"
      status=1
    fi
  done
done
[ $status -eq 0 ] && echo "ok: no file over $max_file lines, no function over $max_function in $*"
exit $status
