"""asyncio glue: one ``asyncio.Protocol`` per client on uvloop, hiredis for parsing.

Request path: ``data_received`` feeds hiredis' C ``Reader``; every complete frame goes
to the dispatcher, whose replies are collected in a list and written once per batch
(``writelines``, so a large payload is never copied into a joined buffer).

Before any reply is written the server's ``before_reply`` hooks run (the WAL writes its
buffered records, and fsyncs under ``appendfsync always``). When a hook has work
(``reply_pending``), a connection's batch is not written at once but handed to one
``call_soon`` flush at the end of the loop iteration, so every client served in that
iteration shares one WAL write and one fsync (Redis's ``beforeSleep``). A hook raising
``CommandError`` (MISCONF) turns the replies of that batch's write commands — the slices
the dispatcher recorded in ``client.write_marks`` — into that error: no write whose record
did not reach the WAL is acknowledged.

Flow control, per client:
  * An async handler in flight, or a transport above its high-water mark (the client
    is not reading), stops request processing and pauses reading; unparsed requests
    wait inside the hiredis buffer. That is the backpressure a slow reader gets.
  * Unsent replies above ``client_output_buffer_limit`` (one huge reply to a client
    that is not reading) disconnect that client with a log line (Redis's
    ``client-output-buffer-limit``).
  * A request still being received beyond ``client_query_buffer_limit``, an argument
    longer than ``proto_max_bulk_len`` or a malformed frame gets
    ``-ERR Protocol error: ...`` (Redis's texts) and that connection closes; others are
    untouched.

Forwarded pipelines (``-w N``, worker k > 0): a command the dispatcher forwards to worker 0
(``Dispatcher.forwards``) starts a *forward batch*: the requests that follow it in the parser's
buffer are taken while they are forwarded too (up to ``--worker-forward-batch``), each run into
its own reply slot, and all are awaited together — they reach the shared link to worker 0 in one
loop iteration, so one write carries the client's whole run and worker 0 answers it as one
pipelined batch. Replies are appended in request order; an error reply in the middle does not
stop the rest (Redis pipelining). The first request that is not forwarded ends the batch and is
*held*: it runs, first, once the batch has answered — so a local command (SELECT, V.FETCH, QUIT)
still sees every forwarded command before it done.

Framing (``resp/framing.py``): a read that starts on a request boundary, begins with
``*``, ends with a newline and holds no large array header goes straight to hiredis (the
fast path). Every
other read — one that continues a request split by TCP, an inline command, a header
that needs checking, any read of a client that has not authenticated yet — goes through
``RequestFramer`` first, which applies Redis's limits at the header and hands hiredis
only whole, checked frames. After a fast-path read the connection knows whether it ended
on a boundary (``mid_request``: hiredis's ``has_data()`` after each complete request);
when it did not, the framer re-reads that one read to carry the state on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import time
from bisect import bisect_left
from collections.abc import Callable, Coroutine
from typing import Any, Final, cast

import hiredis

from pion.common.errors import CommandError
from pion.server.context import ClientState, CommandContext, ServerState
from pion.server.dispatcher import Dispatcher
from pion.server.resp.encoder import encode_error
from pion.server.resp.framing import (
    HOLD_ARRAYS_OVER,
    LARGE_ARRAY_HEADER,
    MAX_MULTIBULK_LEN,
    RequestFramer,
    encode_words,
)
from pion.server.resp.hiredis_limits import cap_array_elements, capping_supported
from pion.server.store.batch_clock import CLOCK as _CLOCK
from pion.server.tls import tls_only

log = logging.getLogger("pion.server.net")

WRITE_HIGH_WATER = 4 * 1024 * 1024  # stop processing a client's requests above this
WRITE_LOW_WATER = 1024 * 1024
FLUSH_EVERY: Final = 64  # reply chunks buffered before an intermediate write
JOIN_MAX_BYTES: Final = 16 * 1024  # a batch of replies up to this size is joined into one write
_perf_counter: Final = time.perf_counter
RECV_SLACK: Final = 1024 * 1024  # bytes of a frame fed before its start was noticed (one read chunk)
UNAUTH_OUTPUT_LIMIT = 64 * 1024  # unsent replies a client that has not authenticated may hold
# hiredis capped at HOLD_ARRAYS_OVER elements (it raises; the framer takes over) — or, on a
# build where that cannot be verified, each fast-path read is scanned for large headers.
_PRESCAN: Final = None if capping_supported() else LARGE_ARRAY_HEADER.search


def _not_connected(data: Any) -> None:
    """``Connection.write`` until ``connection_made`` binds the transport's (never called:
    replies are only written once a transport is there)."""


def new_reader() -> hiredis.Reader:
    """A hiredis reader that refuses array headers above ``HOLD_ARRAYS_OVER`` (if it can)."""
    reader = hiredis.Reader()
    cap_array_elements(reader, HOLD_ARRAYS_OVER)
    return reader


class Connection(asyncio.Protocol):
    """One client connection: parse, dispatch in order, write, apply flow control."""

    # The hiredis reader's methods and the transport's ``write``, bound once (``_use_reader``,
    # ``connection_made``): compiled code sees both as plain Python objects, so a call through
    # the object looks the method up on its type and builds a bound method every time
    # (2-4 per request without pipelining; issue 13).
    feed_reader: Callable[[bytes], None]
    gets: Callable[[], Any]
    has_data: Callable[[], bool]

    def __init__(self, server: PionServer) -> None:
        self.server = server
        self.dispatcher = server.dispatcher
        self.reader = new_reader()
        self._use_reader(self.reader)
        self.transport: asyncio.Transport | None = None
        self.write: Callable[[Any], None] = _not_connected
        self.out: list[Any] = []
        self.busy = False  # an async command is in flight
        self.write_paused = False
        self.reading_paused = False
        self.closing = False
        self.closed = False
        self.fed_since_frame = 0
        self.framer = RequestFramer(server.state.config.proto_max_bulk_len)
        self.mid_request = False  # hiredis may hold part of a request (see module docstring)
        self.frame_error: str | None = None  # reported once the requests before it have run
        self.fast_read: bytes | None = None  # the fast-path read hiredis is parsing now
        self.auth_required = server.state.dispatcher.auth_required  # --requirepass or --tenant
        self.last_active = _perf_counter()
        self.client = ClientState(client_id=next(server.client_ids), created_at=time.time())
        self.ctx = CommandContext(server=server.state, client=self.client)
        self.max_bulk = server.state.config.proto_max_bulk_len
        self.query_limit = server.state.config.client_query_buffer_limit
        self.output_limit = server.state.config.client_output_buffer_limit
        self.before_reply = server.before_reply  # the server's list: hooks added later count
        self.reply_pending = server.reply_pending
        self.deferred = False  # waiting in the server's end-of-iteration flush
        # -w N, worker k > 0: the most requests one forward batch takes (module docstring);
        # 0 where nothing is forwarded (worker 0, -w 1), which skips the check entirely.
        self.forward_batch = (server.state.config.worker_forward_batch
                              if server.state.worker is not None and server.state.worker.worker_id
                              and not server.state.worker.independent else 0)
        self.held: Any = None  # a request taken past a forward batch, run first after it

    def _use_reader(self, reader: hiredis.Reader) -> None:
        """Parse with ``reader`` from now on (its hot methods bound once, see above)."""
        self.reader = reader
        self.feed_reader = reader.feed
        self.gets = reader.gets
        self.has_data = reader.has_data

    # ---- asyncio.Protocol callbacks -------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport = transport
        self.write = transport.write
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.client.addr = f"{peer[0]}:{peer[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.server.closing:
            transport.abort()
            return
        if len(self.server.clients) >= self.server.state.config.maxclients:
            log.warning("refusing client %s: maxclients (%d) reached", self.client.addr,
                        self.server.state.config.maxclients)
            self.closing = True
            transport.write(b"-ERR max number of clients reached\r\n")
            transport.close()
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)
        self.server.clients[self.client.client_id] = self

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.clients.pop(self.client.client_id, None)
        self.out.clear()
        self.client.write_marks.clear()
        self.server.connection_closed()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._check_output_limit()
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if not self.closed and not self.closing:
            self._process()
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing or self.frame_error is not None:
            return
        framer = self.framer
        # (framer.state 0 = at a request boundary; the property costs a call per read)
        if (not framer.state and data[0] == 42 and data[-1] == 10 and not self.busy
                and not self.write_paused and (_PRESCAN is None or _PRESCAN(data) is None)
                and (not self.auth_required or self.client.authenticated)):
            # The fast path: hiredis holds nothing, this read starts a request and does not
            # end inside a header line (the framer never has to re-send part of a line).
            self.feed_reader(data)
            self.fed_since_frame += len(data)
            self.mid_request = True
            self.fast_read = data
            self._process()
            if self._take_fast_read(data):
                if self.mid_request and not self.closing:
                    error = framer.resync(data)  # where in a request this read ended
                    if error is not None:
                        self._frame_failed(error)
            return
        self._feed_framed(data)

    def _take_fast_read(self, data: bytes) -> bool:
        """Clear ``fast_read`` if it still holds ``data``; False when an inline line in it
        already took it to the framer (``_continue_after_inline`` set it to None).

        A method, not an inline test: after ``self.fast_read = data`` mypy narrows the
        attribute to ``bytes`` across the ``_process()`` call that may reset it, and the
        compiled build enforces that narrowed type (TypeError on None; issue 13)."""
        if self.fast_read is not data:
            return False
        self.fast_read = None
        return True

    def _feed_framed(self, data: bytes) -> None:
        """The careful path: frame, check and re-encode before hiredis sees the bytes."""
        while True:
            unauthenticated = self.auth_required and not self.client.authenticated
            framed = self.framer.feed(data, authenticated=not unauthenticated,
                                      one_request=unauthenticated)
            frames_fed = False
            # Requests the framer parsed itself that run back to back (a pipeline of inline
            # PINGs) share clock reads: each one's end is the next one's start.
            clock = 0.0
            for piece in framed.pieces:
                if type(piece) is list:
                    if frames_fed:
                        self._process()  # the frames before this request first
                        frames_fed = False
                        clock = 0.0
                    clock = self._run_words(piece, clock)
                    continue
                frames_fed = True
                clock = 0.0
                # hiredis takes any buffer (its stub says bytes): no copy of large payloads.
                self.feed_reader(piece)  # type: ignore[arg-type]
                self.fed_since_frame += len(piece)  # type: ignore[arg-type,unused-ignore]
                self.mid_request = True
            if framed.error is not None:
                self._frame_failed(framed.error)
                return
            self._process()
            if self.closing or not framed.rest:
                return
            data = framed.rest

    def _run_words(self, words: list[bytes], started: float) -> float:
        """Run a request the framer parsed itself (inline, or a held large array) now, or
        queue it behind the requests still waiting.

        ``started``: the clock read when the previous such request of this read ended (0.0:
        none, read it here). Returns the clock read when this one ended, or 0.0 when it did
        not run to its reply here (queued, or an async command in flight).
        """
        # (mid_request is False only when hiredis holds nothing: a field read, not a call)
        if (self.busy or self.write_paused or self.closing
                or (self.mid_request and self.has_data()) or self.held is not None):
            if len(words) > HOLD_ARRAYS_OVER:
                # Queued behind a command in flight: let hiredis take this many (its bytes
                # are here, so the declared length is real) — up to Redis's own limit after.
                cap_array_elements(self.reader, MAX_MULTIBULK_LEN)
            self.feed_reader(encode_words(words))
            self.mid_request = True
            return 0.0
        if not started:
            started = _perf_counter()
        dispatcher = self.dispatcher
        pending = dispatcher.execute(self.ctx, words, self.out)
        if pending is not None:
            self._start_async(pending)
            return 0.0
        now = _perf_counter()
        elapsed = now - started
        entry = dispatcher.last_entry
        entry.seconds += elapsed
        if entry.hist is not None:
            entry.hist[bisect_left(dispatcher.latency_bounds, elapsed)] += 1
        if elapsed > dispatcher.slow_s:
            dispatcher.log_slow(self.ctx, words, elapsed)
        if self.client.close_after_reply:
            self._close_after_flush()
            return 0.0
        return now

    def _continue_after_inline(self) -> bool:
        """A fast-path read went on, after whole multibulk frames, with a request hiredis
        refuses (inline, or a large or negative array header): hand the rest of the read to
        the framer with a new reader."""
        data, self.fast_read = self.fast_read, None
        assert data is not None
        offset = RequestFramer.first_inline_offset(data)
        if offset is None:
            return False
        self._use_reader(new_reader())
        self._feed_framed(data[offset:])
        return True

    def _frame_failed(self, error: str) -> None:
        """Answer the requests before the bad frame, then the protocol error, then close."""
        self.frame_error = error
        self._process()

    # ---- request processing ------------------------------------------------------------
    def _process(self) -> None:
        """Run every complete request in the parser's buffer, in order, until blocked.

        The requests run as one batch of the TTL clock (``store/batch_clock.py``): the first
        TTL check reads the clock, the others reuse that millisecond (Redis's cached mstime).
        """
        if self.busy or self.write_paused or self.closing:
            return
        _CLOCK.begin()
        try:
            self._run_batch()
        finally:
            _CLOCK.end()

    def _run_batch(self) -> None:
        gets = self.gets  # (locals: native reads of the bound methods, once per batch)
        has_data = self.has_data
        out = self.out
        dispatcher = self.dispatcher  # (its methods: native calls when compiled, not bound ones)
        ctx = self.ctx
        client = self.client
        slow_s = self.dispatcher.slow_s
        bulk_check_at = self.max_bulk - RECV_SLACK
        started = self.last_active = _perf_counter()
        fed = self.fed_since_frame
        held = self.held
        # busy/write_paused/closing only change in the branches that return below or
        # during a write (pause_writing, output limit), so they are re-checked after one.
        while True:
            try:
                if held is not None:  # taken past a forward batch: it runs before the rest
                    request, held = held, None
                    self.held = None
                else:
                    request = gets()
            except hiredis.ProtocolError as exc:
                if self.fast_read is not None and self._continue_after_inline():
                    return
                self._protocol_error(_redis_text(str(exc)))
                return
            if request is False:
                break  # the reader holds part of a request (mid_request stays True)
            if type(request) is not list or not request:
                if request is None or request == []:  # *-1 and *0 are ignored, like Redis
                    if not has_data():
                        self.mid_request = False
                        break
                    continue
                # A request that does not start with '*' is an inline command for Redis.
                if self.fast_read is not None and self._continue_after_inline():
                    return
                self._protocol_error(f"expected '*', got '{_type_byte(request)}'")
                return
            for arg in request:
                if type(arg) is not bytes:
                    self._protocol_error(f"expected '$', got '{_type_byte(arg)}'")
                    return
            if fed > bulk_check_at and max(map(len, request)) > self.max_bulk:
                self._protocol_error("invalid bulk length")
                return
            if fed:  # only a batch's first frame follows a feed: one attribute write per batch
                fed = self.fed_since_frame = 0
            pending = dispatcher.execute(ctx, request, out)
            if pending is not None:
                if self.forward_batch > 1 and dispatcher.forwards(request):
                    pending = self._forward_batch(pending)
                self._start_async(pending)
                return
            now = _perf_counter()  # one clock read per command: also the next one's start
            elapsed = now - started
            entry = dispatcher.last_entry
            entry.seconds += elapsed  # INFO commandstats
            if entry.hist is not None:  # a KV command's latency histogram (--metrics-port)
                entry.hist[bisect_left(dispatcher.latency_bounds, elapsed)] += 1
            if elapsed > slow_s:
                dispatcher.log_slow(ctx, request, elapsed)
            started = now
            if client.close_after_reply:
                self._close_after_flush()
                return
            if len(out) >= FLUSH_EVERY:
                self._flush()
                if self.write_paused or self.closing:
                    self.mid_request = has_data()
                    break
            if not has_data():  # ended exactly after this request: a boundary
                self.mid_request = False
                break
        if (self.frame_error is not None and not self.busy and not self.closing
                and not self.write_paused):
            self._protocol_error(self.frame_error)
            return
        self._end_batch()
        if self.fed_since_frame > self.query_limit and has_data():
            log.warning("closing client id=%d addr=%s: request larger than "
                        "client-query-buffer-limit (%d bytes)", client.client_id,
                        client.addr, self.query_limit)
            self._protocol_error("request exceeds client-query-buffer-limit")

    def _end_batch(self) -> None:
        """Send this batch's replies, or, when a before-reply hook has work (buffered WAL
        records), leave them for the server's end-of-iteration flush so that every client
        served in this loop iteration shares one WAL write (and one fsync under always).

        When every ``reply_pending`` hook said no, the ``before_reply`` hooks have nothing to
        do (``PionServer``'s contract) and are not called: a read-only batch pays one hook
        call, not two."""
        if self.deferred:
            return
        if self.out and self.reply_pending:
            for pending in self.reply_pending:
                if pending():
                    self.deferred = True
                    self.server.defer_flush(self)
                    return
            self._flush(False)
            return
        self._flush()

    def _flush(self, hooks: bool = True) -> None:
        """Write the replies in ``out`` (after the ``before_reply`` hooks, unless ``hooks`` is
        False because none has work: ``_end_batch``)."""
        out = self.out
        if not out or self.transport is None:
            return
        marks = self.client.write_marks
        if hooks and self.before_reply:
            try:
                for hook in self.before_reply:
                    hook()
            except CommandError as exc:
                # The WAL batch could not be written: no write of this batch is acknowledged.
                error = encode_error(exc.code, exc.message)
                for start, end in marks:
                    if start < len(out):
                        out[start] = error
                        for i in range(start + 1, min(end, len(out))):
                            out[i] = b""
            except Exception:
                # Replies must not go out when what they acknowledge was not logged.
                log.exception("before-reply hook failed; dropping client id=%d without replies",
                              self.client.client_id)
                out.clear()
                marks.clear()
                self.closing = True
                self.transport.abort()
                return
        if marks:
            marks.clear()
        if len(out) == 1:
            self.write(out[0])
        elif len(out) <= FLUSH_EVERY and sum(map(len, out)) <= JOIN_MAX_BYTES:
            # A pipelined batch of small replies: one joined buffer is cheaper for the
            # transport than one iovec (and buffer export) per reply.
            self.write(b"".join(out))
        else:
            self.transport.writelines(out)
        out.clear()
        if self.write_paused or (self.auth_required and not self.client.authenticated):
            self._check_output_limit()

    def _check_output_limit(self) -> None:
        if self.transport is None or self.closed or self.closing:
            return
        limit = self.output_limit
        if self.auth_required and not self.client.authenticated:
            limit = min(limit, UNAUTH_OUTPUT_LIMIT) if limit else UNAUTH_OUTPUT_LIMIT
        if not limit:
            return
        buffered = self.transport.get_write_buffer_size()
        if buffered > limit:
            log.warning("closing client id=%d addr=%s: %d bytes of unsent replies exceed "
                        "client-output-buffer-limit (%d)", self.client.client_id,
                        self.client.addr, buffered, limit)
            self.closing = True
            self.transport.abort()

    def _forward_batch(self, first: Coroutine[Any, Any, None]) -> Coroutine[Any, Any, None]:
        """Take the forwarded requests that follow ``first`` in the parser's buffer (module
        docstring); returns one coroutine that runs them all and appends their replies in order.
        A request that is not forwarded (or not a well-formed one) is held for ``_process``."""
        reader = self.reader
        dispatcher = self.dispatcher
        runs: list[tuple[Coroutine[Any, Any, None] | None, list[Any]]] = []
        while len(runs) + 1 < self.forward_batch and reader.has_data():
            try:
                request = reader.gets()
            except hiredis.ProtocolError:
                break  # the parser raises it again for _process, after the batch
            if request is False:
                break
            if (type(request) is not list or not request
                    or any(type(arg) is not bytes for arg in request)
                    or max(map(len, request)) > self.max_bulk or not dispatcher.forwards(request)):
                self.held = request
                break
            slot: list[Any] = []
            runs.append((dispatcher.execute(self.ctx, request, slot), slot))
        if not runs:
            return first
        return self._run_forward_batch(first, runs)

    async def _run_forward_batch(self, first: Coroutine[Any, Any, None],
                                 runs: list[tuple[Coroutine[Any, Any, None] | None, list[Any]]]) -> None:
        marks = self.client.write_marks
        n_marks = len(marks)
        # Each command is started here, in order, in this one step: it runs until it waits for
        # its reply, so all reach the shared link in order and leave in one write. Then each is
        # resumed in turn when what it waits for is done (a Task per command would cost more
        # than forwarding saves). ``first`` appends to ``out`` itself, the others to their slots.
        coros = [first, *(run for run, _ in runs if run is not None)]
        waits = [_step(coro) for coro in coros]
        for coro, wait in zip(coros, waits, strict=True):
            while wait is not _DONE:
                if wait is None:  # a bare yield (asyncio.sleep(0)): give the loop one turn
                    await asyncio.sleep(0)
                else:  # a future: wait for it here, as a Task would (clearing its "yielded" mark)
                    wait._asyncio_future_blocking = False
                    await wait
                wait = _step(coro)
        for _, slot in runs:
            self.out.extend(slot)
        # Worker 0 logged these writes; this worker's WAL does not hold them (and the marks of
        # the slots would point at the wrong replies), so none is turned into -MISCONF here.
        del marks[n_marks:]

    def _start_async(self, pending: Coroutine[Any, Any, None]) -> None:
        self._flush()
        self.busy = True
        self._update_reading()
        task = asyncio.get_running_loop().create_task(self._finish_async(pending))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def _finish_async(self, pending: Coroutine[Any, Any, None]) -> None:
        try:
            await pending
        finally:
            self.busy = False
        if self.closed:
            return
        if self.client.close_after_reply or self.closing:
            self._close_after_flush()
            return
        self._process()
        self._update_reading()

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        want_pause = self.busy or self.write_paused
        if want_pause and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        elif not want_pause and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    # ---- errors ------------------------------------------------------------------------
    def _protocol_error(self, detail: str) -> None:
        log.info("protocol error from client id=%d addr=%s: %s", self.client.client_id,
                 self.client.addr, detail)
        self.out.append(encode_error("ERR", f"Protocol error: {detail}"))
        self._close_after_flush()

    def _close_after_flush(self) -> None:
        self.closing = True
        self._flush()
        if self.transport is not None:
            self.transport.close()

    # ---- used by admin commands and shutdown ------------------------------------------
    def idle_seconds(self) -> float:
        return _perf_counter() - self.last_active

    def begin_shutdown(self) -> None:
        """Stop taking requests; close once the in-flight command (if any) has answered."""
        if self.closing or self.closed:
            return
        if self.busy:
            self.closing = True  # _finish_async closes after writing the reply
            return
        self._close_after_flush()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()


_DONE: Any = object()  # _step's "the coroutine returned"


def _step(coro: Coroutine[Any, Any, None]) -> Any:
    """Run ``coro`` until it next waits; what it waits for (an awaitable future, or None for a
    bare yield), or ``_DONE`` once it has returned (``_run_forward_batch``)."""
    try:
        return coro.send(None)
    except StopIteration:
        return _DONE


def _type_byte(value: object) -> str:
    """The RESP type byte a parsed non-bulk element arrived with (for Redis's error text)."""
    if isinstance(value, list):
        return "*"
    if isinstance(value, int):
        return ":"
    if value is None:
        return "$"
    return "+"


def _redis_text(hiredis_message: str) -> str:
    """hiredis's protocol-error text in Redis's words (what Redis says for the same bytes)."""
    if "reply type byte" in hiredis_message:
        quoted = hiredis_message.split('"')
        got = quoted[1] if len(quoted) > 2 else "?"
        return f"expected '$', got '{got}'"
    if "multi-bulk" in hiredis_message.lower() or "multibulk" in hiredis_message.lower():
        return "invalid multibulk length"
    if "bulk" in hiredis_message.lower():
        return "invalid bulk length"
    return hiredis_message.replace("Protocol error, ", "")


class PionServer:
    """The listening socket and the set of live connections of one worker."""

    def __init__(self, state: ServerState, dispatcher: Dispatcher) -> None:
        self.state = state
        self.dispatcher = dispatcher
        self.clients: dict[int, Connection] = {}
        self.client_ids = itertools.count(1)
        self.tasks: set[asyncio.Task[None]] = set()
        # Called before every batch of replies is written (a WAL's group commit: records
        # buffered while the batch ran become durable here, still before any reply leaves).
        self.before_reply: list[Callable[[], None]] = []
        # True when a before_reply hook has work to do: connections then hand their replies
        # to one flush at the end of the loop iteration (``defer_flush``) instead of writing.
        # A hook may raise CommandError: the batch's write replies become that error.
        # Contract: when every one of these says False, every before_reply hook would do
        # nothing, so a connection skips them (``Connection._end_batch``).
        self.reply_pending: list[Callable[[], bool]] = []
        self._deferred: list[Connection] = []
        self.closing = False
        self._server: asyncio.Server | None = None
        self._extra: list[asyncio.Server] = []
        self._tls_server: asyncio.Server | None = None  # --tls-port (tls.py): same protocol over TLS
        self._all_closed = asyncio.Event()

    async def start(self, reuse_port: bool = False) -> None:
        """Listen on ``--bind``/``--port``; ``reuse_port`` joins the SO_REUSEPORT group of
        ``-w N`` (the kernel spreads connections over the workers)."""
        cfg = self.state.config
        loop = asyncio.get_running_loop()
        if not tls_only(cfg):  # --port 0 with --tls-port: no plain listener (Redis's meaning)
            self._server = await loop.create_server(lambda: Connection(self), host=cfg.bind,
                                                    port=cfg.port, backlog=511, reuse_address=True,
                                                    reuse_port=reuse_port or None)
        if self.state.tls is not None:
            try:
                self._tls_server = await loop.create_server(
                    lambda: Connection(self), host=cfg.bind, port=cfg.tls_port, backlog=511,
                    reuse_address=True, reuse_port=reuse_port or None, ssl=self.state.tls)
            except OSError:
                if self._server is not None:
                    self._server.close()
                raise

    async def listen_also(self, host: str, port: int) -> None:
        """A second listener (a worker's own address under -w N), closed by ``stop``."""
        loop = asyncio.get_running_loop()
        self._extra.append(await loop.create_server(lambda: Connection(self), host=host, port=port,
                                                    backlog=511, reuse_address=True, reuse_port=True))

    def defer_flush(self, conn: Connection) -> None:
        """Flush ``conn``'s replies in the next loop turn, together with every other
        connection deferred in this one (the first flush runs the hooks for all)."""
        if not self._deferred:
            asyncio.get_running_loop().call_soon(self._flush_deferred)
        self._deferred.append(conn)

    def _flush_deferred(self) -> None:
        conns, self._deferred = self._deferred, []
        for conn in conns:
            conn.deferred = False
            if not conn.closed:
                conn._flush()

    @property
    def port(self) -> int:
        """The plain listener's port, 0 without one (TLS only: ``--port 0`` + ``--tls-port``)."""
        if self._server is None:
            return 0
        return _bound_port(self._server)

    @property
    def tls_port(self) -> int:
        """The TLS listener's port, 0 without one."""
        if self._tls_server is None:
            return 0
        return _bound_port(self._tls_server)

    def connection_closed(self) -> None:
        if self.closing and not self.clients:
            self._all_closed.set()

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        """Stop accepting, let in-flight commands answer, then close every connection."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for extra in self._extra:
            extra.close()
        if self._tls_server is not None:
            self._tls_server.close()
        for conn in list(self.clients.values()):
            conn.begin_shutdown()
        if self.clients:
            try:
                await asyncio.wait_for(self._all_closed.wait(), drain_timeout_s)
            except TimeoutError:
                log.warning("%d client(s) still draining after %.0fs; dropping them",
                            len(self.clients), drain_timeout_s)
                for conn in list(self.clients.values()):
                    conn.abort()
        if self._server is not None:
            await self._server.wait_closed()
        for extra in self._extra:
            await extra.wait_closed()
        if self._tls_server is not None:
            await self._tls_server.wait_closed()


def _bound_port(listener: Any) -> int:
    """The port an asyncio server bound. ``Any``: typeshed declares ``Server.sockets`` a tuple,
    uvloop returns a list, and the compiled build checks the declared type on read (it raised
    TypeError for the plain and then the TLS listener; issue 13)."""
    return int(listener.sockets[0].getsockname()[1])
