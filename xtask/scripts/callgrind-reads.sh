#!/usr/bin/env bash
# Instructions per authenticated balance read, counted by callgrind: a figure that does not
# move with the machine's load, for comparing two builds of gatewayd (docs/PERFORMANCE.md).
#
#   xtask/scripts/callgrind-reads.sh [path/to/gatewayd] [members]
#
# Starts the binary under `valgrind --tool=callgrind` on a fresh SQLite file, creates the coop
# `bench` with `members` members (300 by default), and reads each member's own balance with its
# own token (wrk, one thread, 8 connections, cycling over the members): 3 s of warm-up, then the
# counters are zeroed, 10 s are counted, and the total is divided by the requests wrk completed.
# Needs valgrind, wrk and python3; sends traffic only to 127.0.0.1. With CALLGRIND_KEEP=<file>,
# the counted profile is copied there for callgrind_annotate.
#
# With TAIL=1 the binary runs without valgrind (with the flags in GATEWAY_FLAGS) and, after 2 s of
# warm-up, wrk (two threads, 64 connections, --latency) reads for 4 s twice, printing requests/s
# and p99 of each run: the ceiling scenario's load on one gateway, for alternating two builds in
# the same minutes. Use 900 members: each DID's bucket (1,000 a minute) then lasts the run.
set -euo pipefail

binary=${1:-target/release/gatewayd}
members=${2:-300}
port=${CALLGRIND_PORT:-18710}
secret="callgrind-reads-secret-callgrind-reads-secret"
work=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

tools="valgrind wrk python3 callgrind_control callgrind_annotate"
[ "${TAIL:-0}" = 1 ] && tools="wrk python3"
for tool in $tools; do
    command -v "$tool" >/dev/null || { echo "callgrind-reads: $tool is not installed" >&2; exit 1; }
done

# Tokens (HS256, the gateway's claims) and the wrk script, one entry per member.
SECRET=$secret MEMBERS=$members WORK=$work python3 - <<'PY'
import base64, hashlib, hmac, json, os, time
secret, members, work = os.environ["SECRET"].encode(), int(os.environ["MEMBERS"]), os.environ["WORK"]
alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
def b58(data):
    n, text = int.from_bytes(data, "big"), ""
    while n:
        n, r = divmod(n, 58)
        text = alphabet[r] + text
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + text
def did(name):
    return "did:key:z" + b58(bytes([0xED, 0x01]) + hashlib.sha256(name.encode()).digest())
def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
def token(subject, scopes):
    now = int(time.time())
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = {"sub": subject, "coop_id": "bench", "scopes": scopes, "iat": now, "exp": now + 3600,
              "iss": "icn-gateway", "aud": "icn-gateway", "jti": "callgrind-" + subject[-12:]}
    body = b64(json.dumps(claims).encode())
    signature = b64(hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{signature}"
admin = did("admin")
people = [did(str(n)) for n in range(members)]
json.dump({"admin": token(admin, ["coop:read", "coop:write", "ledger:read", "ledger:write"]), "members": people},
          open(f"{work}/setup.json", "w"))
entries = "\n".join(f'  {{ "/v1/ledger/bench/balance/{p}", "Bearer {token(p, ["ledger:read"])}" }},' for p in people)
open(f"{work}/reads.lua", "w").write(f"""local entries = {{
{entries}
}}
local requests, i = {{}}, 0
function init(args)
  for k, entry in ipairs(entries) do
    requests[k] = wrk.format("GET", entry[1], {{ ["Authorization"] = entry[2] }})
  end
end
function request()
  i = i % #requests + 1
  return requests[i]
end
function done(summary, latency, requests)
  io.write(string.format("non-2xx %d\\n", summary.errors.status))
end
""")
PY

under=(valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out")
[ "${TAIL:-0}" = 1 ] && under=()
# shellcheck disable=SC2086 # GATEWAY_FLAGS is a list of flags
ICN_GATEWAY_JWT_SECRET=$secret RUST_LOG=warn "${under[@]}" \
    "$binary" --listen "127.0.0.1:$port" --metrics-listen 127.0.0.1:0 --store "sqlite:$work/gw.db" \
    --open-enrollment true --trust-default 0.9 ${GATEWAY_FLAGS:-} >"$work/gatewayd.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/health')" 2>/dev/null && break
    sleep 0.5
done

PORT=$port WORK=$work python3 - <<'PY'
import json, os, urllib.request
port, setup = os.environ["PORT"], json.load(open(os.environ["WORK"] + "/setup.json"))
def post(path, body):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers={"authorization": "Bearer " + setup["admin"], "content-type": "application/json"})
    urllib.request.urlopen(request)
post("/v1/coops", {"name": "Bench", "coop_type": "worker"})
for member in setup["members"]:
    post("/v1/coops/bench/members", {"did": member})
PY

if [ "${TAIL:-0}" = 1 ]; then
    wrk -t2 -c64 -d2 -s "$work/reads.lua" "http://127.0.0.1:$port" >/dev/null
    for _ in 1 2; do
        wrk -t2 -c64 -d4 --latency -s "$work/reads.lua" "http://127.0.0.1:$port" >"$work/wrk.txt"
        rate=$(grep -oE 'Requests/sec: +[0-9.]+' "$work/wrk.txt" | grep -oE '[0-9.]+$')
        p99=$(grep -E '^ +99%' "$work/wrk.txt" | awk '{print $2}')
        refused=$(grep -oE 'non-2xx [0-9]+' "$work/wrk.txt" | grep -oE '[0-9]+$')
        echo "$binary ${GATEWAY_FLAGS:-}: $rate reads/s, p99 $p99, $refused not 2xx"
    done
    exit 0
fi
wrk -t1 -c8 -d3 -s "$work/reads.lua" "http://127.0.0.1:$port" >/dev/null
callgrind_control -z "$pid" >/dev/null
wrk -t1 -c8 -d10 -s "$work/reads.lua" "http://127.0.0.1:$port" >"$work/wrk.txt"
callgrind_control -d "$pid" >/dev/null
requests=$(grep -oE '[0-9]+ requests in' "$work/wrk.txt" | grep -oE '^[0-9]+')
refused=$(grep -oE 'non-2xx [0-9]+' "$work/wrk.txt" | grep -oE '[0-9]+$')
dump=$(ls "$work"/callgrind.out.* | head -1)
total=$(callgrind_annotate "$dump" 2>/dev/null | grep -m1 'PROGRAM TOTALS' | grep -oE '^[0-9,]+' | tr -d ,)
if [ "$refused" != 0 ]; then
    echo "callgrind-reads: $refused answers were not 2xx; the figure would not be a balance read's" >&2
    exit 1
fi
if [ -n "${CALLGRIND_KEEP:-}" ]; then cp "$dump" "$CALLGRIND_KEEP"; fi
echo "$binary: $requests reads, $total instructions, $((total / requests)) instructions per read"
