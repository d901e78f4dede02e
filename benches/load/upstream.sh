# Sourced by run.sh: writes the static upstream's nginx config to "$work/upstream.conf"
# and its files under "$work/static" (needs $work, $uport). One nginx worker answers
# every POST with a static file, its body discarded: /v1/chat/completions with one
# chat completion, /sse/v1/chat/completions with a stream of 24 SSE events (a role
# chunk, 20 content chunks, the finish chunk, the usage chunk, `[DONE]`). Static files
# from the open-file cache are the cheapest answer nginx has (`return` cannot hold the
# 4 KB stream), so the upstream takes as little of the shared cores as possible.
# nginx refuses POST to a static file with 405; `error_page 405 =200 $uri` serves it.
chunk() { printf 'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"mock-1","choices":[%s]}\n\n' "$1"; }
chmod a+rx "$work" # nginx workers run unprivileged
mkdir -p "$work/static/v1/chat" "$work/static/sse/v1/chat"
{
  chunk '{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}'
  for i in $(seq 20); do chunk "{\"index\":0,\"delta\":{\"content\":\"word$i \"},\"finish_reason\":null}"; done
  chunk '{"index":0,"delta":{},"finish_reason":"stop"}'
  printf 'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"mock-1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":20,"total_tokens":32}}\n\n'
  printf 'data: [DONE]\n\n'
} > "$work/static/sse/v1/chat/completions"

printf %s '{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"mock-1","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how are you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19}}' > "$work/static/v1/chat/completions"
cat > "$work/upstream.conf" <<NGINX
worker_processes 1;
pid $work/upstream.pid;
error_log $work/upstream-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$uport;
    root $work/static;
    open_file_cache max=16;
    error_page 405 =200 \$uri;
    location = /v1/chat/completions { types { } default_type application/json; }
    location = /sse/v1/chat/completions { types { } default_type text/event-stream; }
  }
}
NGINX
