"""`pion up` brings the stack up, serves a chat, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from support.llm_procs import MODEL
from support.pion_up import running_pion_up
from support.proc_tree import children_of
from support.procs import free_port


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
    children: list[int] = []
    with running_pion_up(tmp_path / "data", free_port(), llm_port, free_port(), timeout_s=240) as (proc, text):
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
    assert [pid for pid in children if group_exists(pid)] == []
