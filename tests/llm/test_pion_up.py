"""`pion up` brings the stack up, serves a chat, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support.llm_procs import MODEL
from support.proc_tree import children_of
from support.procs import free_port

READY_LINE = "Ctrl-C stops everything"


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_make_up_runs_pion_up_offline() -> None:
    root = Path(__file__).resolve().parents[2]
    # -o: treat the setup stamp as up to date, so this only prints the `up` recipe.
    # Under `make test` this runs as a sub-make: drop the parent's make variables so it prints no
    # "Entering directory" lines.
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"}}
    out = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.pion-installed", "up"], cwd=root,
                         capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip().splitlines() == ["HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/pion up"]


@pytest.mark.slow
def test_pion_up_comes_up_serves_a_chat_and_ctrl_c_leaves_no_process_behind(tmp_path: Path) -> None:
    from openai import OpenAI

    llm_port = free_port()
    cmd = [sys.executable, "-m", "pion.cli", "up", "--dir", str(tmp_path / "data"), "--pion-port", str(free_port()),
           "--llm-port", str(llm_port), "--port", str(free_port()), "--llm-arg=--threads=1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    seen: list[str] = []
    children: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while not any(READY_LINE in line for line in seen):
            assert time.monotonic() < deadline, "".join(seen)
            assert proc.poll() is None, "".join(seen)
            try:
                seen.append(lines.get(timeout=1.0))
            except queue.Empty:
                continue
        text = "".join(seen)
        assert "pion-server ready" in text
        assert "pion-llm ready" in text
        assert "curl -s http://127.0.0.1:" in text
        assert "pion-llm    | " in text  # logs are forwarded with a per-service prefix
        children = children_of(proc.pid)
        assert len(children) >= 2
        client = OpenAI(base_url=f"http://127.0.0.1:{llm_port}/v1", api_key="unused", max_retries=0)
        resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3)
        assert resp.object == "chat.completion"

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        reader.join(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
    assert [pid for pid in children if group_exists(pid)] == []
