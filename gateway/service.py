"""The gateway's request logic, between the HTTP routes and the router.

Owns the steps of one embeddings request after parsing: check the model name (the served name or
one of its aliases), its task (a reranker serves no embeddings) and `dimensions`, normalize
`input`, apply the input type's template and tokenize (or, when --accept-token-ids allows them,
check client token ids against the vocabulary), enforce the per-input and per-request token limits,
cut the sequences into chunks and have the router embed them. Also owns the served model's card,
which the first server's Info refines. Knows nothing about HTTP: routes convert JSON to calls and
back.
"""

import dataclasses
import time

import numpy as np

from hedgerow.gateway.chunking import plan_chunks
from hedgerow.gateway.errors import ModelNotFoundError, RequestError
from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.gateway.model_card import ModelCard, refine_with_info, truncation_problem
from hedgerow.gateway.request_context import NO_SPAN, current
from hedgerow.gateway.router import Router
from hedgerow.gateway.schema import Inputs, check_token_range, parse_inputs
from hedgerow.gateway_settings import GatewaySettings
from hedgerow.gateway.tokenizer import Sequences, TextTokenizer, too_long_message

# Why token ids are refused unless --accept-token-ids: the message a LangChain user reads.
TOKEN_IDS_REFUSED = (
    "{where} holds token ids, which this gateway does not accept (--accept-token-ids is off): "
    "ids made by OpenAI's tokenizer (tiktoken), as LangChain's OpenAIEmbeddings sends them by "
    "default, name other tokens in this model's vocabulary and would embed as other words. "
    "Send the text instead (LangChain: OpenAIEmbeddings(..., check_embedding_ctx_length=False)"
    "); to send this model's own ids (from POST /tokenize), start the gateway with "
    "--accept-token-ids.")


@dataclasses.dataclass(frozen=True)
class Embedded:
    embeddings: np.ndarray  # float32 [B, D], input order
    prompt_tokens: int
    space: str  # fingerprint of the embedding space every row lives in


class EmbeddingService:
    def __init__(self, settings: GatewaySettings, card: ModelCard, tokenizer: TextTokenizer,
                 router: Router, metrics: GatewayMetrics) -> None:
        self.settings = settings
        self.card = card
        self.tokenizer = tokenizer
        self.router = router
        self.metrics = metrics
        self._configured_templates = {
            name: value for name, value in (("query", settings.query_template),
                                            ("document", settings.document_template))
            if value is not None
        }
        self.model_names = (card.name, *(alias for alias in settings.served_model_aliases
                                         if alias != card.name))
        self._names = frozenset(self.model_names)
        self.server_info = None  # the last Info a server answered (embed_pb2.InfoResponse)

    def adopt_info(self, info) -> None:
        """A server answered Info (embed_pb2.InfoResponse): its width and limits now apply."""
        self.server_info = info
        self.card = refine_with_info(self.card, info, self._configured_templates)

    def check_model(self, name: str | None) -> None:
        if name is not None and name not in self._names:
            served = " or ".join(repr(known) for known in self.model_names)
            raise ModelNotFoundError(
                f"model {name!r} is not served here; this gateway serves {served}",
                param="model")

    def template(self, prompt_name: str | None, param: str = "prompt_name") -> str:
        """The template of a named prompt (TEI's `prompt_name`: `query` or `document`)."""
        if prompt_name is None:
            return ""
        templates = self.card.templates
        if prompt_name not in templates:
            known = ", ".join(sorted(templates)) or "none"
            raise RequestError(f"{param} is {prompt_name!r}, which is not a prompt of this "
                               f"model (its prompts: {known})", param=param,
                               code="invalid_value")
        return templates[prompt_name]

    def check_task(self, task: str, what: str) -> None:
        """RequestError naming the served model's task when it is not `task` (`what` names
        the request: "embeddings", say)."""
        if self.card.task != task:
            hint = {"rerank": "a cross-encoder: it scores query-document pairs; call "
                              "/v1/rerank, /v2/rerank or /rerank",
                    "sparse": "sparse vectors: call /v1/embeddings/sparse or /embed_sparse",
                    "embed": "an embedding model: call /v1/embeddings, /v2/embed or "
                             "/embed"}[self.card.task]
            raise RequestError(f"model {self.card.name!r} is of task {self.card.task!r} ("
                               f"{hint}) and serves no {what}", param="model",
                               code="wrong_task")

    def check_dimensions(self, dimensions: int | None) -> None:
        """`dimensions` is within the width and, below it, allowed for this model (see
        gateway/model_card.py, `truncation_problem`)."""
        if dimensions is None:
            return
        width = self.card.dimensions
        if dimensions <= 0 or (width is not None and dimensions > width):
            limit = f"between 1 and {width}" if width else "at least 1"
            raise RequestError(f"dimensions is {dimensions}; it must be {limit}",
                               param="dimensions", code="invalid_value")
        problem = truncation_problem(self.card, dimensions,
                                     self.settings.allow_truncated_dimensions)
        if problem is not None:
            raise RequestError(problem, param="dimensions", code="dimensions_not_supported")

    def chunk_budget(self) -> int:
        """Tokens one chunk may carry: --chunk-tokens, capped by the server's per-request limit."""
        if self.card.max_request_tokens:
            return min(self.settings.chunk_tokens, self.card.max_request_tokens)
        return self.settings.chunk_tokens

    async def tokenize(self, texts: list[str], template: str, max_tokens: int,
                       param: str = "input", truncate: bool | None = None) -> Sequences:
        """`texts` with `template` prepended, tokenized and timed, truncated when `truncate`
        says so (None: as --truncate says); RequestError for a text over `max_tokens` when not
        truncating, or one that tokenizes to nothing (`param` names the request field in that
        message)."""
        started = time.perf_counter()
        if truncate is None:
            truncate = self.settings.truncate
        context = current()
        with context.span("tokenize") if context is not None else NO_SPAN:
            sequences = await self.tokenizer.encode(texts, template=template,
                                                    max_tokens=max_tokens, truncate=truncate)
        elapsed = time.perf_counter() - started
        self.metrics.tokenize_seconds.observe(elapsed)
        if context is not None:
            context.tokenize_s += elapsed
        empty = next((i for i, n in enumerate(sequences.lengths) if n == 0), None)
        if empty is not None:  # e.g. only control characters, and no [CLS]/[SEP] in the tokenizer
            where = param if param == "query" else f"{param}[{empty}]"
            raise RequestError(f"{where} tokenizes to no tokens", param=param,
                               code="empty_input")
        return sequences

    async def sequences(self, raw_input, input_type: str | None, *,
                        truncate: bool | None = None, template: str | None = None,
                        param: str = "input") -> Sequences:
        """Token ids of every input, in order: templated and tokenized text, or checked ids.
        `truncate` overrides --truncate for this request, `template` the input type's;
        `param` names the input field."""
        inputs = parse_inputs(raw_input, self.settings.max_inputs, param)
        card = self.card
        if template is None:
            template = card.templates.get(input_type, "") if input_type else ""
        if inputs.texts is not None:
            sequences = await self.tokenize(inputs.texts, template, card.max_tokens, param,
                                            truncate)
        else:
            if not self.settings.accept_token_ids:
                raise RequestError(TOKEN_IDS_REFUSED.format(where=param), param=param,
                                   code="token_ids_not_accepted")
            sequences = self._token_sequences(inputs, template, card, truncate)
        limit = self.settings.max_request_tokens
        if sequences.total_tokens > limit:
            raise RequestError(
                f"the request has {sequences.total_tokens} tokens; at most {limit} are accepted "
                "per request (--max-request-tokens). Split it into several requests.",
                param="input", code="too_many_tokens")
        return sequences

    def _token_sequences(self, inputs: Inputs, template: str, card: ModelCard,
                         truncate: bool | None) -> Sequences:
        assert inputs.token_ids is not None
        if template:
            raise RequestError(
                "input_type applies a text template, which token-id input cannot take; "
                "tokenize the templated text yourself or send text", param="input_type")
        check_token_range(inputs.token_ids, card.vocab_size or self.tokenizer.vocab_size)
        token_ids = inputs.token_ids
        if truncate is None:
            truncate = self.settings.truncate
        for index, tokens in enumerate(token_ids):
            if len(tokens) > card.max_tokens and not truncate:
                raise RequestError(too_long_message(index, len(tokens), card.max_tokens),
                                   param="input", code="context_length_exceeded")
        if truncate:
            token_ids = [tokens[:card.max_tokens] for tokens in token_ids]
        return Sequences.from_lists(token_ids)

    async def embed_sparse(self, raw_input, *, deadline: float, truncate: bool | None,
                           template: str | None = None, input_type: str | None = None,
                           param: str = "inputs", model: str | None = None
                           ) -> tuple[list[tuple[np.ndarray, np.ndarray]], int, str]:
        """Sparse vectors of a request's inputs (a model of task sparse: lexical weights or
        SPLADE): per input in order (token ids, weights), the prompt tokens and the space's
        fingerprint. `template` (TEI's prompt) overrides the input type's."""
        self.check_model(model)
        self.check_task("sparse", "sparse vectors")
        sequences = await self.sequences(raw_input, input_type, truncate=truncate,
                                         template=template, param=param)
        chunks = plan_chunks(sequences.lengths, self.chunk_budget())
        vectors, space = await self.router.embed_sparse(sequences, chunks, deadline=deadline)
        self.metrics.tokens.inc(sequences.total_tokens)
        self.metrics.inputs.inc(len(sequences.lengths))
        return vectors, sequences.total_tokens, space

    async def embed(self, raw_input, *, model: str | None, dimensions: int | None,
                    input_type: str | None, deadline: float, truncate: bool | None = None,
                    normalize: bool | None = None, template: str | None = None,
                    param: str = "input") -> Embedded:
        """Embed a request's inputs; `deadline` is a time.monotonic() value. `truncate`
        overrides --truncate, `normalize` the model's own choice, `template` the input
        type's; `param` names the input field in messages."""
        self.check_model(model)
        self.check_task("embed", "embeddings")
        self.check_dimensions(dimensions)
        sequences = await self.sequences(raw_input, input_type, truncate=truncate,
                                         template=template, param=param)
        chunks = plan_chunks(sequences.lengths, self.chunk_budget())
        embeddings, space = await self.router.embed(sequences, chunks, dimensions=dimensions,
                                                    deadline=deadline, normalize=normalize)
        self.metrics.tokens.inc(sequences.total_tokens)
        self.metrics.inputs.inc(len(sequences.lengths))
        return Embedded(embeddings, sequences.total_tokens, space)
