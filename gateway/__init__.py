"""The HTTP gateway (see DESIGN.md and docs/gateway.md). No torch, no engine, no server code.

main.py       `hedgerow gateway`, workers       uvicorn_server.py uvicorn with the limits
workers.py    worker processes on one socket    http.py        FastAPI app, route guard
app.py        the routes, deadline, lifetime    openapi.py     /openapi.json's models
service.py    one request's steps               http_errors.py every error in its API's shape
schema.py     OpenAI request/response shapes    cohere.py, tei.py  those APIs' shapes
rerank.py     rerank: shape, steps, merge       tokenizer.py   HF tokenizers off the event loop
model_card.py the served model's facts          chunking.py    token-budget chunks (pure)
router.py     least-loaded routing, retries     replicas.py    discovery and health watching
admission.py  deadline-aware 429s               metrics.py     Prometheus metrics
auth.py       API keys                          access_log.py  the access log
request_context.py  request id, timing headers  traced_calls.py  chunk spans (tracing on)
The settings are hedgerow/gateway_settings.py.
"""
