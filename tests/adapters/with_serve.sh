#!/bin/sh
# with_serve.sh INFERLAB [--stopped] [--as TOKEN] [SERVE ARGS...] -- CMD [ARG...]:
# start `INFERLAB serve SERVE ARGS --port 0` on loopback, wait until it
# listens (10 s at most), then run CMD with every @URL@ in its arguments
# replaced by the server's URL (and @PID@ by its process id); the server is
# stopped afterwards, and the exit status is CMD's. --stopped: stop the
# server before CMD runs, so the URL is one where nothing listens any more.
# --as TOKEN: replace TOKEN instead of @URL@, so that one with_serve.sh can
# run inside another (a server in front of a server).
inferlab=$1
shift
stopped=0
token=@URL@
while :; do
    case $1 in
    --stopped) stopped=1; shift ;;
    --as) token=$2; shift 2 ;;
    *) break ;;
    esac
done
dir=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' INT TERM
# the serve arguments: everything before "--"
n=0
for a do
    [ "$a" = "--" ] && break
    n=$((n + 1))
done
if [ "$n" -eq $# ]; then
    echo "with_serve.sh: no '--' before the command" >&2
    exit 2
fi
serve_args=
i=0
while [ "$i" -lt "$n" ]; do
    serve_args="$serve_args \"\${$((i + 1))}\""
    i=$((i + 1))
done
# exec: $! is the server itself, not a shell around it, so kill reaches it
eval "exec \"\$inferlab\" serve $serve_args --port 0" >"$dir/out" 2>"$dir/err" &
pid=$!
shift $((n + 1))
i=0
while ! grep -q 'listening on' "$dir/out" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "inferlab serve did not start:" >&2
        cat "$dir/err" >&2
        exit 1
    fi
    sleep 0.1
done
url=$(grep -o 'http://[0-9.:]*' "$dir/out" | head -1)
if [ "$stopped" -eq 1 ]; then
    kill "$pid" && wait "$pid" 2>/dev/null
    pid=
fi
for a do
    shift
    case $a in
    *"$token"* | *@PID@*) a=$(printf '%s\n' "$a" | sed -e "s|$token|$url|g" -e "s|@PID@|$pid|g") ;;
    esac
    set -- "$@" "$a"
done
"$@"
