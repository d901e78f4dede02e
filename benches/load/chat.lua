-- wrk script: POST a small non-streaming chat completion.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"MODEL","messages":[{"role":"user","content":"Say hello in five words."}],"max_tokens":16}'
