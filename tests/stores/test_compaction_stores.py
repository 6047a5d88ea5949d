"""A compaction on every server store: the summary kept beside the originals, read back
by a new connection as the marker it is, so a replica that loads the session sends the
model the same view."""

from __future__ import annotations

from steerable import Runner, ScriptedModel, Spec, open_session
from steerable.compaction import compact, compaction_of, model_view
from steerable.messages import user
from steerable.stores.url import open_url
from tests.stores.test_rewrite_crash import store_url

__all__ = ["store_url"]  # the fixture, used by name


async def test_a_compaction_is_kept_and_read_back_as_one(store_url: str) -> None:
    model = ScriptedModel(["Four.", "They asked 2+2: four.", "Five."])
    async with open_url(store_url) as store:
        session = open_session("c", store)
        await Runner.run(Spec(session=session), "2+2?", model)
        summary = await compact(session, model)
    async with open_url(store_url) as store:  # another process's view of it
        session = open_session("c", store)
        stored = await session.messages()
        result = await Runner.run(Spec(session=session), [*stored, user("and 2+3?")], model)
    assert [m.text for m in stored[:2]] == ["2+2?", "Four."]
    assert stored[2] == summary and compaction_of(stored[2]) == {"covers": 2}
    assert list(model_view(stored)) == [summary]
    assert result.output == "Five."
    assert [m.text for m in model.requests[-1].messages] == [summary.text, "and 2+3?"]
