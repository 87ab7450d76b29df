"""HTTP over urllib.request: one JSON call, its error mapping, and the retry rules of the TypeScript client."""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import random as _random
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Union

from .errors import (
    CONFIGURATION_ERROR,
    INVALID_RESPONSE,
    NETWORK_ERROR,
    TIMEOUT,
    CreditgateError,
    is_retryable_status,
)

QueryValue = Union[str, int, bool, None]


@dataclass(frozen=True)
class Answer:
    data: Any
    status: int
    headers: Mapping[str, str]
    # The service answered a repeated idempotency key with the first answer.
    replayed: bool


def parse_base_url(raw: object) -> str:
    """Normalizes and checks the base URL once, at creation, so a typo fails early with a clear message."""
    if not isinstance(raw, str) or raw.strip() == "":
        raise CreditgateError(CONFIGURATION_ERROR, 'base_url is required (e.g. "https://creditgate.example.com")')
    parts = urllib.parse.urlsplit(raw.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CreditgateError(CONFIGURATION_ERROR, f'base_url "{raw}" must be an http or https URL')
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def should_retry_header(value: Optional[str]) -> Optional[bool]:
    """The ``x-should-retry`` header: ``true``/``false`` (any case, trimmed); anything else is as if absent."""
    word = None if value is None else value.strip().lower()
    return True if word == "true" else False if word == "false" else None


def retry_after_seconds(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Retry-After is whole seconds or an HTTP date (RFC 9110 §10.2.3); the wait in seconds."""
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if re.fullmatch(r"\d+", text):
        return float(int(text))
    try:
        at = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if at is None:
        return None
    return max(0.0, at.timestamp() - (time.time() if now is None else now))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect is answered as it is (like fetch's redirect: 'manual'): credentials never follow it.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _positive(value: float, name: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise CreditgateError(CONFIGURATION_ERROR, f"{name} must be a positive number, got {value!r}")
    return float(value)


def _non_negative(value: float, name: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise CreditgateError(CONFIGURATION_ERROR, f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def _snippet(text: str) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    if flat == "":
        return "(empty body)"
    return flat[:120] + "…" if len(flat) > 120 else flat


class Transport:
    """Sends one call, retrying it (when it is idempotent) on network errors, timeouts, 408, 429,
    500, 502, 503, 504 and 409 IDEMPOTENCY_IN_PROGRESS: the answer's Retry-After when given, else
    full jitter over retry_base × 2^attempt, each capped at max_retry_delay; a Retry-After longer
    than the cap is not waited for (the error is raised with retry_after_seconds)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        retries: int = 2,
        retry_base: float = 0.25,
        max_retry_delay: float = 10.0,
        sleep: Optional[Callable[[float], None]] = None,
        random: Optional[Callable[[], float]] = None,
        user_agent: str = "creditgate-python",
    ) -> None:
        self.base_url = parse_base_url(base_url)
        self.timeout = _positive(timeout, "timeout")
        self.retries = int(_non_negative(retries, "retries"))
        self.retry_base = _positive(retry_base, "retry_base")
        self.max_retry_delay = _non_negative(max_retry_delay, "max_retry_delay")
        self._sleep = sleep or time.sleep
        self._random = random or _random.random
        self._user_agent = user_agent
        self._opener = urllib.request.build_opener(_NoRedirect())

    def with_timeout(self, timeout: float) -> "Transport":
        return Transport(
            self.base_url,
            timeout=timeout,
            retries=self.retries,
            retry_base=self.retry_base,
            max_retry_delay=self.max_retry_delay,
            sleep=self._sleep,
            random=self._random,
            user_agent=self._user_agent,
        )

    def url(self, path: str, query: Optional[Mapping[str, QueryValue]] = None) -> str:
        url = urllib.parse.urljoin(self.base_url, path.lstrip("/"))
        pairs = []
        for key, value in (query or {}).items():
            if value is None:
                continue
            pairs.append((key, ("true" if value else "false") if isinstance(value, bool) else str(value)))
        return url + ("?" + urllib.parse.urlencode(pairs) if pairs else "")

    def call(
        self,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str],
        body: Any = None,
        query: Optional[Mapping[str, QueryValue]] = None,
        idempotent: bool,
    ) -> Answer:
        url = self.url(path, query)
        attempts = self.retries + 1 if idempotent else 1
        attempt = 0
        while True:
            try:
                return self._once(method, url, headers, body)
            except CreditgateError as error:
                if attempt + 1 >= attempts or not error.is_transient:
                    raise
                asked = error.retry_after_seconds
                if asked is not None and asked > self.max_retry_delay:
                    raise
                backoff = self._random() * min(self.max_retry_delay, self.retry_base * 2**attempt)
                self._sleep(float(asked) if asked is not None else backoff)
                attempt += 1

    def _once(self, method: str, url: str, headers: Mapping[str, str], body: Any) -> Answer:
        sent = {"accept": "application/json", "user-agent": self._user_agent, **headers}
        data = None
        if body is not None:
            sent["content-type"] = "application/json"
            data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(url, data=data, headers=sent, method=method)
        path = urllib.parse.urlsplit(url).path
        origin = urllib.parse.urlsplit(self.base_url)
        where = f"{origin.scheme}://{origin.netloc}"
        try:
            try:
                response = self._opener.open(request, timeout=self.timeout)
            except urllib.error.HTTPError as http_error:
                response = http_error  # a non-2xx answer: read it like any other
            with response:
                status = int(response.status if response.status is not None else response.getcode())
                answer_headers = {k.lower(): v for k, v in response.headers.items()}
                raw = response.read()
        except (socket.timeout, TimeoutError) as err:
            raise CreditgateError(TIMEOUT, f"creditgate at {where} did not answer {method} {path} within {self.timeout:g} s") from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, (socket.timeout, TimeoutError)):
                raise CreditgateError(TIMEOUT, f"creditgate at {where} did not answer {method} {path} within {self.timeout:g} s") from err
            raise CreditgateError(NETWORK_ERROR, f"cannot reach creditgate at {where} ({err.reason})") from err
        except (http.client.HTTPException, OSError) as err:
            raise CreditgateError(NETWORK_ERROR, f"cannot reach creditgate at {where} ({type(err).__name__}: {err})") from err

        # A conditional read whose representation is unchanged: no body, by design (RFC 9110 §15.4.5).
        if status == 304 and any(name.lower() == "if-none-match" for name in headers):
            return Answer(None, status, answer_headers, False)
        text = raw.decode("utf-8", errors="replace")
        parsed: Any = None
        if text != "":
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
        wait = retry_after_seconds(answer_headers.get("retry-after"))
        wait_seconds = None if wait is None else int(math.ceil(wait))
        should_retry = should_retry_header(answer_headers.get("x-should-retry"))
        if not isinstance(parsed, dict):
            kind = answer_headers.get("content-type", "no content type")
            raise CreditgateError(
                INVALID_RESPONSE,
                f"expected JSON from creditgate at {where}{path}, got {status} {kind}: {_snippet(text)}",
                status=status,
                retry_after_seconds=wait_seconds,
                should_retry=should_retry,
                body=text,
            )
        if 200 <= status < 300:
            return Answer(parsed, status, answer_headers, answer_headers.get("idempotent-replayed") == "true")
        raise error_from_body(parsed, status, wait_seconds, f"{method} {path}", should_retry=should_retry)


def _int_or_none(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def error_from_body(
    body: Mapping[str, Any], status: int, retry_after: Optional[int], what: str, *, should_retry: Optional[bool] = None
) -> CreditgateError:
    """The two error shapes (docs/openapi.md, Shapes): flat on /api/v1 (``{error, code, message, ...}``),
    and the application API's envelope (``{success: false, error: {code, message}, details: {...}}``),
    whose details hold what the flat shape has beside its message (``fields``, ...)."""

    def text(value: Any) -> Optional[str]:
        return value if isinstance(value, str) else None

    envelope = body.get("error") if body.get("success") is False and isinstance(body.get("error"), Mapping) else None
    flat: Mapping[str, Any] = body
    if envelope is not None:
        details = body.get("details")
        flat = {**(details if isinstance(details, Mapping) else {}), "code": envelope.get("code"), "message": envelope.get("message")}
    code = text(flat.get("code"))
    if code is None:
        code = "RATE_LIMITED" if status == 429 else "SERVICE_UNAVAILABLE" if is_retryable_status(status) else f"HTTP_{status}"
    # The webhook proxy speaks camelCase (docs/webhooks.md, The proxy); the rest of the API snake_case.
    required = flat.get("creditsRequired", flat.get("credits_required"))
    available = flat.get("creditsAvailable", flat.get("credits_available"))
    fields = flat.get("fields")
    return CreditgateError(
        code,
        text(flat.get("message")) or f"{what} answered {status}",
        status=status,
        error=None if envelope is not None else text(body.get("error")),
        credits_required=_int_or_none(required),
        credits_available=_int_or_none(available),
        retry_after_seconds=retry_after,
        should_retry=should_retry,
        upgrade_url=text(flat.get("upgrade_url")),
        request_id=text(flat.get("request_id")),
        fields=fields if isinstance(fields, list) else None,
        body=dict(body),
        budget_id=text(flat.get("budget_id", flat.get("budgetId"))),
        resets_at=text(flat.get("resets_at", flat.get("resetsAt"))),
    )
