"""The gateway's request logic, between the HTTP routes and the router.

Owns the steps of one embeddings request after parsing: check the model name and `dimensions`,
normalize `input`, apply the input type's template and tokenize (or check client token ids
against the vocabulary), enforce the per-input and per-request token limits, cut the sequences
into chunks and have the router embed them. Also owns the served model's card, which the first
server's Info refines. Knows nothing about HTTP: routes convert JSON to calls and back.
"""

import dataclasses
import time

import numpy as np

from hedgerow.gateway.chunking import plan_chunks
from hedgerow.gateway.errors import ModelNotFoundError, RequestError
from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.gateway.model_card import ModelCard, refine_with_info
from hedgerow.gateway.router import Router
from hedgerow.gateway.schema import Inputs, check_token_range, parse_inputs
from hedgerow.gateway.settings import GatewaySettings
from hedgerow.gateway.tokenizer import Sequences, TextTokenizer, too_long_message


@dataclasses.dataclass(frozen=True)
class Embedded:
    embeddings: np.ndarray  # float32 [B, D], input order
    prompt_tokens: int


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

    def adopt_info(self, info) -> None:
        """A server answered Info (embed_pb2.InfoResponse): its width and limits now apply."""
        self.card = refine_with_info(self.card, info, self._configured_templates)

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.card.name:
            raise ModelNotFoundError(
                f"model {name!r} is not served here; this gateway serves {self.card.name!r}",
                param="model")

    def check_dimensions(self, dimensions: int | None) -> None:
        if dimensions is None:
            return
        width = self.card.dimensions
        if dimensions <= 0 or (width is not None and dimensions > width):
            limit = f"between 1 and {width}" if width else "at least 1"
            raise RequestError(f"dimensions is {dimensions}; it must be {limit}",
                               param="dimensions", code="invalid_value")

    def chunk_budget(self) -> int:
        """Tokens one chunk may carry: --chunk-tokens, capped by the server's per-request limit."""
        if self.card.max_request_tokens:
            return min(self.settings.chunk_tokens, self.card.max_request_tokens)
        return self.settings.chunk_tokens

    async def tokenize(self, texts: list[str], template: str, max_tokens: int,
                       param: str = "input") -> Sequences:
        """`texts` with `template` prepended, tokenized under --truncate and timed; RequestError
        for a text over `max_tokens` when not truncating, or one that tokenizes to nothing
        (`param` names the request field in that message)."""
        started = time.perf_counter()
        sequences = await self.tokenizer.encode(texts, template=template, max_tokens=max_tokens,
                                                truncate=self.settings.truncate)
        self.metrics.tokenize_seconds.observe(time.perf_counter() - started)
        empty = next((i for i, n in enumerate(sequences.lengths) if n == 0), None)
        if empty is not None:  # e.g. only control characters, and no [CLS]/[SEP] in the tokenizer
            where = param if param == "query" else f"{param}[{empty}]"
            raise RequestError(f"{where} tokenizes to no tokens", param=param,
                               code="empty_input")
        return sequences

    async def sequences(self, raw_input, input_type: str | None) -> Sequences:
        """Token ids of every input, in order: templated and tokenized text, or checked ids."""
        inputs = parse_inputs(raw_input, self.settings.max_inputs)
        card = self.card
        if inputs.texts is not None:
            template = card.templates.get(input_type, "") if input_type else ""
            sequences = await self.tokenize(inputs.texts, template, card.max_tokens)
        else:
            sequences = self._token_sequences(inputs, input_type, card)
        limit = self.settings.max_request_tokens
        if sequences.total_tokens > limit:
            raise RequestError(
                f"the request has {sequences.total_tokens} tokens; at most {limit} are accepted "
                "per request (--max-request-tokens). Split it into several requests.",
                param="input", code="too_many_tokens")
        return sequences

    def _token_sequences(self, inputs: Inputs, input_type: str | None,
                         card: ModelCard) -> Sequences:
        assert inputs.token_ids is not None
        if input_type is not None and card.templates.get(input_type):
            raise RequestError(
                "input_type applies a text template, which token-id input cannot take; "
                "tokenize the templated text yourself or send text", param="input_type")
        check_token_range(inputs.token_ids, card.vocab_size or self.tokenizer.vocab_size)
        token_ids = inputs.token_ids
        for index, tokens in enumerate(token_ids):
            if len(tokens) > card.max_tokens and not self.settings.truncate:
                raise RequestError(too_long_message(index, len(tokens), card.max_tokens),
                                   param="input", code="context_length_exceeded")
        if self.settings.truncate:
            token_ids = [tokens[:card.max_tokens] for tokens in token_ids]
        return Sequences.from_lists(token_ids)

    async def embed(self, raw_input, *, model: str, dimensions: int | None,
                    input_type: str | None, deadline: float) -> Embedded:
        """Embed a request's inputs; `deadline` is on the event loop's clock."""
        self.check_model(model)
        self.check_dimensions(dimensions)
        sequences = await self.sequences(raw_input, input_type)
        chunks = plan_chunks(sequences.lengths, self.chunk_budget())
        embeddings = await self.router.embed(sequences, chunks, dimensions=dimensions,
                                             deadline=deadline)
        self.metrics.tokens.inc(sequences.total_tokens)
        self.metrics.inputs.inc(len(sequences.lengths))
        return Embedded(embeddings, sequences.total_tokens)
