"""Send a request's chunks to the least-loaded ready replicas and gather the results in order.

Owns the routing decision and the per-chunk call (Embed; or Score for rerank, carrying the query
and the chunk's documents, answered with the chunk's top-k): each chunk goes, concurrently with
the others, to the ready replica with the fewest in-flight tokens (ties go to the one picked
longest ago) among those with room under their admission bound, waiting for room when none has
it; a chunk whose replica fails with UNAVAILABLE (or whose connection broke) or CANCELLED (the
server stopped before it answered: this gateway's own cancellations raise asyncio.CancelledError
instead), or with a replica-side error (INTERNAL, UNKNOWN, DATA_LOSS: its engine failed, say),
is retried once on another replica within the request's deadline; a request's own error
(INVALID_ARGUMENT) is never retried; a RESOURCE_EXHAUSTED answer pauses that replica briefly
and the chunk waits for room again (up to four times, then 429); every call carries the
request's remaining time as its gRPC deadline. gRPC failures become the gateway's errors here
and nowhere else.

Outlier ejection, as Envoy's consecutive-5xx: a replica gone (UNAVAILABLE, CANCELLED) leaves
traffic at once; one answering replica-side errors leaves after `eject_after`
(--eject-after-failures) of them in a row (a successful answer resets the count), never when it
is the last ready one; either comes back once its health says SERVING and its Info answers
(gateway/replicas.py). A replica that fails fast holds few tokens, so for FAILED_RECENTLY_S
after a failure least-loaded choice takes it only when no other replica has room.

No answer mixes two embedding spaces. Every server names the space of its vectors (its Info's
and each answer's `space`, a fingerprint); during a rollout two may serve at once. A request of
one chunk goes to any replica and carries the space that answered it. A request of several is
bound to one space when it starts (the least-loaded ready replica's): its chunks go only to
replicas of that space, an answer in another space (a server that restarted since its Info)
is retried on a replica of the right one, and when none is left the request fails with
SpaceConflictError (409) rather than finish in another space. Knows nothing about HTTP or
tokenization; gets sequences already cut into chunks.
"""

import array
import asyncio
import collections
import itertools
import logging
import time
from typing import Awaitable, Iterable, Protocol, Sequence, TypeVar

import grpc
import numpy as np

from hedgerow.gateway import admission
from hedgerow.gateway.chunking import Chunk, pack, pack_with_query, reassemble
from hedgerow.gateway.errors import (
    DeadlineError,
    NoReplicaError,
    RequestError,
    SpaceConflictError,
    UpstreamError,
    UpstreamOverloadedError,
)
from hedgerow.gateway.metrics import GatewayMetrics
from hedgerow.gateway.request_context import current
from hedgerow.gateway.replicas import Replica
from hedgerow.gateway.tokenizer import Pairs, Sequences
from hedgerow.logs import fields
from hedgerow.wire import embed_pb2

log = logging.getLogger("hedgerow.gateway.router")

# Retries (UNAVAILABLE, INTERNAL: once elsewhere; RESOURCE_EXHAUSTED: after a pause) are safe:
# Embed, EmbedSparse, Score and Rerank are pure functions of their input, so a chunk may be
# sent twice.
NO_REPLICA_MESSAGE = "no embedding server is ready; retry shortly"
ROOM_RECHECK_S = 0.5
# Codes that say the server did not take the chunk: it is down, going, or stopped before it
# answered. The chunk is safe to send elsewhere (an embedding is the same wherever computed).
GONE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
# Codes that say the server took the chunk and failed it for its own reasons (a failed engine, a
# bug): safe to send elsewhere too; counted towards the server's ejection.
REPLICA_FAILED = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.DATA_LOSS)
# How long after a failed call a replica comes after every other one with room.
FAILED_RECENTLY_S = 2.0
# After each RESOURCE_EXHAUSTED answer, the replica is left alone this long; one more such
# answer for a chunk than there are pauses becomes a 429.
BUSY_PAUSES_S = (0.05, 0.1, 0.2, 0.4)
T = TypeVar("T")


def space_of(replica: Replica) -> str:
    """The fingerprint of the space the replica's Info reports ("" for a server without one)."""
    return replica.info.space if replica.info is not None else ""


def in_space(replicas: Sequence[Replica], space: str | None) -> list[Replica]:
    """The replicas of `space`; all of them when `space` is None (any space will do)."""
    return list(replicas) if space is None else [r for r in replicas if space_of(r) == space]


def least_loaded(replicas: Sequence[Replica], exclude: Sequence[Replica] = (),
                 tokens: int = 0) -> Replica | None:
    """The ready replica with the fewest in-flight tokens, not in `exclude`, with room for
    `tokens` more; one that failed a call in the last FAILED_RECENTLY_S comes after the rest
    (failing fast, it holds few tokens); ties go to the one chosen longest ago, so equal
    replicas take turns. None when there is none."""
    candidates = [r for r in replicas if r.ready and all(r is not e for e in exclude)
                  and has_room(r, tokens)]
    if not candidates:
        return None
    recent = time.monotonic() - FAILED_RECENTLY_S
    return min(candidates, key=lambda r: (r.failures > 0 and r.failed_at > recent,
                                          r.in_flight_tokens, r.last_chosen))


def has_room(replica: Replica, tokens: int) -> bool:
    """Whether `tokens` more from this gateway stay within the replica's admission bound (its
    Info's max_inflight_tokens; 0 is no bound), and the replica is not in a pause after
    answering RESOURCE_EXHAUSTED. An idle replica otherwise always has room, so a chunk is
    never held back forever."""
    if replica.busy_until > time.monotonic():
        return False
    bound = replica.info.max_inflight_tokens if replica.info is not None else 0
    return not bound or not replica.in_flight_tokens or replica.in_flight_tokens + tokens <= bound


def decode_embeddings(response: embed_pb2.EmbedResponse, rows: int) -> np.ndarray:
    """float32 [rows, D] from an EmbedResponse; UpstreamError when it is malformed."""
    if response.dtype != embed_pb2.FLOAT32 or len(response.shape) != 2:
        raise UpstreamError(
            f"server answered dtype {response.dtype} with shape {list(response.shape)}; "
            "expected float32 [B, D]")
    count, width = response.shape
    if count != rows or len(response.embeddings) != count * width * 4:
        raise UpstreamError(
            f"server answered {count} rows of {width} in {len(response.embeddings)} bytes "
            f"for a chunk of {rows} sequences")
    return np.frombuffer(response.embeddings, dtype="<f4").reshape(count, width)


def decode_sparse(response: embed_pb2.SparseEmbedResponse, rows: int
                  ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sequence (token ids uint32 [k], weights float32 [k]) from a SparseEmbedResponse;
    UpstreamError when it is malformed."""
    counts = list(response.counts)
    total = sum(counts)
    if len(counts) != rows or len(response.indices) != 4 * total or len(
            response.values) != 4 * total:
        raise UpstreamError(f"server answered {len(counts)} sparse vectors of {total} entries "
                            f"in {len(response.indices)} + {len(response.values)} bytes for a "
                            f"chunk of {rows} sequences")
    indices = np.frombuffer(response.indices, dtype="<u4")
    values = np.frombuffer(response.values, dtype="<f4")
    bounds = list(itertools.accumulate(counts, initial=0))
    return [(indices[a:b], values[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]


def decode_scores(response: embed_pb2.ScoreResponse, wanted: int, documents: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(local indices int64 [wanted], scores float32 [wanted]) from a ScoreResponse of a chunk
    of `documents` documents; UpstreamError when it is malformed (so a wrong answer is never
    merged into someone's ranking)."""
    indices = np.asarray(response.indices, dtype=np.int64)
    scores = np.asarray(response.scores, dtype=np.float32)
    if indices.shape[0] != wanted or scores.shape[0] != wanted:
        raise UpstreamError(
            f"server answered {indices.shape[0]} indices and {scores.shape[0]} scores for a "
            f"chunk that asked for the best {wanted} of {documents} documents")
    if wanted and (int(indices.max()) >= documents or len(set(indices.tolist())) != wanted):
        raise UpstreamError(
            f"server answered document indices {indices.tolist()[:8]} for a chunk of "
            f"{documents} documents (out of range or repeated)")
    return indices, scores


class ReplicaSource(Protocol):
    """What the router needs from discovery: the replicas that are ready now."""

    def ready(self) -> list[Replica]: ...


class Router:
    def __init__(self, replicas: ReplicaSource, metrics: GatewayMetrics,
                 max_queue_seconds: float = 0.0, eject_after: int = 3) -> None:
        """`eject_after`: replica-side failures in a row that eject a replica (0: never)."""
        self._replicas = replicas
        self._metrics = metrics
        self._eject_after = eject_after
        self._max_queue_s = max_queue_seconds
        self._picks = itertools.count(1)
        self._changed = asyncio.Event()  # set (and replaced) when tokens go or the queue moves
        self._waiting: collections.deque = collections.deque()  # tickets of chunks waiting
        self._waiting_tokens = 0  # what those chunks carry

    def admit(self, tokens: int, deadline: float) -> None:
        """Refuse at once (UpstreamOverloadedError, 429 with Retry-After) a request the
        servers could not finish before its deadline or start within --max-queue-seconds, by
        this gateway's estimate (gateway/admission.py); admitted requests are never refused
        later."""
        self._metrics.offered_tokens.inc(tokens)
        ready = self._replicas.ready()
        queued = sum(r.in_flight_tokens for r in ready) + self._waiting_tokens
        retry = admission.refusal(
            tokens, queued, [r.throughput.rate for r in ready],
            [r.info.max_inflight_tokens if r.info is not None else 0 for r in ready],
            deadline - time.monotonic(), self._max_queue_s)
        if retry is not None:
            self._metrics.refused.inc()
            raise UpstreamOverloadedError(
                f"the embedding servers are too busy to finish this request's {tokens} tokens "
                f"in time ({queued} tokens are ahead of it); retry in about {retry:.0f} s",
                retry_after=retry)

    def choose(self, exclude: Sequence[Replica] = (), tokens: int = 0,
               among: Sequence[Replica] | None = None) -> Replica | None:
        """The least-loaded replica with room (see `least_loaded`), from `among` when given,
        else from every ready one; marked as chosen now."""
        replica = least_loaded(self._replicas.ready() if among is None else among, exclude,
                               tokens)
        if replica is not None:
            replica.last_chosen = next(self._picks)
        return replica

    def _request_space(self, chunks: int) -> str | None:
        """The space a request of `chunks` chunks is bound to: None (any) for one chunk, which
        cannot mix spaces; else the least-loaded ready replica's."""
        if chunks < 2:
            return None
        ready = self._replicas.ready()
        first = least_loaded(ready) or (ready[0] if ready else None)
        return None if first is None else space_of(first)

    async def _reserve(self, tokens: int, exclude: Sequence[Replica], deadline: float,
                       space: str | None = None) -> Replica:
        """The least-loaded ready replica of `space` (None: any) not in `exclude` with room
        for `tokens`, those tokens counted on it. When every one is full with this
        gateway's work, wait for room (a large request is paced to the servers' admission
        bounds instead of being turned away as busy) until the deadline, first come, first
        served: a replica an earlier waiter could use is left to it, so a large chunk is never
        overtaken forever by small ones (a retry that excludes a replica does not hold that
        replica back from the others). NoReplicaError when none is ready; SpaceConflictError
        when only replicas of other spaces are."""
        entry, queued = (object(), tuple(exclude), space), False
        try:
            while True:
                ready = self._replicas.ready()
                fits = in_space(ready, space)
                if not any(all(r is not x for x in exclude) for r in fits):
                    if any(all(r is not x for x in exclude) for r in ready):
                        raise self._conflict(space, ready)
                    raise NoReplicaError(NO_REPLICA_MESSAGE)
                replica = self.choose(exclude, tokens, among=self._left_for(entry, fits))
                if replica is not None:
                    self._count(replica, tokens)
                    return replica
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DeadlineError("the request's deadline passed while its chunks waited "
                                        "for room on the embedding servers")
                if not queued:
                    self._waiting.append(entry)
                    self._waiting_tokens += tokens
                    queued = True
                # Woken when a call ends or the queue moves; the timeout also re-checks
                # replicas that became ready or whose busy pause ended.
                try:
                    await asyncio.wait_for(self._changed.wait(),
                                           min(remaining, self._recheck_in(ready)))
                except asyncio.TimeoutError:
                    pass
        finally:
            if queued:
                self._waiting.remove(entry)
                self._waiting_tokens -= tokens
                self._wake()

    def _left_for(self, entry, ready: list[Replica]) -> list[Replica]:
        """The ready replicas no waiter ahead of `entry` (all of them, for a newcomer) could
        use: those every earlier waiter excludes or, bound to another space, cannot take."""
        ahead = []
        for waiting in self._waiting:
            if waiting is entry:
                break
            ahead.append(waiting)

        def usable(replica: Replica, waiting) -> bool:
            _, excluded, wanted = waiting
            return (all(replica is not x for x in excluded)
                    and (wanted is None or space_of(replica) == wanted))

        return [r for r in ready if not any(usable(r, waiting) for waiting in ahead)]

    @staticmethod
    def _conflict(space: str | None, ready: Sequence[Replica]) -> SpaceConflictError:
        others = sorted({space_of(r) for r in ready} - {space})
        return SpaceConflictError(
            f"the embedding servers of this request's space ({space or 'unnamed'}) left while "
            f"its chunks were out, and finishing it on servers of another space "
            f"({', '.join(o or 'unnamed' for o in others)}) would mix two embedding spaces in "
            "one answer; retry the request (a rollout is under way)")

    @staticmethod
    def _recheck_in(ready: list[Replica]) -> float:
        now = time.monotonic()
        pauses = [r.busy_until - now for r in ready if r.busy_until > now]
        return max(min([ROOM_RECHECK_S, *pauses]), 0.001)

    def _count(self, replica: Replica, tokens: int, done: int = 0) -> None:
        """Count `tokens` more (or fewer) in flight on `replica`; `done`: the tokens of a call
        that just ended well (its throughput's measure)."""
        replica.in_flight_tokens += tokens
        replica.throughput.change(time.monotonic(), replica.in_flight_tokens > 0, done)
        if not replica.removed:  # a departed replica's series are gone for good
            self._metrics.in_flight(replica.address).set(replica.in_flight_tokens)

    def _release(self, replica: Replica, tokens: int, ok: bool) -> None:
        """Uncount a call's tokens and wake every waiter (synchronous: safe in a cancelled
        task's cleanup)."""
        self._count(replica, -tokens, tokens if ok else 0)
        self._wake()

    def _count_chunk(self, replica: Replica, outcome: str) -> None:
        if not replica.removed:
            self._metrics.chunk_outcome(replica.address, outcome).inc()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def embed(
        self,
        sequences: Sequences,
        chunks: Sequence[Chunk],
        *,
        dimensions: int | None,
        deadline: float,
        normalize: bool | None = None,
    ) -> tuple[np.ndarray, str]:
        """Embed every sequence: (float32 [B, D] in input order, the fingerprint of the one
        space every row was embedded in).

        `deadline` is a `time.monotonic()` value; `normalize` None leaves it to
        the model (the server's default). Raises NoReplicaError, DeadlineError, RequestError
        (the server rejected the input), UpstreamOverloadedError, SpaceConflictError or
        UpstreamError.
        """
        self.admit(sequences.total_tokens, deadline)
        starts = sequences.starts()
        space = self._request_space(len(chunks))
        results = await self._all(self._chunk(sequences, starts, chunk, dimensions, deadline,
                                              normalize, space) for chunk in chunks)
        try:
            return reassemble(chunks, [rows for rows, _ in results]), results[0][1]
        except ValueError as error:
            raise UpstreamError(str(error)) from None

    async def _chunk(
        self,
        sequences: Sequences,
        starts: list[int],
        chunk: Chunk,
        dimensions: int | None,
        deadline: float,
        normalize: bool | None,
        space: str | None,
    ) -> tuple[np.ndarray, str]:
        input_ids, cu_seqlens = pack(sequences.input_ids, starts, chunk)
        request = embed_pb2.EmbedRequest(
            input_ids=input_ids, cu_seqlens=cu_seqlens, dimensions=dimensions or 0,
            dtype=embed_pb2.FLOAT32)
        if normalize is not None:
            request.normalize = normalize
        response = await self._send("Embed", request, chunk, chunk.tokens, deadline, space)
        return decode_embeddings(response, chunk.size), response.space

    async def embed_sparse(self, sequences: Sequences, chunks: Sequence[Chunk], *,
                           deadline: float) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
        """Lexical weights of every sequence (a model of task sparse): per sequence in input
        order (token ids uint32 [k], weights float32 [k]), and the one space's fingerprint.
        Raises as `embed` does."""
        self.admit(sequences.total_tokens, deadline)
        starts = sequences.starts()
        space = self._request_space(len(chunks))
        results = await self._all(self._sparse_chunk(sequences, starts, chunk, deadline, space)
                                  for chunk in chunks)
        return [vector for vectors, _ in results for vector in vectors], results[0][1]

    async def _sparse_chunk(self, sequences: Sequences, starts: list[int], chunk: Chunk,
                            deadline: float, space: str | None
                            ) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
        input_ids, cu_seqlens = pack(sequences.input_ids, starts, chunk)
        request = embed_pb2.EmbedRequest(input_ids=input_ids, cu_seqlens=cu_seqlens)
        response = await self._send("EmbedSparse", request, chunk, chunk.tokens, deadline,
                                    space)
        return decode_sparse(response, chunk.size), response.space

    async def score(
        self,
        query: array.array,
        documents: Sequences,
        chunks: Sequence[Chunk],
        *,
        top_n: int,
        deadline: float,
    ) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
        """Score every chunk of documents against the query, each chunk on one replica.

        `query` is int32 [q]; each chunk travels as one Score call carrying the query and its
        documents, asking for min(top_n, chunk size). Returns, per chunk in order, (indices
        int64 [k_c] as GLOBAL document indices, scores float32 [k_c]) best first, and the
        fingerprint of the one space every chunk was scored in. Raises as `embed` does.
        """
        self.admit(documents.total_tokens + len(query) * len(chunks), deadline)
        starts = documents.starts()
        space = self._request_space(len(chunks))
        results = await self._all(self._score_chunk(query, documents, starts, chunk, top_n,
                                                    deadline, space) for chunk in chunks)
        return [(indices, scores) for indices, scores, _ in results], results[0][2]

    async def rerank(self, pairs: Pairs, chunks: Sequence[Chunk], *, top_n: int,
                     deadline: float) -> tuple[list[tuple[np.ndarray, np.ndarray]], str]:
        """Score every chunk of a cross-encoder's query-document pairs, each chunk one Rerank
        call on one replica asking for min(top_n, chunk size). Returns as `score` does (GLOBAL
        pair indices, the pairs' scores), and raises as `embed` does."""
        self.admit(pairs.total_tokens, deadline)
        starts = pairs.starts()
        space = self._request_space(len(chunks))
        results = await self._all(self._rerank_chunk(pairs, starts, chunk, top_n, deadline,
                                                     space) for chunk in chunks)
        return [(indices, scores) for indices, scores, _ in results], results[0][2]

    async def _rerank_chunk(self, pairs: Pairs, starts: list[int], chunk: Chunk, top_n: int,
                            deadline: float, space: str | None
                            ) -> tuple[np.ndarray, np.ndarray, str]:
        input_ids, cu_seqlens = pack(pairs.input_ids, starts, chunk)
        type_ids, _ = pack(pairs.type_ids, starts, chunk)
        wanted = min(top_n, chunk.size)
        request = embed_pb2.RerankRequest(input_ids=input_ids, cu_seqlens=cu_seqlens,
                                          token_type_ids=type_ids, top_n=wanted)
        response = await self._send("Rerank", request, chunk, chunk.tokens, deadline, space)
        local, scores = decode_scores(response, wanted, chunk.size)
        return local + chunk.start, scores, response.space

    async def _all(self, calls: Iterable[Awaitable[T]]) -> list[T]:
        """Run the per-chunk calls concurrently; the first failure cancels the others.

        NoReplicaError before any call is made when no replica is ready (`calls` is consumed
        only after that check).
        """
        if not self._replicas.ready():
            raise NoReplicaError(NO_REPLICA_MESSAGE)
        calls = list(calls)
        if len(calls) == 1:  # most requests: no task and no gather to pay for
            return [await calls[0]]
        tasks = [asyncio.ensure_future(call) for call in calls]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    async def _score_chunk(
        self,
        query: array.array,
        documents: Sequences,
        starts: list[int],
        chunk: Chunk,
        top_n: int,
        deadline: float,
        space: str | None,
    ) -> tuple[np.ndarray, np.ndarray, str]:
        input_ids, cu_seqlens = pack_with_query(query, documents.input_ids, starts, chunk)
        wanted = min(top_n, chunk.size)
        request = embed_pb2.ScoreRequest(input_ids=input_ids, cu_seqlens=cu_seqlens,
                                         top_n=wanted)
        tokens = chunk.tokens + len(query)
        response = await self._send("Score", request, chunk, tokens, deadline, space)
        local, scores = decode_scores(response, wanted, chunk.size)
        return local + chunk.start, scores, response.space

    async def _send(self, method: str, request, chunk: Chunk, tokens: int, deadline: float,
                    space: str | None = None):
        """Call `method` with `request` on the least-loaded replica of `space` (None: any)
        with room, retrying as the module docstring says."""
        context = current()  # the request's id travels as metadata; its timing comes back
        # grpc.aio takes a Metadata as it is; a tuple it checks against typing.Sequence and
        # converts: about 5 µs more CPU per call here.
        metadata = grpc.aio.Metadata(*context.metadata()) if context is not None else None
        unavailable: list[Replica] = []  # left out of this chunk's further tries
        busy_answers = 0
        while True:
            replica = await self._reserve(tokens, unavailable, deadline, space)
            remaining = deadline - time.monotonic()
            ok = False
            try:
                if remaining <= 0:
                    raise DeadlineError("the request's deadline passed before all its chunks "
                                        "were answered")
                response = await getattr(replica.embedder, method)(request, timeout=remaining,
                                                                   metadata=metadata)
                ok = True
            except grpc.aio.AioRpcError as error:
                code = error.code()
                self._count_chunk(replica, code.name)
                retry = False
                if code in GONE or code in REPLICA_FAILED:
                    if code in GONE:
                        replica.suspect(error.details() or code.name)
                    else:
                        self._failed(replica, f"{code.name} {error.details() or ''}".strip())
                    unavailable.append(replica)
                    ready = self._replicas.ready()
                    retry = len(unavailable) == 1 and least_loaded(
                        in_space(ready, space), unavailable) is not None
                    if not retry and len(unavailable) == 1 and least_loaded(
                            ready, unavailable) is not None:
                        raise self._conflict(space, ready) from None
                elif (code == grpc.StatusCode.RESOURCE_EXHAUSTED
                      and busy_answers < len(BUSY_PAUSES_S)):
                    # The server holds more than this gateway counts: other gateways' work,
                    # or calls just cancelled that it is still finishing. Leave it a moment
                    # (longer each time) and wait for room again, instead of answering 429.
                    replica.busy_until = time.monotonic() + BUSY_PAUSES_S[busy_answers]
                    busy_answers += 1
                    retry = True
                if retry:
                    self._metrics.retries.labels(code.name).inc()
                    log.info("%s", fields(event="chunk.retry", method=method,
                                          replica=replica.address, code=code.name,
                                          sequences=chunk.size, tokens=tokens))
                    continue
                raise self._translate(error, replica) from None
            finally:
                self._release(replica, tokens, ok)
            if space is not None and response.space != space:
                # The server restarted in another space since its Info: ask for Info again,
                # and find this chunk a replica of the request's space (_reserve raises
                # SpaceConflictError when there is none).
                self._count_chunk(replica, "SPACE_CHANGED")
                replica.suspect(f"answered in space {response.space or 'unnamed'}, its Info "
                                f"said {space or 'unnamed'}")
                unavailable.append(replica)
                continue
            self._count_chunk(replica, "OK")
            replica.failures = 0
            if context is not None:
                context.server_timing(response.timing)
            return response

    def _failed(self, replica: Replica, reason: str) -> None:
        """Count a replica-side failure; eject the replica after `eject_after` in a row,
        unless no other replica is ready."""
        replica.failures += 1
        replica.failed_at = time.monotonic()
        if not self._eject_after or replica.failures < self._eject_after:
            return
        if any(r is not replica for r in self._replicas.ready()):
            log.warning("%s", fields(event="replica.ejected", replica=replica.address,
                                     failures=replica.failures, reason=reason[:200]))
            replica.failures = 0
            replica.suspect(f"ejected after {self._eject_after} failures in a row: {reason}")

    @staticmethod
    def _translate(error: grpc.aio.AioRpcError, replica: Replica) -> Exception:
        code, detail = error.code(), error.details() or ""
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return RequestError(f"the server rejected the input: {detail}", param="input")
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return DeadlineError("the request took longer than its deadline")
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return UpstreamOverloadedError(f"every embedding server is busy ({detail}); retry")
        if code in GONE:
            return NoReplicaError(f"embedding server {replica.address} is unavailable and no "
                                  "other server could take the work; retry shortly")
        return UpstreamError(f"embedding server {replica.address} failed: {code.name} {detail}")
