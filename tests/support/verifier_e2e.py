"""pion-serve's L1 verifiers through real processes: start a proxy with a verifier, ask it
questions through the openai SDK, read its verdict counters from ``/v1/stats`` and ``/metrics``.

The guard, aligned, learned and cross verifier end-to-end modules start the same proxy the
same way and read the same counters; one copy here keeps them measuring the same thing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from support.fake_backends import FakeBackend
from support.procs import ServerProcess
from support.proxy_procs import ProxyProcess, pion_args, start_proxy, wait_for_embedder


@contextmanager
def verifier_proxy(work: Path, backend: FakeBackend, server: ServerProcess,
                   *verifier_args: str) -> Iterator[ProxyProcess]:
    """pion-serve in front of ``backend`` with L1 in ``server``; with ``--verifier …`` in
    ``verifier_args`` it is yielded only once the verifier has loaded (before that the guard
    decides, which is not what such a test means to measure)."""
    p = start_proxy(work, "--backend", "vllm", "--backend-url", backend.url, *verifier_args, *pion_args(server))
    try:
        wait_for_embedder(p)
        if "--verifier" in verifier_args:
            wait_for_verifier(p)
        yield p
    finally:
        p.stop()


def wait_for_verifier(proxy: ProxyProcess, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proxy.stats()["l1_verdicts"]["verifier_ready"] is True:
            return
        time.sleep(0.2)
    raise RuntimeError("pion-serve never loaded its verifier")


def chat(proxy: ProxyProcess, messages: list[Any]) -> tuple[str, str]:
    """(answer, X-Pion-Cache) for one non-streaming request."""
    raw = proxy.openai().chat.completions.with_raw_response.create(model="fake-model", messages=messages)
    return raw.parse().choices[0].message.content or "", raw.headers["x-pion-cache"]


def ask(proxy: ProxyProcess, system: str, *user_turns: str) -> tuple[str, str]:
    """The last of ``user_turns`` after the earlier ones (each acknowledged), under ``system``."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for turn in user_turns[:-1]:
        messages += [{"role": "user", "content": turn}, {"role": "assistant", "content": "Okay."}]
    return chat(proxy, [*messages, {"role": "user", "content": user_turns[-1]}])


def verdicts(proxy: ProxyProcess) -> dict[str, Any]:
    return proxy.stats()["l1_verdicts"]


def metric(proxy: ProxyProcess, line_start: str) -> float:
    for line in httpx.get(proxy.url + "/metrics").text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[1])
    return 0.0


def check_reworded_question_served(proxy: ProxyProcess, system: str, cached: str, reworded: str) -> None:
    """``reworded`` after ``cached`` (same system prompt) is a HIT with the cached answer, and
    ``served`` goes up by one."""
    first, h1 = ask(proxy, system, cached)
    served_before = verdicts(proxy)["served"]
    second, h2 = ask(proxy, system, reworded)
    assert (h1, h2, second) == ("MISS", "HIT", first)
    assert verdicts(proxy)["served"] == served_before + 1


def check_refused_and_counted(proxy: ProxyProcess, system: str, cached: str, new: str, reason: str) -> None:
    """``new`` after ``cached`` goes to the backend, and the verifier's refusal is counted under
    ``reason`` in ``/v1/stats`` and ``/metrics`` alike."""
    line = f'pion_serve_l1_verdicts_total{{outcome="refused_by_verifier",reason="{reason}"}}'
    before, m_before = verdicts(proxy)["refused_by_verifier"][reason], metric(proxy, line)
    ask(proxy, system, cached)
    answer, header = ask(proxy, system, new)
    assert (header, answer.endswith(new)) == ("MISS", True)
    assert (verdicts(proxy)["refused_by_verifier"][reason], metric(proxy, line)) == (before + 1, m_before + 1)
