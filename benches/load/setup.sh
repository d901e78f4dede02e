# Sourced by the side-by-side load scripts (run.sh, conns.sh, callgrind.sh): writes the
# configs of the static upstream (upstream.sh), nginx `proxy_pass` in front of it and
# Switchyard in front of it with every feature on, and the wrk request scripts
# "$work/json.lua" and "$work/stream.lua" in a scratch directory $work, removed (and
# every process the script started stopped) on exit. Sets: bin (SWITCHYARD_BIN, else
# target/release/switchyard, built if missing), work, port(), uport, nport, gport,
# key, and the functions start_upstream,
# start_nginx, start_gateway (sets gpid), start_mocks (the translated providers' models,
# below), url TARGET MODE, pid_of TARGET, check_gateway.
# Environment: ADMISSION=0 leaves out Switchyard's API key and limits, SY_EXTRA_YAML
# is appended to its config, SY_SED edits it (a sed script, applied when this file is
# sourced: before start_mocks adds to the config), SY_SERVER
# adds keys to its `server:` map (e.g. SY_SERVER="runtime: shared"), NGINX_CONNS sets
# nginx's worker_connections (4096).
#
# Switchyard's features: the policy set benches/load/bench.policy (three rules every
# request evaluates, then weighted round-robin, a stateful strategy), metrics (always
# on), the access log (one JSON line per request, to the file "$work/logs/access.log"
# through its background writer; stderr gets warnings only, in "$work/gateway.log"),
# API-key authentication with one key, and global and per-key request and token
# limits high enough never to refuse (every request is checked and charged).
bin=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$bin" ] || cargo build --release
work=$(mktemp -d)
cleanup() {
  kill $(jobs -p) 2>/dev/null || true
  # A process may be both a job and in a pid file (the mocks): its second kill fails,
  # which must not end the trap before the upstream's nginx is stopped.
  for p in "$work"/*.pid; do [ -f "$p" ] && { kill "$(cat "$p")" 2>/dev/null || true; }; done
  rm -rf "$work"
}
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
uport=$(port); nport=$(port); gport=$(port)
. benches/load/upstream.sh
start_upstream() { $1 nginx -c "$work/upstream.conf"; }

# NGINX_WORKERS: nginx `proxy_pass`'s worker processes (1; with more, each has its
# own listening socket, `reuseport`, as Switchyard's serving threads have).
nginx_workers=${NGINX_WORKERS:-1}
nginx_reuseport=""; [ "$nginx_workers" -gt 1 ] && nginx_reuseport=" reuseport"
cat > "$work/nginx.conf" <<NGINX
worker_processes $nginx_workers;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections ${NGINX_CONNS:-4096}; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream up { server 127.0.0.1:$uport; keepalive 128; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$nport$nginx_reuseport;
    location / {
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGINX
start_nginx() { $1 nginx -c "$work/nginx.conf"; }
# Starts Switchyard in the background (warnings to "$work/gateway.log"), prefixed by
# $1 (e.g. a taskset), and sets gpid.
start_gateway() { SWITCHYARD_LOG=warn $1 "$bin" serve --config "$work/sy.yaml" >/dev/null 2>"$work/gateway.log" & gpid=$!; }

key=sy-bench-key
hash=$(printf %s "$key" | sha256sum | cut -d' ' -f1)
admission="auth: { mode: keys, keys: [ { id: key-bench, hash: \"sha256:$hash\", org: bench } ] }
limits: { global: { requests_per_min: 100000000, tokens_per_min: 100000000000 }, per_key: { requests_per_min: 100000000, tokens_per_min: 100000000000 } }"
[ "${ADMISSION:-1}" = 0 ] && admission=""
# The policy directory's parent is watched too (a deleted and recreated directory is
# noticed), so nothing else is written there: the logs stay in "$work".
mkdir -p "$work/etc/policies"
cp benches/load/bench.policy "$work/etc/policies/"
cat > "$work/sy.yaml" <<YAML
server: { listen: 127.0.0.1:$gport${SY_SERVER:+, $SY_SERVER} }
policies: { dir: $work/etc/policies }
$admission
providers:
  up: { kind: openai-compatible, base_url: http://127.0.0.1:$uport/v1 }
  sse: { kind: openai-compatible, base_url: http://127.0.0.1:$uport/sse/v1 }
models:
  bench: { endpoints: [ { provider: up, model: mock-1 } ] }
  bench-stream: { endpoints: [ { provider: sse, model: mock-1 } ] }
telemetry: { access_log: { path: $work/logs/access.log, rotation: never } }
${SY_EXTRA_YAML:-}
YAML
# SY_SED: a sed script applied to Switchyard's config (SY_SED='/^auth:/d' leaves out
# authentication; the features-off configuration of the README is
# '/^telemetry:/d;/^auth:/d;/^limits:/d;/^policies:/d').
if [ -n "${SY_SED:-}" ]; then sed -i -e "$SY_SED" "$work/sy.yaml"; fi

for _m in json stream; do
  _model=bench; [ $_m = stream ] && _model=bench-stream
  sed "s/MODEL/$_model/" benches/load/chat.lua > "$work/$_m.lua"
  [ $_m = stream ] && sed -i 's/"max_tokens":16}/"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}/' "$work/$_m.lua"
  echo "wrk.headers[\"Authorization\"] = \"Bearer $key\"" >> "$work/$_m.lua"
done
path() { [ "$1" = stream ] && echo /sse/v1/chat/completions || echo /v1/chat/completions; }
url() { # target mode
  case $1 in
    direct) echo "http://127.0.0.1:$uport$(path "$2")" ;;
    nginx) echo "http://127.0.0.1:$nport$(path "$2")" ;;
    switchyard) echo "http://127.0.0.1:$gport/v1/chat/completions" ;;
  esac
}
pid_of() { # the process serving TARGET (nginx: its workers, space separated)
  case $1 in
    direct) pgrep -P "$(cat "$work/upstream.pid")" ;;
    nginx) pgrep -P "$(cat "$work/nginx.pid")" | tr '\n' ' ' | sed 's/ $//' ;;
    switchyard) echo "$gpid" ;;
  esac
}
# Waits for Switchyard's /health (up to $1 tenths of a second), then sends one request
# per mode through it and checks the answers, so a broken setup fails loudly.
check_gateway() {
  for _ in $(seq "${1:-50}"); do curl -sf "http://127.0.0.1:$gport/health" >/dev/null && break; sleep 0.1; done
  curl -sf "http://127.0.0.1:$gport/health" >/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
  local out
  out=$(curl -sf -H "Authorization: Bearer $key" -H 'content-type: application/json' -d "$(body json)" "$(url switchyard json)")
  echo "$out" | grep -q '"model":"bench"' || { echo "bad JSON answer: $out" >&2; exit 1; }
  out=$(curl -sfN -H "Authorization: Bearer $key" -H 'content-type: application/json' -d "$(body stream)" "$(url switchyard stream)")
  [ "$(echo "$out" | grep -c '^data: ')" = 24 ] && echo "$out" | grep -q '^data: \[DONE\]' \
    && ! echo "$out" | grep -q mock-1 || { echo "bad stream: $out" >&2; exit 1; }
}
body() { sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$work/$1.lua"; }
# CPU ticks (user + system) and resident KiB of the processes $1 (space separated),
# summed.
ticks() { local p t=0; for p in $1; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo $t; }
rss() { local p k=0; for p in $1; do k=$((k + $(awk '/VmRSS/ {print $2}' "/proc/$p/status"))); done; echo $k; }
# start_mocks PREFIX: `switchyard mock` in the Anthropic, Gemini and Bedrock formats,
# each on its own port and started with PREFIX (e.g. `env NAME=VALUE`); Switchyard's
# config gains a provider for each and the models `claude`, `gemini` and `nova` they
# serve. Writes the wrk scripts "$work/MODEL-json.lua" and "$work/MODEL-stream.lua"
# (a short answer; a stream asking for usage) for each, and "$work/mix.lua", which
# sends in turn answers and streams with and without a tool call from all three.
# Call before start_gateway.
start_mocks() {
  local fmt addr model kind extra
  # Each mock binds a port of its own choosing (`--listen 127.0.0.1:0`) and prints it
  # once bound: no port picked here can be taken by another in between.
  for fmt in anthropic gemini bedrock; do
    ${1:-} "$bin" mock --format "$fmt" --listen 127.0.0.1:0 >"$work/mock-$fmt.log" 2>&1 &
    echo $! > "$work/mock-$fmt.pid"
  done
  for fmt in anthropic gemini bedrock; do
    for _ in $(seq 50); do grep -q "listening on" "$work/mock-$fmt.log" && break; sleep 0.1; done
    addr=$(sed -n 's/.*switchyard mock listening on \([0-9.:]*\).*/\1/p' "$work/mock-$fmt.log" | head -1)
    [ -n "$addr" ] || { cat "$work/mock-$fmt.log" >&2; exit 1; }
    eval "_${fmt}_addr=$addr"
  done
  # Bedrock requests are signed (SigV4) with made-up credentials; the mock checks
  # the header's form, not the signature. Not in "$work/etc", whose policies
  # directory the gateway watches.
  printf '[bench]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n' \
    > "$work/aws-credentials"
  sed -i "/^providers:/a\\
  anth: { kind: anthropic, base_url: http://$_anthropic_addr/v1 }\\
  gem: { kind: gemini, base_url: http://$_gemini_addr/v1beta }\\
  bed: { kind: bedrock, base_url: http://$_bedrock_addr, region: us-east-1, credentials_file: $work/aws-credentials, profile: bench }" "$work/sy.yaml"
  sed -i "/^models:/a\\
  claude: { endpoints: [ { provider: anth, model: mock-1 } ] }\\
  gemini: { endpoints: [ { provider: gem, model: mock-1 } ] }\\
  nova: { endpoints: [ { provider: bed, model: mock-1 } ] }" "$work/sy.yaml"
  grep -q '^  nova:' "$work/sy.yaml" || { echo "start_mocks: no models: map in the config (SY_SED?)" >&2; exit 1; }
  local head tools
  head="wrk.method = \"POST\"
wrk.headers[\"Content-Type\"] = \"application/json\"
wrk.headers[\"Authorization\"] = \"Bearer $key\""
  tools='"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]'
  body_of() { # model, extra members
    echo "{\"model\":\"$1\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"What is the weather in Paris today?\"}],\"max_tokens\":64$2}"
  }
  {
    echo "$head"
    echo 'local bodies = {'
    for model in claude gemini nova; do
      for extra in '' ',"stream":true' ',"stream":true,"stream_options":{"include_usage":true}' ",$tools" ",\"stream\":true,$tools"; do
        echo "  '$(body_of "$model" "$extra")',"
      done
      for kind in json stream; do
        extra=''; [ $kind = stream ] && extra=',"stream":true,"stream_options":{"include_usage":true}'
        printf "%s\nwrk.body = '%s'\n" "$head" "$(body_of "$model" "$extra")" > "$work/$model-$kind.lua"
      done
    done
    echo '}'
    echo 'local i = 0'
    echo 'request = function() i = i % #bodies + 1; return wrk.format(nil, nil, nil, bodies[i]) end'
  } > "$work/mix.lua"
}
