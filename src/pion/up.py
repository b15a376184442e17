"""``pion up``: run the whole stack as child processes and stop it cleanly.

Starts, in order, pion-server, pion-llm (SmolLM2 on the prefix cache) and pion-serve in front of
it, waiting for each to be healthy before the next (a progress line while the model loads). Each
child runs in its own process group with stdout/stderr piped back and printed with a per-service
prefix. Ctrl-C / SIGTERM / SIGHUP, a closed stdout (``pion up | tee log`` when tee is gone) or
any child dying stops the children in reverse order: SIGTERM to the group, then SIGKILL to
whatever is left of it after a grace period. If ``pion up`` itself is killed (SIGKILL, a crash)
and runs no cleanup, the kernel sends each child SIGTERM (``PR_SET_PDEATHSIG``, see
``pion.common.lifeline``). So no child outlives ``pion up``, however it ends.

pion-serve is optional: when ``pion.proxy.main`` cannot be imported or does not become healthy,
the other two keep running and ``pion up`` says so.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from pion.common.lifeline import die_with_parent
from pion.common.ports import PION_LLM_PORT, PION_SERVE_PORT, PION_SERVER_PORT

GRACE_S = 10.0
MODEL_WAIT_S = 600.0
SERVICE_WAIT_S = 60.0


@dataclass
class Service:
    """One child process of the stack."""

    name: str
    argv: list[str]
    health: Callable[[], bool]
    proc: subprocess.Popen[bytes] | None = None
    pump: threading.Thread | None = None
    recent: list[str] = field(default_factory=list)

    def start(self, out: Console, env: dict[str, str]) -> None:
        # A new session = a new process group: the terminal's Ctrl-C reaches only `pion up`, which
        # then stops each group in order, grandchildren included. The lifeline covers `pion up` dying
        # without running that cleanup (called from the main thread: see pion.common.lifeline).
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM))
        self.pump = threading.Thread(target=self._forward, args=(out,), daemon=True)
        self.pump.start()

    def _forward(self, out: Console) -> None:
        assert self.proc is not None and self.proc.stdout is not None  # set by start()
        width = 12
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            # tqdm redraws with carriage returns; keep only the latest state of the line.
            line = line.rsplit("\r", 1)[-1]
            self.recent = (self.recent + [line])[-20:]
            # Keeps reading after our stdout closed, so a child never blocks on a full pipe.
            out.line(f"{self.name:<{width}}| {line}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """SIGTERM the process group, wait, then SIGKILL what is left of the group."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)  # grandchildren that outlived their parent, or a hung child
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GRACE_S)
        if self.pump is not None:
            self.pump.join(timeout=2.0)


def _http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False
    return check


def _redis_ok(port: int, password: str | None) -> Callable[[], bool]:
    def check() -> bool:
        import redis

        try:
            with redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=2.0) as conn:
                return bool(conn.ping())
        except redis.RedisError:
            return False
    return check


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pion up", description="Run pion-server, pion-llm and pion-serve together.")
    p.add_argument("--dir", default=os.environ.get("PION_UP_DIR", "./pion-data"), help="pion-server data directory")
    p.add_argument("--pion-port", type=int, default=PION_SERVER_PORT)
    p.add_argument("--llm-port", type=int, default=PION_LLM_PORT)
    p.add_argument("--port", type=int, default=PION_SERVE_PORT, help="pion-serve (the OpenAI proxy) port")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--pion-password", default=os.environ.get("PION_PASSWORD"))
    p.add_argument("--no-serve", action="store_true", help="do not start pion-serve")
    p.add_argument("--llm-arg", action="append", default=[], metavar="ARG",
                   help="extra argument passed to pion-llm (repeatable), e.g. --llm-arg=--threads=1")
    return p


class Console:
    """``pion up``'s output. A reader that went away (EPIPE) stops the stack instead of killing
    the supervisor mid-cleanup: every write is guarded, and ``reader_gone`` notices a closed
    pipe even while nothing is being written (poll reports POLLERR on a pipe with no reader)."""

    def __init__(self, stream: IO[str], on_closed: Callable[[], None]) -> None:
        self.stream = stream
        self.on_closed = on_closed
        self.closed = False
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            if self.closed:
                return
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # BrokenPipeError, or a stream closed under us
                self._mark_closed()

    def reader_gone(self) -> bool:
        if not self.closed:
            try:
                fd = self.stream.fileno()
            except (OSError, ValueError):
                return False  # not a file (a StringIO in tests): nothing to poll
            poller = select.poll()
            poller.register(fd, 0)  # POLLERR/POLLHUP are always reported
            if any(ev & (select.POLLERR | select.POLLHUP | select.POLLNVAL) for _, ev in poller.poll(0)):
                with self._lock:
                    self._mark_closed()
        return self.closed

    def _mark_closed(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError, ValueError):
            # Point the dead fd at /dev/null so the interpreter's last flush does not raise at exit.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        self.on_closed()


class Stack:
    """The running services and the signal-driven shutdown."""

    def __init__(self, stream: IO[str]) -> None:
        self.services: list[Service] = []
        self.stopping = threading.Event()
        self.out = Console(stream, self.stopping.set)
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

    def say(self, text: str) -> None:
        self.out.line(f"{'pion up':<12}| {text}")

    def launch(self, service: Service, wait_s: float, progress: bool = False) -> bool:
        """Start ``service`` and wait until healthy; False if it died, timed out or we are stopping."""
        self.services.append(service)
        service.start(self.out, self.env)
        started = time.monotonic()
        last_note = 0.0
        while not self.stopping.is_set() and not self.out.reader_gone():
            if service.health():
                self.say(f"{service.name} ready ({time.monotonic() - started:.1f} s)")
                return True
            if not service.alive():
                self.say(f"{service.name} exited with code {service.proc.returncode if service.proc else '?'}")
                return False
            elapsed = time.monotonic() - started
            if elapsed > wait_s:
                self.say(f"{service.name} not healthy after {wait_s:.0f} s")
                return False
            if progress and elapsed - last_note >= 5.0:
                last_note = elapsed
                self.say(f"waiting for {service.name}: loading the model ... {elapsed:.0f} s")
            self.stopping.wait(0.25)
        return False

    def stop_all(self) -> None:
        for service in reversed(self.services):
            if service.alive():
                self.say(f"stopping {service.name}")
            try:
                service.stop()
            except Exception as exc:  # one failure must not leave the others running
                self.say(f"stopping {service.name} failed: {exc}")
        self.services = []

    def watch(self) -> int:
        """Block until a signal or a child exits; returns the exit code for `pion up`."""
        while not self.stopping.wait(0.5) and not self.out.reader_gone():
            for service in self.services:
                if not service.alive():
                    code = service.proc.returncode if service.proc else None
                    self.say(f"{service.name} exited unexpectedly (code {code}); stopping the stack")
                    return 1
        return 0


def _python(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def serve_available() -> bool:
    try:
        return importlib.util.find_spec("pion.proxy.main") is not None
    except ModuleNotFoundError:
        return False


def run(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stack = Stack(out or sys.stdout)
    # SIGHUP: the terminal closed. The children have their own sessions, so only we get it.
    previous = {sig: signal.signal(sig, lambda *_: stack.stopping.set())
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    pw = ["--requirepass", args.pion_password] if args.pion_password else []
    pion_pw = ["--pion-password", args.pion_password] if args.pion_password else []
    try:
        data_dir = str(Path(args.dir).expanduser())
        server = Service("pion-server", [*_python("pion.server"), "--port", str(args.pion_port), "--dir", data_dir, *pw],
                         _redis_ok(args.pion_port, args.pion_password))
        if not stack.launch(server, SERVICE_WAIT_S):
            return 1 if not stack.stopping.is_set() else 0
        llm = Service("pion-llm", [*_python("pion.llm"), "--port", str(args.llm_port), "--model", args.model,
                                   "--pion-port", str(args.pion_port), *pion_pw, *args.llm_arg],
                      _http_ok(f"http://127.0.0.1:{args.llm_port}/health"))
        if not stack.launch(llm, MODEL_WAIT_S, progress=True):
            return 1 if not stack.stopping.is_set() else 0
        front = f"http://127.0.0.1:{args.llm_port}"
        if args.no_serve:
            stack.say("pion-serve not started (--no-serve)")
        elif not serve_available():
            stack.say("pion-serve is not available in this install (pion.proxy.main missing); "
                      "running pion-server and pion-llm only")
        else:
            serve = Service("pion-serve", [sys.executable, "-c", "import sys; from pion.proxy.main import main; "
                                           "sys.exit(main())", "--port", str(args.port), "--backend", "pion",
                                           "--backend-url", front, "--pion-port", str(args.pion_port), *pion_pw],
                            _http_ok(f"http://127.0.0.1:{args.port}/health"))
            if stack.launch(serve, SERVICE_WAIT_S):
                front = f"http://127.0.0.1:{args.port}"
            elif not stack.stopping.is_set():
                serve.stop()
                stack.services.remove(serve)
                stack.say("pion-serve did not come up; running pion-server and pion-llm only")
        if stack.stopping.is_set():
            return 0
        _banner(stack, args, front)
        return stack.watch()
    finally:
        stack.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        stack.say("stopped")


def _banner(stack: Stack, args: argparse.Namespace, front: str) -> None:
    stack.say(f"pion-server  redis://127.0.0.1:{args.pion_port}")
    stack.say(f"pion-llm     http://127.0.0.1:{args.llm_port}/v1   (model {args.model})")
    if front.endswith(f":{args.port}"):
        stack.say(f"pion-serve   http://127.0.0.1:{args.port}/v1   (OpenAI proxy with semantic cache)")
    stack.say("try:")
    stack.say(f"  curl -s {front}/v1/chat/completions -H 'Content-Type: application/json' "
              f"-d '{{\"model\": \"{args.model}\", \"messages\": [{{\"role\": \"user\", "
              f"\"content\": \"What is the capital of France?\"}}]}}'")
    stack.say("Ctrl-C stops everything")
