"""The metered decorator and context manager, sync and async, against the live service: success is
recorded, failure and cancellation released, a denial raised before the function runs, and a
retried call with the same idempotency key deducted once."""

from __future__ import annotations

import asyncio
import socket
import unittest
from typing import Any, cast

from _support import BASE_URL, balance, create_tenant, live, map_tool, service, stdio

from creditgate import Client, MeteringDenied, metered


class Events(list):  # type: ignore[type-arg]
    def ids(self, kind: str) -> list[str]:
        return [e["invocation_id"] for e in self if e["type"] == kind]


class FakeContext:
    """The shape of the mcp package's Context (`MCPServer`'s in 2.x, `FastMCP`'s in 1.x): the tools/call
    `_meta` at ctx.request_context.meta, here a dict as in 2.x (both versions' shapes: test_contexts.py)."""

    class _Request:
        def __init__(self, meta: dict[str, Any]) -> None:
            self.meta = meta

    def __init__(self, meta: dict[str, Any]) -> None:
        self.request_context = FakeContext._Request(meta)


@live
class SyncDecoratorTest(unittest.TestCase):
    def test_success_is_recorded(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        events = Events()
        advanced = map_tool("task_advanced")

        @metered(c, advanced, on_event=events.append)
        def search(q: str) -> str:
            return f"found {q}"

        self.assertEqual(search("otters"), "found otters")
        [invocation] = events.ids("recorded")
        status = c.get_invocation(invocation)
        self.assertEqual((status["status"], status["credits_used"], status["tool_name"]), ("recorded", 3, advanced))

    def test_an_exception_releases_and_propagates(self) -> None:
        c = stdio(create_tenant("launch"))
        events = Events()

        @metered(c, on_event=events.append)
        def broken() -> str:
            raise ValueError("boom")

        with self.assertRaises(ValueError):
            broken()
        [invocation] = events.ids("allowed")
        self.assertEqual(c.get_invocation(invocation)["status"], "released")
        self.assertEqual(events.ids("released"), [invocation])

    def test_keyboard_interrupt_releases(self) -> None:
        c = stdio(create_tenant("launch"))
        events = Events()

        @metered(c, "interrupted", on_event=events.append)
        def interrupted() -> None:
            raise KeyboardInterrupt

        with self.assertRaises(KeyboardInterrupt):
            interrupted()
        self.assertEqual(c.get_invocation(events.ids("allowed")[0])["status"], "released")

    def test_an_is_error_result_releases(self) -> None:
        c = stdio(create_tenant("launch"))
        events = Events()

        @metered(c, on_event=events.append)
        def failing() -> dict[str, Any]:
            return {"isError": True, "content": [{"type": "text", "text": "no"}]}

        self.assertTrue(failing()["isError"])
        self.assertEqual(c.get_invocation(events.ids("allowed")[0])["status"], "released")

    def test_a_denial_raises_without_running(self) -> None:
        ran: list[bool] = []

        @metered(stdio(create_tenant("sandbox")), upgrade_url="https://example.com/pricing")
        def search() -> None:
            ran.append(True)

        with self.assertRaises(MeteringDenied) as caught:
            search()
        self.assertEqual((caught.exception.reason, caught.exception.code, caught.exception.tier), ("sandbox_tier", "METERING_DENIED", "sandbox"))
        self.assertIn("https://example.com/pricing", caught.exception.message)
        self.assertEqual(ran, [])

    def test_insufficient_credits_is_a_denial(self) -> None:
        t = create_tenant("launch", monthly_credits=0)

        @metered(service(), user_id=t.user_id)
        def search() -> None:
            raise AssertionError("must not run")

        with self.assertRaises(MeteringDenied) as caught:
            search()
        self.assertEqual(caught.exception.reason, "insufficient_credits")

    def test_a_retry_with_the_same_idempotency_key_deducts_once(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        events = Events()
        runs: list[str] = []

        @metered(c, on_event=events.append)
        def search(q: str, ctx: FakeContext) -> str:
            runs.append(q)
            return q

        ctx = FakeContext({"io.creditgate/idempotency-key": "retry-1"})
        search("otters", ctx)
        search("otters", ctx)  # the client's retry: runs again, deducted once
        search("badgers", ctx)  # the same key with other arguments is another call
        self.assertEqual(runs, ["otters", "otters", "badgers"])
        recorded = events.ids("recorded")
        self.assertEqual(recorded[0], recorded[1])
        self.assertNotEqual(recorded[0], recorded[2])
        self.assertTrue(recorded[0].startswith("mcp_"))
        replays = [e["result"]["replayed"] for e in events if e["type"] == "recorded"]
        self.assertEqual(replays, [False, True, False])
        self.assertEqual(c.get_invocation(recorded[0])["credits_used"], 1)

    def test_a_retry_with_the_key_of_a_refunded_call_is_a_new_charged_call(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        events = Events()
        runs: list[str] = []

        @metered(c, on_event=events.append)
        def search(q: str, ctx: FakeContext) -> str:
            runs.append(q)
            return q

        ctx = FakeContext({"io.creditgate/idempotency-key": "refunded-1"})
        search("otters", ctx)
        [first] = [e["result"] for e in events if e["type"] == "recorded"]
        service().refund_usage(cast(str, first["usage_id"]), reason="bad answer")
        self.assertEqual(balance(t)["monthly_used"], 0)
        search("otters", ctx)
        search("otters", ctx)
        self.assertEqual(runs, ["otters", "otters", "otters"])
        self.assertEqual((balance(t)["monthly_used"], balance(t)["reserved"]), (2, 0))

    def test_service_mode_needs_a_user_and_records_it(self) -> None:
        t = create_tenant("launch")
        events = Events()

        @metered(service(), user_id=lambda args: args.get("user"), on_event=events.append)
        def lookup(user: str | None) -> str:
            return "ok"

        with self.assertRaises(MeteringDenied) as caught:
            lookup(None)
        self.assertEqual(caught.exception.reason, "no_user")
        self.assertEqual(lookup(t.user_id), "ok")
        [recorded] = [e["result"] for e in events if e["type"] == "recorded"]
        self.assertEqual((recorded["success"], recorded["credits_remaining"]), (True, 1999))
        self.assertEqual(service().get_invocation(events.ids("recorded")[0], deployment_id=t.deployment_id)["status"], "recorded")

    def test_outage_policies(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        down = Client(api_key="cg_x", base_url=f"http://127.0.0.1:{port}", retries=0)

        @metered(down)
        def closed() -> str:
            return "ran"

        with self.assertLogs("creditgate", "WARNING"), self.assertRaises(MeteringDenied) as caught:
            closed()
        self.assertEqual(caught.exception.reason, "platform_unavailable")

        @metered(down, on_outage="fail_open")
        def open_() -> str:
            return "ran"

        with self.assertLogs("creditgate", "WARNING"):
            self.assertEqual(open_(), "ran")

    def test_a_refused_key_is_metering_misconfigured(self) -> None:
        @metered(Client(api_key=f"cg_{'A' * 36}", base_url=BASE_URL))
        def tool() -> None:
            raise AssertionError("must not run")

        with self.assertLogs("creditgate", "ERROR"), self.assertRaises(MeteringDenied) as caught:
            tool()
        self.assertEqual(caught.exception.reason, "metering_misconfigured")


@live
class ContextManagerTest(unittest.TestCase):
    def test_success_records_with_metadata_and_an_exception_releases(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        with metered(c, "search", args={"q": "otters"}) as call:
            self.assertTrue(call.reserved)
            call.metadata = {"hits": 3}
        assert call.usage is not None
        self.assertEqual((call.usage["success"], call.usage["invocation_id"]), (True, call.invocation_id))
        self.assertEqual(c.get_invocation(call.invocation_id)["status"], "recorded")
        with self.assertRaises(RuntimeError):
            with metered(c, "search") as failed:
                raise RuntimeError("no")
        self.assertEqual(c.get_invocation(failed.invocation_id)["status"], "released")

    def test_metadata_the_service_would_refuse_is_dropped_and_the_call_still_charged(self) -> None:
        t = create_tenant("launch")
        c = stdio(t)
        for metadata in ({"args": "x" * (20 * 1024)}, ["not", "an", "object"]):
            with metered(c, "search") as call:
                call.metadata = metadata  # type: ignore[assignment]
            assert call.usage is not None
            self.assertTrue(call.usage["success"])
            self.assertEqual(c.get_invocation(call.invocation_id)["status"], "recorded")
        self.assertEqual(balance(t)["monthly_used"], 2)

    def test_the_same_key_and_arguments_give_the_same_id(self) -> None:
        c = stdio(create_tenant("launch"))
        with metered(c, "search", args={"q": "x"}, idempotency_key="k-1") as first:
            pass
        with metered(c, "search", args={"q": "x"}, idempotency_key="k-1") as second:
            pass
        self.assertEqual(first.invocation_id, second.invocation_id)
        assert second.usage is not None
        self.assertTrue(second.usage["replayed"])

    def test_denial_raises_on_enter(self) -> None:
        with self.assertRaises(MeteringDenied):
            with metered(stdio(create_tenant("sandbox")), "search"):
                raise AssertionError("must not run")


@live
class AsyncTest(unittest.IsolatedAsyncioTestCase):
    async def test_success_failure_and_denial(self) -> None:
        c = stdio(create_tenant("launch"))
        events = Events()

        @metered(c, on_event=events.append)
        async def search(q: str) -> str:
            await asyncio.sleep(0)
            return q

        @metered(c, on_event=events.append)
        async def broken() -> None:
            raise ValueError("boom")

        self.assertEqual(await search("otters"), "otters")
        self.assertEqual(c.get_invocation(events.ids("recorded")[0])["status"], "recorded")
        with self.assertRaises(ValueError):
            await broken()
        self.assertEqual(c.get_invocation(events.ids("released")[0])["status"], "released")

        @metered(stdio(create_tenant("sandbox")))
        async def denied() -> None:
            raise AssertionError("must not run")

        with self.assertRaises(MeteringDenied):
            await denied()

    async def test_a_cancelled_call_releases(self) -> None:
        c = stdio(create_tenant("launch"))
        events = Events()
        started = asyncio.Event()

        @metered(c, on_event=events.append)
        async def slow() -> None:
            started.set()
            await asyncio.sleep(30)

        task = asyncio.create_task(slow())
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        [invocation] = events.ids("allowed")
        self.assertEqual(events.ids("released"), [invocation])
        self.assertEqual(c.get_invocation(invocation)["status"], "released")
        self.assertEqual(events.ids("recorded"), [])

    async def test_async_context_manager(self) -> None:
        c = stdio(create_tenant("launch"))
        async with metered(c, "search", args={"q": 1}) as call:
            await asyncio.sleep(0)
        self.assertEqual(c.get_invocation(call.invocation_id)["status"], "recorded")
        with self.assertRaises(KeyError):
            async with metered(c, "search") as failed:
                raise KeyError("x")
        self.assertEqual(c.get_invocation(failed.invocation_id)["status"], "released")


class DecoratorShapeTest(unittest.TestCase):
    def test_the_wrapper_keeps_name_signature_and_coroutine_kind(self) -> None:
        import inspect

        c = Client(api_key="cg_x", base_url="http://127.0.0.1:9")

        @metered(c)
        async def search(q: str, limit: int = 5) -> list[str]:
            return []

        self.assertEqual(search.__name__, "search")
        self.assertTrue(inspect.iscoroutinefunction(search))
        self.assertEqual(list(inspect.signature(search).parameters), ["q", "limit"])
        self.assertIs(inspect.signature(search).parameters["limit"].annotation, int)


if __name__ == "__main__":
    unittest.main()
