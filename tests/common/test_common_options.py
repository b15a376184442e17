"""The one option loader: flag > PION_* environment > default, for all three configurable programs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pion.common.errors import ConfigError
from pion.common.options import Option, load_options, parse_bool, parse_float, parse_int
from pion.common.ports import PION_LLM_PORT, PION_SERVE_PORT, PION_SERVER_PORT
from pion.llm.config import LlmConfig
from pion.llm.config import OPTIONS as LLM_OPTIONS
from pion.llm.config import load_config as load_llm_config
from pion.proxy.config import OPTIONS as SERVE_OPTIONS
from pion.proxy.config import ServeConfig
from pion.proxy.config import load_config as load_serve_config
from pion.server.config import OPTIONS as SERVER_OPTIONS
from pion.server.config import ServerConfig

TOY = [Option(("--size",), "size", parse_int(1, 10), "a size", env_prefix="PION_TOY_"),
       Option(("--ratio",), "ratio", parse_float(0.0), "a ratio", env_prefix="PION_TOY_"),
       Option(("--no-thing",), "thing", parse_bool, "off switch", switch="no", env_prefix="PION_TOY_"),
       Option((), "hidden", parse_int(), "environment only", env_prefix="PION_TOY_")]


def test_a_flag_wins_over_the_environment_which_wins_over_absence() -> None:
    env = {"PION_TOY_SIZE": "3", "PION_TOY_RATIO": "0.5", "PION_TOY_HIDDEN": "7"}
    assert load_options("toy", "", TOY, ["--size", "4"], env) == {"size": 4, "ratio": 0.5, "hidden": 7}
    assert load_options("toy", "", TOY, [], {}) == {}


def test_an_off_switch_sets_its_field_false_and_the_environment_can_too() -> None:
    assert load_options("toy", "", TOY, ["--no-thing"], {}) == {"thing": False}
    assert load_options("toy", "", TOY, [], {"PION_TOY_THING": "off"}) == {"thing": False}
    assert load_options("toy", "", TOY, [], {"PION_TOY_THING": "YES"}) == {"thing": True}


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["--size", "11"], {}, "--size: must be 1..10, got 11"),
    ([], {"PION_TOY_SIZE": "big"}, "PION_TOY_SIZE: expected an integer, got 'big'"),
    ([], {"PION_TOY_RATIO": "nan"}, "PION_TOY_RATIO: must be a finite number, got 'nan'"),
    (["--ratio", "-1"], {}, "--ratio: must be >= 0, got '-1'"),
    ([], {"PION_TOY_THING": "maybe"},
     "PION_TOY_THING: expected a boolean (yes/no, 1/0, true/false, on/off), got 'maybe'"),
])
def test_a_bad_value_names_the_key_and_the_value(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_options("toy", "", TOY, argv, env)
    assert str(info.value) == message


def test_every_program_uses_its_own_pion_prefix_and_names_every_field() -> None:
    assert {o.env_prefix for o in SERVER_OPTIONS} == {"PION_"}
    assert {o.env_prefix for o in LLM_OPTIONS} == {"PION_LLM_"}
    assert {o.env_prefix for o in SERVE_OPTIONS} == {"PION_SERVE_"}
    assert sorted(o.field for o in SERVER_OPTIONS) == sorted(ServerConfig.__dataclass_fields__)
    assert sorted(o.field for o in LLM_OPTIONS) == sorted(LlmConfig.__dataclass_fields__)
    assert sorted(o.field for o in SERVE_OPTIONS) == sorted(ServeConfig.__dataclass_fields__)


def test_default_ports_come_from_one_constants_module() -> None:
    assert (PION_SERVER_PORT, PION_SERVE_PORT, PION_LLM_PORT) == (1974, 8321, 8322)
    assert (ServerConfig().port, LlmConfig().port, LlmConfig().pion_port) == (1974, 8322, 1974)
    assert (ServeConfig().port, ServeConfig().pion_port) == (8321, 1974)


def test_pion_llm_reads_every_flag_from_its_environment_variable() -> None:
    env = {"PION_LLM_PORT": "9000", "PION_LLM_VQUANT": "int8", "PION_LLM_NO_PION": "1",
           "PION_LLM_PION_BUDGET_GB": "0.5", "PION_LLM_LOG_LEVEL": "warning"}
    config = load_llm_config(["--port", "9001"], env)
    assert (config.port, config.vquant, config.no_pion, config.pion_budget_gb, config.log_level) == (
        9001, "int8", True, 0.5, "warning")


def test_pion_llm_refuses_an_unknown_storage_format_before_loading_anything() -> None:
    with pytest.raises(ConfigError) as info:
        load_llm_config(["--vquant", "fp7"], {})
    assert str(info.value).startswith("--vquant: ")
    assert "fp7" in str(info.value)


def test_pion_serve_env_only_options_are_typed_by_their_parser() -> None:
    config = load_serve_config([], {"PION_SERVE_BACKEND_TIMEOUT_S": "12.5", "PION_SERVE_CACHE_NAME": "x"})
    assert (config.backend_timeout_s, config.cache_name) == (12.5, "x")


@pytest.mark.parametrize(("module", "env", "message"), [
    ("pion.server", {"PION_PORT": "x"}, "pion-server: PION_PORT: expected an integer, got 'x'\n"),
    ("pion.llm", {"PION_LLM_PORT": "x"}, "pion-llm: PION_LLM_PORT: expected an integer, got 'x'\n"),
    ("pion.proxy.main", {"PION_SERVE_CACHE_THRESHOLD": "high"},
     "pion-serve: PION_SERVE_CACHE_THRESHOLD: expected a number, got 'high'\n"),
])
def test_each_program_exits_2_with_one_line_and_no_traceback_on_a_bad_environment_value(
        module: str, env: dict[str, str], message: str, tmp_path: Path) -> None:
    import os

    done = subprocess.run([sys.executable, "-m", module], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env}, cwd=tmp_path)
    assert (done.returncode, done.stderr, done.stdout) == (2, message, "")


@pytest.mark.parametrize(("module", "message"), [
    ("pion.llm", "pion-llm: needs the [llm] extra (pip install 'pion[llm]'): No module named 'uvicorn'\n"),
    ("pion.proxy.main", "pion-serve: needs the [proxy] extra (pip install 'pion[proxy]'): No module named 'uvicorn'\n"),
])
def test_a_program_whose_extra_is_missing_names_the_extra_and_exits_1(module: str, message: str,
                                                                    tmp_path: Path) -> None:
    import os

    shadow = tmp_path / "shadow" / "uvicorn"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'uvicorn\'")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), *sys.path[1:]])}
    done = subprocess.run([sys.executable, "-m", module, "--port", "1"], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tmp_path)
    assert (done.returncode, done.stderr.splitlines()[-1] + "\n") == (1, message)


@pytest.mark.parametrize(("module", "options", "extra"), [
    ("pion.server", SERVER_OPTIONS, None),
    ("pion.llm", LLM_OPTIONS, "uvicorn"),
    ("pion.proxy.main", SERVE_OPTIONS, "uvicorn"),
])
def test_each_programs_help_lists_every_flag_even_one_whose_text_has_a_percent_sign(
        module: str, options: list[Option], extra: str | None, tmp_path: Path) -> None:
    """argparse %-formats help texts: "crc32(name) % N" in --worker-placement's made --help crash."""
    import importlib.util

    if extra is not None and importlib.util.find_spec(extra) is None:
        pytest.skip(f"{module} needs {extra} (its extra is not installed here)")
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, "")
    text = " ".join(done.stdout.split())  # argparse wraps lines
    assert [flag for opt in options for flag in opt.flags if flag not in text] == []
    assert "crc32(name) % N" in text or module != "pion.server"
