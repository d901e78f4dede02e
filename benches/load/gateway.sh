# Sourced by the load scripts: starts `switchyard mock` and `switchyard serve` in front
# of it on free loopback ports, with the wrk request script in "$work/chat.lua".
# Needs: $bin (the binary), $work (a scratch directory). Sets: port(), mport, gport,
# gpid (the gateway's pid). Optional: SY_EXTRA_YAML (appended to the gateway's config,
# e.g. `auth:` and `limits:`), SY_BEARER (a key wrk sends as `Authorization: Bearer`).
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
mport=$(port); gport=$(port)
SWITCHYARD_LOG=warn $bin mock --listen 127.0.0.1:$mport >/dev/null &
cat > "$work/sy.yaml" <<YAML
server: { listen: 127.0.0.1:$gport }
providers:
  up: { kind: openai-compatible, base_url: http://127.0.0.1:$mport/v1 }
models:
  bench: { endpoints: [ { provider: up, model: mock-1 } ] }
${SY_EXTRA_YAML:-}
YAML
SWITCHYARD_LOG=warn $bin serve --config "$work/sy.yaml" >/dev/null &
gpid=$!
sed "s/MODEL/bench/" benches/load/chat.lua > "$work/chat.lua"
if [ -n "${SY_BEARER:-}" ]; then
  echo "wrk.headers[\"Authorization\"] = \"Bearer $SY_BEARER\"" >> "$work/chat.lua"
fi
