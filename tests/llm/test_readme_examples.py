"""Every curl example in README.md, run against a real `pion up` stack, prints a correct answer.

A new user's first request is the README's; with OpenAI's temperature 1.0 SmolLM2 answered
"What is the capital of France?" with noise. Each example runs a few times: the repeats go through
the prefix cache (pion-llm) and the semantic cache (pion-serve) and must answer the same way.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support.procs import free_port

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
READY_LINE = "Ctrl-C stops everything"
RUNS_PER_EXAMPLE = 3
# The answer each README question must get (a substring, case-insensitive). A new example without
# an entry here fails the test, so the README cannot grow an unchecked example.
EXPECTED = {
    "What is the capital of France?": "Paris",
    "Which city is the capital of France?": "Paris",
}


def readme_curl_examples() -> list[str]:
    """The curl commands in README.md's ```sh blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.lstrip().startswith("curl "):
                commands.append(command.strip())
    return commands


def test_the_readme_has_curl_examples_for_pion_llm_and_pion_serve() -> None:
    ports = sorted({re.search(r"127\.0\.0\.1:(\d+)", c).group(1) for c in readme_curl_examples()})  # type: ignore[union-attr]
    assert ports == ["8321", "8322"]


def test_every_readme_curl_example_prints_a_correct_answer(tmp_path: Path) -> None:
    ports = {"1974": free_port(), "8322": free_port(), "8321": free_port()}
    cmd = [sys.executable, "-m", "pion.cli", "up", "--dir", str(tmp_path / "data"), "--pion-port", str(ports["1974"]),
           "--llm-port", str(ports["8322"]), "--port", str(ports["8321"]), "--llm-arg=--threads=1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: list[str] = []
    answers: dict[str, list[str]] = {}
    try:
        deadline = time.monotonic() + 300
        while not any(READY_LINE in line for line in seen):
            assert time.monotonic() < deadline, "".join(seen)
            assert proc.poll() is None, "".join(seen)
            try:
                seen.append(lines.get(timeout=1.0))
            except queue.Empty:
                continue
        assert "pion-serve ready" in "".join(seen)
        for example in readme_curl_examples():
            local = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{ports[m.group(1)]}", example)
            question = json.loads(re.search(r"-d '(.*)'", local).group(1))["messages"][-1]["content"]  # type: ignore[union-attr]
            for _ in range(RUNS_PER_EXAMPLE):
                out = subprocess.run(["bash", "-c", local], capture_output=True, text=True, timeout=300, check=True)
                answers.setdefault(question, []).append(json.loads(out.stdout)["choices"][0]["message"]["content"])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
            reader.join(timeout=10)
            proc.stdout.close()  # type: ignore[union-attr]
    assert sorted(answers) == sorted(EXPECTED)
    wrong = {q: [a for a in got if EXPECTED[q].lower() not in a.lower()] for q, got in answers.items()}
    assert wrong == {q: [] for q in answers}, answers
