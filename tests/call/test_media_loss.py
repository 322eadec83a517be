"""The caller's network to the LiveKit server cut mid-reply for 5 s and for 30 s, on the real stack with an SDK caller
in its own network namespace (lab/faults/media_loss.py says what is expected and why). 5 s: the call goes on
(the caller hears the agent, the agent hears the caller) and ends with a normal hang-up; 30 s: LiveKit drops the
caller and the call ends on both sides (the caller's SDK gives up, or joins the room again as a new call when the
link is back while it still tries). Either way the worker is left with no job, no load, no open journal entry,
every turn traced, and no ERROR line in its log (a normal hang-up included). Needs root (ip netns)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lab.callbench.stack import LocalStack
from lab.faults import STACK_ENV, media_loss
from lab.faults.netns import CallerNetwork

pytestmark = pytest.mark.call


@pytest.fixture(scope="module")
def net() -> Iterator[CallerNetwork]:
    assert os.geteuid() == 0, "the media-loss test creates a network namespace: run it as root"
    with CallerNetwork() as caller_net:
        yield caller_net


@pytest.fixture(scope="module")
def loss_stack(net: CallerNetwork, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    workdir = tmp_path_factory.mktemp("loss_stack")
    config = workdir / "livekit.yaml"
    config.write_text(media_loss.livekit_config(net))
    local = LocalStack(workdir / "stack", LIVEKIT_CONFIG_FILE=str(config), **STACK_ENV)
    local.start()
    try:
        yield local
    finally:
        print(local.stop())


@pytest.mark.parametrize("cut_s", [5.0, 30.0])
async def test_the_callers_network_cut_mid_reply(
    loss_stack: LocalStack, net: CallerNetwork, question_wav: Path, cut_s: float
) -> None:
    result = await media_loss.loss_try(loss_stack, net, question_wav, cut_s=cut_s, index=1)
    print({k: v for k, v in result.items() if k != "events"})
    assert result["worker_jobs"] == 0 and result["worker_load"] < media_loss.IDLE_LOAD, result
    assert result["open_journal_entries"] == [] and result["turns_traced"] > 0, result
    assert result["worker_log_problems"] == [], result["worker_log_problems"]
    if cut_s <= 10:
        assert result["recovered"], result["events"]
    else:  # the first call closed on the agent's side; the caller gave up or joined the room again (a new call)
        assert result["first_call_closed"], result
        assert result["caller"] != "neither", result["events"]
    assert result["ok"], result
