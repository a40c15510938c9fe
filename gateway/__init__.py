"""The HTTP gateway (see DESIGN.md and docs/gateway.md). No torch, no engine, no server code.

settings.py   the one settings object          app.py         routes, body limit, deadline
service.py    one request's steps              http_errors.py every error to OpenAI's shape
schema.py     OpenAI request/response shapes   tokenizer.py   HF tokenizers off the event loop
model_card.py the served model's facts         chunking.py    token-budget chunks (pure)
router.py     least-loaded routing, retries    replicas.py    discovery and health watching
metrics.py    Prometheus metrics               auth.py        API keys
main.py       `hedgerow gateway`               rerank.py      /v1/rerank: shape, steps, merge
"""
