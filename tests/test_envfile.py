"""The shared `common.env` module: dotenv rules, no secret echo, typed readers, one ConfigError for every service."""

from __future__ import annotations

import os

import pytest

from common import env as envfile
from common.env import ConfigError, Env, load_dotenv


class _MyError(ValueError):
    pass


def test_dotenv_rules(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / ".env"
    f.write_text(
        "# a comment\n\n   \nexport EF_A=\"quoted value\"\nEF_B = 'single'\nEF_C=plain=with=equals\n"
        "EF_D=\nEF_E=\"mismatched'\nEF_KEPT=from-file\n"
    )
    for name in ("EF_A", "EF_B", "EF_C", "EF_D", "EF_E"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EF_KEPT", "from-env")
    values = load_dotenv(f)
    assert values == {
        "EF_A": "quoted value",
        "EF_B": "single",
        "EF_C": "plain=with=equals",
        "EF_D": "",
        "EF_E": "\"mismatched'",
        "EF_KEPT": "from-file",
    }
    assert os.environ["EF_A"] == "quoted value" and os.environ["EF_C"] == "plain=with=equals"
    assert os.environ["EF_KEPT"] == "from-env"  # existing variables win


def test_dotenv_override(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / ".env"
    f.write_text("EF_KEPT=from-file\n")
    monkeypatch.setenv("EF_KEPT", "from-env")
    load_dotenv(f, override=True)
    assert os.environ["EF_KEPT"] == "from-file"


def test_dotenv_missing_file_is_empty(tmp_path) -> None:
    assert load_dotenv(tmp_path / "nope.env") == {}


def test_dotenv_malformed_line_names_file_and_line_but_not_the_secret(tmp_path) -> None:
    f = tmp_path / ".env"
    secret = "sk-live-9f8e7d6c5b4a3210SECRET"
    f.write_text(f"GOOD=1\n# comment\nLIVEKIT_API_SECRET {secret}\n")
    with pytest.raises(ValueError) as info:
        load_dotenv(f)
    message = str(info.value)
    assert f"{f}:3:" in message and "expected KEY=VALUE" in message
    assert secret not in message and "LIVEKIT_API_SECRET" not in message


def test_dotenv_error_class_parameter(tmp_path) -> None:
    f = tmp_path / ".env"
    f.write_text("not a pair\n")
    with pytest.raises(_MyError, match=":1:"):
        load_dotenv(f, error=_MyError)


def test_raw_and_str_treat_blank_as_unset() -> None:
    env = Env({"A": "  x  ", "B": "   "})
    assert env.raw("A") == "x" and env.raw("B") is None and env.raw("C") is None
    assert env.str("A", "d") == "x" and env.str("B", "d") == "d" and env.str("C", "d") == "d"


def test_typed_readers_parse() -> None:
    env = Env({"I": "7", "F": "0.5", "T": "Yes", "N": "off", "C": "b"})
    assert env.int("I", 1, lo=0, hi=10) == 7 and env.int("MISSING", 3) == 3
    assert env.float("F", 1.0, lo=0.0) == 0.5 and env.float("MISSING", 2.5) == 2.5
    assert env.bool("T", False) is True and env.bool("N", True) is False and env.bool("MISSING", True) is True
    assert env.choice("C", "a", ("a", "b")) == "b" and env.choice("MISSING", "a", ("a", "b")) == "a"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e.int("MY_INT", 1, lo=0, hi=9), "MY_INT='abc' is not an integer (allowed: 0..9)"),
        (lambda e: e.int("MY_INT", 1), "MY_INT='abc' is not an integer"),
        (lambda e: e.int("MY_BIG", 1, lo=0, hi=9), "MY_BIG=12 is out of range (allowed: 0..9)"),
        (lambda e: e.int("MY_BIG", 1, lo=20), "MY_BIG=12 is out of range (allowed: >= 20)"),
        (lambda e: e.int("MY_BIG", 1, hi=5), "MY_BIG=12 is out of range (allowed: <= 5)"),
        (lambda e: e.float("MY_FLOAT", 1.0, lo=0.0), "MY_FLOAT='x1' is not a number (allowed: >= 0.0)"),
        (lambda e: e.float("MY_NEG", 1.0, lo=0.0, hi=1.0), "MY_NEG=-0.5 is out of range (allowed: 0.0..1.0)"),
        (
            lambda e: e.bool("MY_BOOL", False),
            "MY_BOOL='perhaps' is not a boolean; allowed: 1/0, true/false, yes/no, on/off",
        ),
        (lambda e: e.choice("MY_CHOICE", "a", ("a", "b")), "MY_CHOICE='z' is not allowed; allowed values: a, b"),
    ],
)
def test_typed_reader_errors_name_the_variable(call, message: str) -> None:
    env = Env(
        {"MY_INT": "abc", "MY_BIG": "12", "MY_FLOAT": "x1", "MY_NEG": "-0.5", "MY_BOOL": "perhaps", "MY_CHOICE": "z"}
    )
    with pytest.raises(ValueError) as info:
        call(env)
    assert str(info.value) == message
    assert type(info.value) is ConfigError  # the default error class (a ValueError)


def test_env_error_class_parameter() -> None:
    env = Env({"MY_INT": "abc"}, error=_MyError)
    with pytest.raises(_MyError, match="MY_INT"):
        env.int("MY_INT", 1)


def test_every_service_raises_the_one_config_error(tmp_path) -> None:
    from token_server import config as token_config
    from tts_engine.errors import ConfigError as EngineConfigError

    tts_env = envfile
    assert EngineConfigError is token_config.ConfigError is envfile.ConfigError

    f = tmp_path / ".env"
    f.write_text("X=1\nbroken secret-value\n")
    with pytest.raises(EngineConfigError, match=":2:") as engine_info:
        tts_env.load_dotenv(f)
    with pytest.raises(token_config.ConfigError, match=":2:") as server_info:
        token_config.load_dotenv(f)
    for info in (engine_info, server_info):
        assert "secret-value" not in str(info.value)
    with pytest.raises(EngineConfigError, match="VAD_SILENCE_MS"):
        tts_env.Env({"VAD_SILENCE_MS": "x"}).int("VAD_SILENCE_MS", 200)
    assert isinstance(tts_env.Env(), envfile.Env)
    with pytest.raises(token_config.ConfigError, match=r"VAD_SILENCE_MS=10 is out of range \(allowed: 50..5000\)"):
        token_config.ServerConfig.from_env(
            {"LIVEKIT_API_KEY": "k", "LIVEKIT_API_SECRET": "s", "LIVEKIT_URL": "ws://h", "VAD_SILENCE_MS": "10"}
        )
