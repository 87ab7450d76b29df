"""``metered``: check with a reservation → run → record on success, release on failure.

Works with any Python MCP server framework (it imports none): as a decorator on a sync or async
tool function, or as a (sync or async) context manager around the tool's work. It follows the
TypeScript middleware (packages/client/src/mcp/meter.ts): the same refusal reasons and messages,
the same invocation id for a retried call (see _identity.py), the same outage policies.

    @mcp.tool()
    @metered(cg)
    async def search(q: str) -> str: ...
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import threading
import time
import typing
from typing import Any, Callable, Iterable, Literal, Mapping, Optional, TypeVar, Union, cast

from ._identity import idempotency_key_from_meta, invocation_id_for, uuid7
from .client import Client
from .errors import INVALID_RESPONSE, CreditgateError, MeteringDenied
from .types import RecordResult, ServiceCheckResult, StdioCheckResult, ToolPrice

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")
OnOutage = Literal["fail_closed", "fail_open"]
# A value, or a function of the call's arguments by name (context objects included).
FromArgs = Union[str, None, Callable[[Mapping[str, Any]], Optional[str]]]
MetadataFromArgs = Union[Mapping[str, Any], None, Callable[[Mapping[str, Any]], Optional[Mapping[str, Any]]]]

_METADATA_LIMIT_BYTES = 16 * 1024  # the service's bound on a usage record's metadata, serialized

log = logging.getLogger("creditgate")


def _is_refunded_invocation(err: CreditgateError) -> bool:
    """A reservation's 422 for an invocation recorded and then refunded (its `invocation_status`)."""
    return err.code == "IDEMPOTENCY_KEY_REUSED" and isinstance(err.body, Mapping) and err.body.get("invocation_status") == "refunded"


# Where a tool error result of a refusal keeps what the model and the client may read (docs/client.md,
# "What the middleware puts in _meta"), as the TypeScript middleware's (mcp/results.ts).
META_DENIAL = "io.creditgate/denial"
META_PAYMENT_REQUIRED = "io.creditgate/payment_required"


def _credits(n: Any) -> str:
    return f"{n} credit" if n == 1 else f"{n} credits"


def _payment_message(reason: str, tool: str, payment: Optional[Mapping[str, Any]]) -> Optional[str]:
    """What a refusal with ``payment_required`` says: the price and the balance, and the top-up link when
    the service sent one; a budget's names the budget and when its window resets (mcp/results.ts)."""
    if not isinstance(payment, Mapping) or payment.get("reason") != reason:
        return None
    price = f"it costs {_credits(payment.get('credits_required'))}"
    available = payment.get("credits_available")
    balance = "unlimited or unknown" if available is None else _credits(available)
    if reason == "insufficient_credits":
        url = payment.get("top_up_url")
        advice = (
            f"Buy credits at {url} (the link is valid for 30 minutes), then call the tool again."
            if url
            else "Buy credits or wait for the monthly allocation to reset, then call the tool again."
        )
        return f'Not enough credits to run "{tool}": {price} and the balance is {balance}. {advice}'
    if reason == "budget_exceeded":
        budget_id = payment.get("budget_id")
        budget = f"the spending budget {budget_id}" if budget_id else "a spending budget"
        resets_at = payment.get("resets_at")
        resets = f" The budget's window resets at {resets_at}." if resets_at else ""
        return (
            f'"{tool}" would go over {budget} of this workspace ({price}), so it did not run and nothing was charged.{resets}'
            " Buying credits does not lift a budget: wait for its window to reset, or ask the workspace owner to raise it."
        )
    return None


def denial_message(
    reason: str,
    tool: str,
    tier: Optional[str],
    upgrade_url: Optional[str],
    retry_after: Optional[int] = None,
    payment_required: Optional[Mapping[str, Any]] = None,
) -> str:
    """The sentence the TypeScript middleware returns for a refusal (mcp/results.ts), for the model to act on.
    With the service's ``payment_required`` it names the price, the balance and the top-up link, or the
    budget and when it resets."""
    for_payment = _payment_message(reason, tool, payment_required)
    if for_payment is not None:
        return for_payment
    upgrade = f" Upgrade at {upgrade_url}." if upgrade_url else " Upgrade the plan to use it."
    messages = {
        "sandbox_tier": f'The tool "{tool}" is not available on the sandbox tier.{upgrade}',
        "mcp_disabled": f"MCP tools are turned off for this deployment{f' (tier {tier})' if tier else ''}.{upgrade}",
        "insufficient_credits": f'Not enough credits to run "{tool}". Buy credits or wait for the monthly allocation to reset, then call the tool again.',
        "budget_exceeded": f'"{tool}" would go over a spending budget of this workspace, so it did not run and nothing was charged. Buying credits does not lift a budget: wait for its window to reset, or ask the workspace owner to raise it.',
        "no_deployment_found": f'No active deployment is linked to this account, so "{tool}" cannot be metered. Create or join an organization, then try again.',
        "deployment_not_found": f'The deployment this session meters against is unknown or suspended, so "{tool}" cannot run. Contact the workspace owner.',
        "no_user": f'"{tool}" needs a signed-in user: this request carried no user identity. Sign in and call the tool again.',
        "rate_limited": f'Too many calls: this deployment\'s rate limit is reached, so "{tool}" did not run and nothing was charged. Try again in {retry_after if retry_after is not None else 60} seconds.',
        "platform_unavailable": f'Usage metering is unreachable right now, so "{tool}" did not run and nothing was charged. Try again in a moment.',
        "metering_misconfigured": f'This server\'s metering credentials were refused, so "{tool}" did not run and nothing was charged. The server\'s operator must fix its creditgate key.',
    }
    return messages.get(reason, f'"{tool}" was refused ({reason}).')


def _is_outage(err: CreditgateError) -> bool:
    return err.is_transient or err.code == INVALID_RESPONSE


def _is_context(value: Any) -> bool:
    # A framework's request context (FastMCP's Context, ...): not a tool argument, but where _meta lives.
    return type(value).__name__.endswith("Context") or hasattr(type(value), "request_context")


def _meta_of(context: Any) -> Any:
    try:
        request_context = context.request_context
    except Exception:  # FastMCP raises outside a request
        return None
    return getattr(request_context, "meta", None)


def _is_error_result(result: Any) -> bool:
    if isinstance(result, Mapping):
        return result.get("isError") is True
    return getattr(result, "isError", False) is True


def denial_result(denied: MeteringDenied) -> dict[str, Any]:
    """The MCP tool error (a ``CallToolResult`` as a dict) the TypeScript middleware returns for a refusal:
    ``isError``, the denial's sentence as text, ``_meta["io.creditgate/denial"]`` = ``{reason, tool_name,
    tier, message, ...}`` and, for a refusal money could lift (``insufficient_credits`` with billing
    available, ``budget_exceeded``), ``_meta["io.creditgate/payment_required"]`` = the service's
    ``payment_required`` exactly as it came (docs/client.md, "What the middleware puts in _meta").

    A framework that turns a tool's exception into an error keeps only the text; to send the ``_meta``
    too, catch ``MeteringDenied`` and return this (FastMCP: ``CallToolResult.model_validate(...)``)."""
    info: dict[str, Any] = {"reason": denied.reason, "tool_name": denied.tool_name, "tier": denied.tier, "message": denied.message}
    optional = {
        "upgrade_url": denied.upgrade_url,
        "credits_available": denied.credits_available,
        "retry_after_seconds": denied.retry_after_seconds,
        "budget_id": denied.budget_id,
        "resets_at": denied.resets_at,
    }
    info.update({k: v for k, v in optional.items() if v is not None})
    meta: dict[str, Any] = {META_DENIAL: info}
    if isinstance(denied.payment_required, Mapping):
        meta[META_PAYMENT_REQUIRED] = denied.payment_required
    return {"isError": True, "content": [{"type": "text", "text": denied.message}], "_meta": meta}


class MeteredCall:
    """One metered call: ``begin()`` checks (raising MeteringDenied), ``succeed()`` records,
    ``fail()`` releases. Thread-safe; each step runs at most once."""

    def __init__(
        self,
        client: Client,
        tool_name: str,
        *,
        args: Any = None,
        idempotency_key: Optional[str] = None,
        user_id: Optional[str] = None,
        deployment_id: Optional[str] = None,
        reserve: bool = True,
        on_outage: OnOutage = "fail_closed",
        metadata: Optional[Mapping[str, Any]] = None,
        upgrade_url: Optional[str] = None,
        on_event: Optional[Callable[[dict[str, Any]], None]] = None,
    ) -> None:
        if client.mode == "deployment":
            raise CreditgateError("CONFIGURATION_ERROR", "metering needs an API key or the service key, not deployment credentials")
        if on_outage not in ("fail_closed", "fail_open"):
            raise CreditgateError("CONFIGURATION_ERROR", f'on_outage must be "fail_closed" or "fail_open", got "{on_outage}"')
        self.client = client
        self.tool_name = tool_name
        self.mode = client.mode
        self.user_id = user_id
        self.deployment_id = deployment_id
        self.metadata: Optional[Mapping[str, Any]] = metadata
        self.invocation_id = invocation_id_for(tool_name, args, idempotency_key, user_id if self.mode == "service" else None)
        self.check: Optional[Union[StdioCheckResult, ServiceCheckResult]] = None
        self.reserved = False
        self.usage: Optional[RecordResult] = None
        self.released = False
        self._reserve = reserve
        self._on_outage = on_outage
        self._upgrade_url = upgrade_url
        self._on_event = on_event
        self._begun = threading.Event()
        self._allowed = False
        self._lock = threading.Lock()
        self._finished = False

    # ---- steps ----

    def begin(self) -> None:
        """Checks (with a reservation unless reserve=False); raises MeteringDenied when refused."""
        try:
            self._begin()
        finally:
            self._begun.set()

    def succeed(self) -> Optional[RecordResult]:
        """Records the usage. A record that fails is logged, not raised: the work is done."""
        if not self._finish():
            return self.usage
        return self._record()

    def fail(self) -> None:
        """The work failed or was cancelled: releases the reservation; nothing is recorded."""
        self._begun.wait(timeout=60)  # a cancelled caller may get here while begin() still runs
        if not self._finish() or not self.reserved:
            return
        try:
            self.client.release_reservation(self.invocation_id, deployment_id=self.deployment_id if self.mode == "service" else None)
            self.released = True
            self._emit("released")
        except Exception as err:
            # Not fatal: an unreleased reservation lapses by itself after 5 minutes.
            log.warning('could not release the reservation of "%s" (%s); it lapses in 5 minutes', self.tool_name, err)

    # ---- internals ----

    def _finish(self) -> bool:
        with self._lock:
            if self._finished or not self._allowed:
                return False
            self._finished = True
            return True

    def _deny(
        self,
        reason: str,
        tier: Optional[str] = None,
        available: Optional[int] = None,
        retry_after: Optional[int] = None,
        payment_required: Optional[Mapping[str, Any]] = None,
    ) -> MeteringDenied:
        wants_upgrade = reason in ("sandbox_tier", "mcp_disabled", "insufficient_credits")
        # A budget's refusal names the budget and when its window resets (the middleware's denial _meta has the same).
        budget = payment_required if reason == "budget_exceeded" and isinstance(payment_required, Mapping) else {}
        self._emit("denied", reason=reason)
        payment = payment_required if isinstance(payment_required, Mapping) else None
        return MeteringDenied(
            reason,
            self.tool_name,
            denial_message(reason, self.tool_name, tier, self._upgrade_url, retry_after, payment),
            tier=tier,
            upgrade_url=self._upgrade_url if wants_upgrade else None,
            credits_available=available,
            retry_after_seconds=retry_after,
            budget_id=budget.get("budget_id"),
            resets_at=budget.get("resets_at"),
            payment_required=payment,
        )

    def _begin(self) -> None:
        if self._allowed:
            raise CreditgateError("CONFIGURATION_ERROR", "a MeteredCall begins once")
        if self.mode == "service" and not self.user_id:
            raise self._deny("no_user")
        try:
            if self.mode == "service" and not self.deployment_id:
                resolved = self.client.service.resolve_deployment(cast(str, self.user_id))
                if not resolved["deployment_id"]:
                    raise self._deny("no_deployment_found", resolved.get("tier"))
                self.deployment_id = resolved["deployment_id"]
            try:
                check = self._send_check()
            except CreditgateError as err:
                if not (self._reserve and _is_refunded_invocation(err)):
                    raise
                # The key's call was paid and then refunded: running it again is a new call, paid as one
                # (docs/client.md), under a new id since the refunded one is done.
                self.invocation_id = uuid7()
                check = self._send_check()
            self.check = check
            if not check["allowed"]:
                if check.get("reason") == "deployment_not_found" and self.user_id:
                    self.client._resolved.delete(self.user_id)
                available = cast(Mapping[str, Any], check).get("credits_available")
                raise self._deny(check.get("reason") or "insufficient_credits", check.get("tier"), available, None, check.get("payment_required"))
            self.reserved = self._reserve
        except MeteringDenied:
            raise
        except CreditgateError as err:
            if err.code == "IDEMPOTENCY_KEY_REUSED":
                # A retried call whose first attempt was already recorded: it is paid for; run it
                # again and let the record replay the first answer (no second deduction).
                self.reserved = False
            elif err.code == "RATE_LIMITED":
                raise self._deny("rate_limited", retry_after=err.retry_after_seconds) from err
            elif _is_outage(err) and self._on_outage == "fail_open":
                log.warning('platform unreachable (%s); running "%s" unverified (fail_open)', err.message, self.tool_name)
                self._emit("unverified")
            elif _is_outage(err):
                log.warning('platform unreachable (%s); refusing "%s" (fail_closed)', err.message, self.tool_name)
                raise self._deny("platform_unavailable") from err
            else:
                log.error("metering refused this server's request: %s", err.message)
                raise self._deny("metering_misconfigured") from err
        self._allowed = True
        self._emit("allowed", reserved=self.reserved)

    def _send_check(self) -> Union[StdioCheckResult, ServiceCheckResult]:
        reservation: dict[str, Any] = {"reserve": True, "invocation_id": self.invocation_id} if self._reserve else {}
        if self.mode == "service":
            # The user is the call's end user: the check (and its hold, whose windows the record
            # inherits) is counted by end-user budgets as the record's mcp_user_id is (docs/budgets.md).
            if self.user_id and self.user_id != "*" and len(self.user_id) <= 200:
                reservation["end_user_id"] = self.user_id
            return self.client.service.check_entitlement(cast(str, self.deployment_id), self.tool_name, **reservation)
        return self.client.stdio.check_entitlement(self.tool_name, **reservation)

    def _send_record(self, metadata: Optional[Mapping[str, Any]]) -> RecordResult:
        if self.mode == "service":
            if not self.deployment_id:
                # fail_open ran the tool while even the user's deployment was unknown: resolve it now.
                self.deployment_id = self.client.service.resolve_deployment(cast(str, self.user_id))["deployment_id"]
                if not self.deployment_id:
                    raise CreditgateError("NO_DEPLOYMENT", f'user {self.user_id} has no deployment to record "{self.tool_name}" against')
            return self.client.service.record_usage(
                self.deployment_id, self.tool_name, mcp_user_id=self.user_id, invocation_id=self.invocation_id, metadata=metadata
            )
        return self.client.stdio.record_usage(self.tool_name, invocation_id=self.invocation_id, metadata=metadata)

    def _record(self) -> Optional[RecordResult]:
        metadata = self.metadata
        # The service refuses metadata over 16 KiB serialized (docs/metering.md): a record refused for it
        # would give the call away uncharged, so such metadata is dropped, not sent.
        if metadata is not None:
            try:
                too_big = not isinstance(metadata, Mapping) or len(json.dumps(dict(metadata), separators=(",", ":"), ensure_ascii=False).encode("utf-8")) > _METADATA_LIMIT_BYTES
            except (TypeError, ValueError):
                too_big = True
            if too_big:
                log.warning('the metadata of "%s" is not a JSON object of at most 16 KiB; recording it without metadata', self.tool_name)
                metadata = None
        try:
            try:
                result = self._send_record(metadata)
            except CreditgateError as err:
                # Metadata the service refused (400) must not cost the charge: the record goes again without it.
                if err.status != 400 or metadata is None:
                    raise
                log.warning('the service refused the metadata of "%s" (%s); recording it without metadata', self.tool_name, err.message)
                result = self._send_record(None)
        except Exception as err:
            self._emit("record_failed", error=err)
            log.error('usage of "%s" (%s) could not be recorded: %s', self.tool_name, self.invocation_id, err)
            return None
        self.usage = result
        self._emit("recorded", result=result)
        if not result["success"]:
            log.warning('usage of "%s" was not charged: %s', self.tool_name, result.get("error") or "unknown reason")
        return result

    def _emit(self, kind: str, **fields: Any) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event({"type": kind, "tool": self.tool_name, "invocation_id": self.invocation_id, **fields})
        except Exception:
            pass  # an observer's failure never changes a call's outcome


class Metered:
    """What ``metered(...)`` returns: a decorator, and (once) a sync or async context manager."""

    def __init__(
        self,
        client: Client,
        tool_name: Optional[str] = None,
        *,
        args: Any = None,
        idempotency_key: FromArgs = None,
        user_id: FromArgs = None,
        deployment_id: Optional[str] = None,
        reserve: bool = True,
        on_outage: OnOutage = "fail_closed",
        metadata: MetadataFromArgs = None,
        upgrade_url: Optional[str] = None,
        on_event: Optional[Callable[[dict[str, Any]], None]] = None,
    ) -> None:
        if not isinstance(client, Client):
            raise CreditgateError("CONFIGURATION_ERROR", "metered needs a creditgate.Client")
        self._client = client
        self._tool_name = tool_name
        self._args = args
        self._idempotency_key = idempotency_key
        self._user_id = user_id
        self._deployment_id = deployment_id
        self._reserve = reserve
        self._on_outage = on_outage
        self._metadata = metadata
        self._upgrade_url = upgrade_url
        self._on_event = on_event
        self._call: Optional[MeteredCall] = None

    def new_call(self, tool_name: str, arguments: Optional[Mapping[str, Any]] = None, args: Any = None) -> MeteredCall:
        """A MeteredCall for one invocation. ``arguments``: everything the function received by name
        (contexts included), for the option callables; ``args``: what is hashed into the id."""
        everything: Mapping[str, Any] = arguments if arguments is not None else (args if isinstance(args, Mapping) else {})
        key = self._idempotency_key(everything) if callable(self._idempotency_key) else self._idempotency_key
        if key is None:
            for value in everything.values():
                if _is_context(value):
                    key = idempotency_key_from_meta(_meta_of(value))
                    if key:
                        break
        user = self._user_id(everything) if callable(self._user_id) else self._user_id
        metadata = self._metadata(everything) if callable(self._metadata) else self._metadata
        return MeteredCall(
            self._client,
            tool_name,
            args=args,
            idempotency_key=key,
            user_id=user,
            deployment_id=self._deployment_id,
            reserve=self._reserve,
            on_outage=self._on_outage,
            metadata=metadata,
            upgrade_url=self._upgrade_url,
            on_event=self._on_event,
        )

    # ---- decorator ----

    def __call__(self, fn: F) -> F:
        tool: str = self._tool_name or str(getattr(fn, "__name__", "tool"))
        signature = inspect.signature(fn)

        def start(a: tuple[Any, ...], kw: dict[str, Any]) -> MeteredCall:
            try:
                bound = signature.bind(*a, **kw)
                arguments: dict[str, Any] = dict(bound.arguments)
            except TypeError:
                arguments = dict(kw)
            tool_args = {k: v for k, v in arguments.items() if not _is_context(v)}
            contexts = set(arguments) - set(tool_args)
            # A tool without parameters hashes as the TypeScript middleware's `undefined ?? null`.
            has_params = any(name not in contexts for name in signature.parameters)
            return self.new_call(tool, arguments, tool_args if has_params else None)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*a: Any, **kw: Any) -> Any:
                call = start(a, kw)
                await _begin_async(call)
                try:
                    result = await fn(*a, **kw)
                except BaseException:
                    await _fail_async(call)
                    raise
                if _is_error_result(result):
                    await _fail_async(call)
                else:
                    await asyncio.to_thread(call.succeed)
                return result

            wrapper: Callable[..., Any] = run_async
        else:

            @functools.wraps(fn)
            def run_sync(*a: Any, **kw: Any) -> Any:
                call = start(a, kw)
                call.begin()
                try:
                    result = fn(*a, **kw)
                except BaseException:  # KeyboardInterrupt and SystemExit release too
                    call.fail()
                    raise
                if _is_error_result(result):
                    call.fail()
                else:
                    call.succeed()
                return result

            wrapper = run_sync
        _resolve_annotations(fn, wrapper)
        return cast(F, wrapper)

    # ---- context manager ----

    def _open(self) -> MeteredCall:
        if self._call is not None:
            raise CreditgateError("CONFIGURATION_ERROR", "a metered(...) context manager is used once; call metered(...) again")
        tool_name = self._tool_name
        if not tool_name:
            raise CreditgateError("CONFIGURATION_ERROR", "metered(...) as a context manager needs the tool name")
        self._call = self.new_call(tool_name, None, self._args)
        return self._call

    def __enter__(self) -> MeteredCall:
        call = self._open()
        call.begin()
        return call

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        call = cast(MeteredCall, self._call)
        if exc_type is None:
            call.succeed()
        else:
            call.fail()
        return False

    async def __aenter__(self) -> MeteredCall:
        call = self._open()
        await _begin_async(call)
        return call

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        call = cast(MeteredCall, self._call)
        if exc_type is None:
            await asyncio.to_thread(call.succeed)
        else:
            await _fail_async(call)
        return False


async def _begin_async(call: MeteredCall) -> None:
    # The client is synchronous: its calls run in a worker thread so the event loop keeps serving.
    future = asyncio.ensure_future(asyncio.to_thread(call.begin))
    try:
        await asyncio.shield(future)
    except asyncio.CancelledError:
        # The check may still complete and hold credits: release once it has.
        asyncio.get_running_loop().run_in_executor(None, call.fail)
        raise


async def _fail_async(call: MeteredCall) -> None:
    # Shielded: a second cancellation must not leave the reservation held (the thread finishes anyway).
    await asyncio.shield(asyncio.to_thread(call.fail))


def _resolve_annotations(fn: Callable[..., Any], wrapper: Callable[..., Any]) -> None:
    """Frameworks read a tool's parameters from its signature (functools.wraps makes them follow
    __wrapped__) and evaluate string annotations in the wrapper's module; hand them evaluated ones."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
        signature = inspect.signature(fn)
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
        wrapper.__signature__ = signature.replace(  # type: ignore[attr-defined]
            parameters=params, return_annotation=hints.get("return", signature.return_annotation)
        )
        wrapper.__annotations__ = hints
    except Exception:
        pass  # unresolvable annotations stay as written


def metered(
    client: Client,
    tool_name: Optional[str] = None,
    *,
    args: Any = None,
    idempotency_key: FromArgs = None,
    user_id: FromArgs = None,
    deployment_id: Optional[str] = None,
    reserve: bool = True,
    on_outage: OnOutage = "fail_closed",
    metadata: MetadataFromArgs = None,
    upgrade_url: Optional[str] = None,
    on_event: Optional[Callable[[dict[str, Any]], None]] = None,
) -> Metered:
    """Meters a tool call against creditgate: check with a reservation → run → record on success;
    release on an exception, an ``isError`` result or a cancelled call. A refusal raises
    MeteringDenied and the function does not run.

    As a decorator (sync or async; ``tool_name`` defaults to the function's name)::

        @mcp.tool()
        @metered(cg)
        async def search(q: str, ctx: Context) -> str: ...

    As a context manager (``tool_name`` required; ``args`` are hashed into the invocation id)::

        with metered(cg, "search", args={"q": q}, idempotency_key=key) as call:
            ...  # call.invocation_id, call.check; call.usage after the block

    ``idempotency_key``: a value or a function of the call's arguments; by default the key a client
    sent in the tools/call ``_meta`` (read from a framework context argument such as FastMCP's
    ``ctx``). With a key the invocation id is the TypeScript middleware's, so a retried call deducts
    once; without one every call is new. ``user_id`` (service mode, required there): a value or a
    function of the arguments. ``on_outage``: ``fail_closed`` (default) refuses with
    ``platform_unavailable``; ``fail_open`` runs unverified and records afterwards.
    """
    return Metered(
        client,
        tool_name,
        args=args,
        idempotency_key=idempotency_key,
        user_id=user_id,
        deployment_id=deployment_id,
        reserve=reserve,
        on_outage=on_outage,
        metadata=metadata,
        upgrade_url=upgrade_url,
        on_event=on_event,
    )


# ---- prices up front: tools/list ----

META_PRICING = "io.creditgate/pricing"
# The notification a server sends when a price its clients were shown changed.
TOOLS_LIST_CHANGED: Mapping[str, Any] = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
# The price list is revalidated at most this often (seconds): a conditional GET, a 304 carries no body.
PRICING_REVALIDATE = 5 * 60.0
# After a failed first load (no prices known yet), the next listing may try again this soon.
_FIRST_LOAD_RETRY = 30.0
# A tool without a row in the tool → action map is metered as this action (docs/metering.md).
DEFAULT_ACTION = "platform_basic"

ToolFilter = Union[Iterable[str], Callable[[str], bool], None]


def _matches(selection: ToolFilter, name: str) -> bool:
    if selection is None:
        return False
    if callable(selection):
        return bool(selection(name))
    return name in selection


class ToolPricing:
    """Prices up front for a Python MCP server (the TypeScript middleware's, docs/client.md, Prices in
    tools/list), on plain dicts: ``tools_list(result)`` adds ``_meta["io.creditgate/pricing"] =
    {"credits", "action"}`` to every metered tool of a ``tools/list`` result; the cost table is
    revalidated with If-None-Match at most every 5 minutes (on a listing, on ``tool_called(result)``
    with a ``CallToolResult``, or on the ``start()`` timer), and ``notify`` is called with the
    ``notifications/tools/list_changed`` message when a price the clients were shown changed.

    ``tools``: the metered tools' names (or a predicate); by default every listed tool. ``exclude``:
    names (or a predicate) that are free, as the middleware's option. ``now``: the clock in seconds
    (``time.monotonic``). Thread-safe; one request at a time. An unreachable platform keeps the last
    prices (a listing before the first load goes out without, and ``notify`` follows once they come).

        pricing = ToolPricing(cg, notify=lambda message: transport.send(message))
        result = pricing.tools_list({"tools": [...]})       # the server's tools/list answer
        result = pricing.tool_called(call_tool_result)      # after each tools/call
    """

    def __init__(
        self,
        client: Client,
        *,
        tools: ToolFilter = None,
        exclude: ToolFilter = None,
        notify: Optional[Callable[[Mapping[str, Any]], None]] = None,
        now: Optional[Callable[[], float]] = None,
    ) -> None:
        if not isinstance(client, Client):
            raise CreditgateError("CONFIGURATION_ERROR", "ToolPricing needs a creditgate.Client")
        if client.mode == "deployment":
            raise CreditgateError("CONFIGURATION_ERROR", "prices need an API key (scope read) or the service key, not deployment credentials")
        self._client = client
        self._tools = tools if tools is None or callable(tools) else frozenset(tools)
        self._exclude = exclude if exclude is None or callable(exclude) else frozenset(exclude)
        self._notify = notify
        self._now = now or time.monotonic
        self._lock = threading.Lock()
        self._credits: Optional[dict[str, int]] = None
        self._actions: dict[str, str] = {}
        self._etag: Optional[str] = None
        self._checked_at: Optional[float] = None
        self._loading = False
        self._listed: list[str] = []
        self._shown: Optional[str] = None
        self._timer: Optional[threading.Thread] = None
        self._stopping = threading.Event()

    def is_metered(self, tool_name: str) -> bool:
        """Whether ``tools_list`` prices this tool: one of ``tools`` (every tool by default), not excluded."""
        included = self._tools is None or _matches(self._tools, tool_name)
        return included and not _matches(self._exclude, tool_name)

    def price_of(self, tool_name: str) -> Optional[ToolPrice]:
        """The tool's price, or None while no price list is known."""
        with self._lock:
            return self._price(tool_name)

    def _price(self, tool_name: str) -> Optional[ToolPrice]:
        if self._credits is None:
            return None
        action = self._actions.get(tool_name, DEFAULT_ACTION)
        credits = self._credits.get(action)
        return None if credits is None else ToolPrice(credits=credits, action=action)

    def tools_list(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a ``tools/list`` result with each metered tool's price in its ``_meta``
        (revalidated first when due); other tools, and a tool's own ``_meta`` keys, stay as they are."""
        tools = result.get("tools")
        if not isinstance(tools, list):
            return dict(result)
        names = [t["name"] for t in tools if isinstance(t, Mapping) and isinstance(t.get("name"), str)]
        with self._lock:
            self._listed = sorted({name for name in names if self.is_metered(name)})
        self.revalidate_if_due()
        priced: list[Any] = []
        with self._lock:
            self._shown = self._signature()
            for tool in tools:
                name = tool.get("name") if isinstance(tool, Mapping) else None
                price = self._price(name) if isinstance(name, str) and self.is_metered(name) else None
                if price is None:
                    priced.append(tool)
                    continue
                meta = tool.get("_meta")
                priced.append({**tool, "_meta": {**(meta if isinstance(meta, Mapping) else {}), META_PRICING: dict(price)}})
        return {**result, "tools": priced}

    def tool_called(self, result: R) -> R:
        """After a ``tools/call``: revalidates when due (so a client that listed once and only calls
        learns of a change) and returns the ``CallToolResult`` unchanged."""
        if self._shown is not None:
            self.revalidate_if_due()
        return result

    def revalidate_if_due(self) -> bool:
        """Revalidates when 5 minutes have passed since the last request (30 s after a failed first
        load); True when a price clients were shown changed (``notify`` was called). Never raises."""
        with self._lock:
            if self._loading:
                return False
            wait = PRICING_REVALIDATE if self._credits is not None or self._checked_at is None else _FIRST_LOAD_RETRY
            if self._checked_at is not None and self._now() - self._checked_at < wait:
                return False
            self._loading = True
            self._checked_at = self._now()
            etag = self._etag if self._credits is not None else None
        try:
            return self._revalidate(etag)
        finally:
            with self._lock:
                self._loading = False

    def _revalidate(self, etag: Optional[str]) -> bool:
        try:
            answer = self._client.credit_costs_if_changed(etag)
        except Exception as err:
            log.warning("could not load the credit costs for tools/list (%s); %s", err, "keeping the last prices" if self._credits is not None else "listing tools without prices")
            return False
        if answer.not_modified or answer.costs is None:
            return False
        with self._lock:
            self._credits = {c["action"]: c["credits"] for c in answer.costs["costs"]}
            self._actions = {t["tool_name"]: t["action"] for t in answer.costs.get("tools", [])}
            self._etag = answer.etag
            now = self._signature()
            changed = self._shown is not None and now != self._shown
            if changed:
                self._shown = now
        if changed:
            log.info("credit costs changed: sending notifications/tools/list_changed")
            if self._notify is not None:
                try:
                    self._notify(dict(TOOLS_LIST_CHANGED))
                except Exception as err:
                    log.warning("could not send notifications/tools/list_changed (%s)", err)
        return changed

    def _signature(self) -> str:
        return repr([(name, self._price(name)) for name in self._listed])

    def start(self, every: float = 30.0) -> None:
        """Looks every ``every`` seconds (in a daemon thread) whether a revalidation is due, so clients
        hear of a change without listing or calling. ``stop()`` ends it."""
        with self._lock:
            if self._timer is not None:
                return
            self._stopping.clear()
            self._timer = threading.Thread(target=self._tick, args=(every,), name="creditgate-pricing", daemon=True)
        self._timer.start()

    def _tick(self, every: float) -> None:
        while not self._stopping.wait(every):
            if self._shown is not None:
                self.revalidate_if_due()

    def stop(self) -> None:
        """Ends the ``start()`` timer (a revalidation in progress finishes)."""
        self._stopping.set()
        timer, self._timer = self._timer, None
        if timer is not None and timer is not threading.current_thread():
            timer.join(timeout=5)


__all__ = [
    "DEFAULT_ACTION",
    "META_DENIAL",
    "META_PAYMENT_REQUIRED",
    "META_PRICING",
    "PRICING_REVALIDATE",
    "TOOLS_LIST_CHANGED",
    "Metered",
    "MeteredCall",
    "ToolPricing",
    "denial_message",
    "denial_result",
    "metered",
]
