"""Every curl example in README.md, run against a real `pion up` stack, prints a correct answer.

A new user's first request is the README's; with OpenAI's temperature 1.0 SmolLM2 answered
"What is the capital of France?" with noise. Each example runs a few times: the repeats go through
the prefix cache (pion-llm) and the semantic cache (pion-serve) and must answer the same way.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from support.pion_up import running_pion_up
from support.procs import free_port

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
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
    answers: dict[str, list[str]] = {}
    with running_pion_up(tmp_path / "data", ports["1974"], ports["8322"], ports["8321"]) as (_, text):
        assert "pion-serve ready" in text
        for example in readme_curl_examples():
            local = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{ports[m.group(1)]}", example)
            question = json.loads(re.search(r"-d '(.*)'", local).group(1))["messages"][-1]["content"]  # type: ignore[union-attr]
            for _ in range(RUNS_PER_EXAMPLE):
                out = subprocess.run(["bash", "-c", local], capture_output=True, text=True, timeout=300, check=True)
                answers.setdefault(question, []).append(json.loads(out.stdout)["choices"][0]["message"]["content"])
    assert sorted(answers) == sorted(EXPECTED)
    wrong = {q: [a for a in got if EXPECTED[q].lower() not in a.lower()] for q, got in answers.items()}
    assert wrong == {q: [] for q in answers}, answers
