#!/usr/bin/env bash
# check_layers.sh [ROOT]: the include rules of the source tree (docs/architecture.md, "Code map").
# Includes flow down only: tools/ -> the roles -> common/; bench/ (an archive of its own, above
# tools/) may include tools/ too, tools/ never bench/; a role includes its own headers and
# common/'s, never another role's; common/ includes only common/. Only env_worker/ (the env
# worker, whose environments sit behind their ops table) and its household sub-folder include a
# header of the household (env_worker/household/); tools/ and bench/ reach it through the ops and
# kind tables of env_worker/env.h and common/envkind.h. A private header (NAME_int.h) is included
# only by the files of its own folder. Every include that breaks a rule is printed as
# "FILE:LINE: includes HEADER: WHY", and the script exits 1; it exits 0 (one line) when none does.
set -u
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2

roles="coordinator actor gate env_worker policy trainer"

# room PATH: the room a source path lives in (common, a role, tools, bench, top), or "" if none.
room() {
  local top=${1%%/*}
  case $1 in
    */*) ;;
    *) echo top; return ;;
  esac
  case " common tools bench $roles " in
    *" $top "*) echo "$top" ;;
    *) echo "" ;;
  esac
}

bad=0
n=0
while IFS= read -r src; do
  from=$(room "$src")
  [ -n "$from" ] || continue
  while IFS=: read -r line hdr; do
    n=$((n + 1))
    to=$(room "$hdr")
    why=""
    case $from in
      common)
        [ "$to" = common ] || why="common/ includes only common/ (common -> $to)" ;;
      tools)
        case $to in bench | top) why="tools/ does not include bench/ or the top (tools -> $to)" ;; esac ;;
      bench)
        [ "$to" = top ] && why="bench/ does not include the top" ;;
      top) ;;
      *) # a role
        if [ "$to" != common ] && [ "$to" != "$from" ]; then
          why="a role includes only its own headers and common/'s ($from -> $to)"
        fi ;;
    esac
    if [ -z "$why" ]; then
      case $hdr in
        env_worker/household/*)
          case $from in env_worker) ;;
            *) why="only env_worker/ includes the household's headers; $from goes through the ops and kind tables (env_worker/env.h, common/envkind.h)" ;;
          esac ;;
      esac
    fi
    if [ -z "$why" ]; then
      case $hdr in
        *_int.h)
          [ "${src%/*}" = "${hdr%/*}" ] ||
            why="a private header (*_int.h) is included only by its own folder's files" ;;
      esac
    fi
    if [ -n "$why" ]; then
      echo "$src:$line: includes $hdr: $why"
      bad=$((bad + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$src" |
             sed 's/^\([0-9]*\):[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1:\2/')
done < <(find common tools bench $roles -name '*.[ch]' 2>/dev/null | sort; echo selroll.c)

if [ "$bad" -gt 0 ]; then
  echo "check_layers: $bad include(s) cross the rooms the wrong way"
  exit 1
fi
echo "check_layers: $n includes, all flow down (tools -> roles -> common)"
