"""Retries, timeouts and answers that are not creditgate's, against stand-in servers (no live service needed)."""

from __future__ import annotations

import email.utils
import socket
import time
import unittest

from _support import Sleeps, StandIn, json_reply

from creditgate import Client, CreditgateError
from creditgate.errors import INVALID_RESPONSE
from creditgate._transport import Transport, retry_after_seconds

QUOTA = {"creditsAvailable": 5, "creditsPerWebhook": 1, "webhooksAvailable": 5, "periodEnds": "2026-02-01T00:00:00.000Z"}


def client(url: str, sleeps: Sleeps, **options: object) -> Client:
    return Client(deployment_id="d", deployment_secret="s", base_url=url, sleep=sleeps, random=lambda: 0.5, **options)  # type: ignore[arg-type]


class RetryTest(unittest.TestCase):
    def stand_in(self, replies: list) -> StandIn:  # type: ignore[type-arg]
        server = StandIn(replies)
        self.addCleanup(server.close)
        return server

    def test_503_with_retry_after_then_200(self) -> None:
        server = self.stand_in([json_reply(503, {"error": "unavailable", "code": "SERVICE_UNAVAILABLE", "message": "busy"}, {"Retry-After": "2"}), json_reply(200, QUOTA)])
        sleeps = Sleeps()
        self.assertEqual(client(server.url, sleeps).webhooks.quota(), QUOTA)
        self.assertEqual(sleeps.waits, [2.0])
        self.assertEqual(len(server.requests), 2)

    def test_429_with_an_http_date_retry_after_then_200(self) -> None:
        when = email.utils.formatdate(time.time() + 3, usegmt=True)
        server = self.stand_in([json_reply(429, {"error": "rate_limit_exceeded", "message": "wait"}, {"Retry-After": when}), json_reply(200, QUOTA)])
        sleeps = Sleeps()
        self.assertEqual(client(server.url, sleeps).webhooks.quota()["creditsAvailable"], 5)
        self.assertEqual(len(sleeps.waits), 1)
        self.assertTrue(1 <= sleeps.waits[0] <= 4, sleeps.waits)

    def test_backoff_is_full_jitter_over_base_times_two_to_the_attempt(self) -> None:
        busy = json_reply(502, {"error": "bad_gateway", "code": "BAD_GATEWAY", "message": "x"})
        server = self.stand_in([busy, busy, busy])
        sleeps = Sleeps()
        with self.assertRaises(CreditgateError) as caught:
            client(server.url, sleeps, retries=2, retry_base=1.0).webhooks.quota()
        self.assertEqual((caught.exception.code, caught.exception.status), ("BAD_GATEWAY", 502))
        self.assertEqual(sleeps.waits, [0.5, 1.0])  # random() = 0.5 × 1 s × 2^attempt
        self.assertEqual(len(server.requests), 3)

    def test_a_retry_after_beyond_the_cap_is_not_waited_for(self) -> None:
        server = self.stand_in([json_reply(429, {"error": "rate_limit_exceeded", "message": "wait"}, {"Retry-After": "60"})])
        sleeps = Sleeps()
        with self.assertRaises(CreditgateError) as caught:
            client(server.url, sleeps).webhooks.quota()
        self.assertEqual((caught.exception.code, caught.exception.status, caught.exception.retry_after_seconds), ("RATE_LIMITED", 429, 60))
        self.assertEqual(sleeps.waits, [])

    def test_x_should_retry_false_is_tried_once_whatever_the_status_and_retry_after(self) -> None:
        refusal = {"error": "quota_exceeded", "code": "AI_QUOTA_EXCEEDED", "message": "used up", "resets_at": "2026-02-01T00:00:00.000Z"}
        server = self.stand_in([json_reply(429, refusal, {"Retry-After": "1", "x-should-retry": "false"}), json_reply(200, QUOTA)])
        sleeps = Sleeps()
        with self.assertRaises(CreditgateError) as caught:
            client(server.url, sleeps).webhooks.quota()
        err = caught.exception
        self.assertEqual((err.code, err.status, err.retry_after_seconds, err.should_retry, err.is_transient), ("AI_QUOTA_EXCEEDED", 429, 1, False, False))
        self.assertEqual((len(server.requests), sleeps.waits), (1, []))
        # Not JSON (a proxy's page) but still told not to retry: the header is read there too.
        page = self.stand_in([(503, {"content-type": "text/html", "x-should-retry": "False"}, b"<html/>"), json_reply(200, QUOTA)])
        with self.assertRaises(CreditgateError) as caught:
            client(page.url, Sleeps()).webhooks.quota()
        self.assertEqual((caught.exception.code, caught.exception.should_retry, caught.exception.is_transient), (INVALID_RESPONSE, False, False))
        self.assertEqual(len(page.requests), 1)

    def test_without_x_should_retry_false_a_429_is_retried_and_true_changes_nothing(self) -> None:
        for extra in ({}, {"x-should-retry": "true"}):
            server = self.stand_in([json_reply(429, {"error": "rate_limit_exceeded", "code": "RATE_LIMITED", "message": "wait"}, {"Retry-After": "1", **extra}), json_reply(200, QUOTA)])
            sleeps = Sleeps()
            self.assertEqual(client(server.url, sleeps).webhooks.quota(), QUOTA)
            self.assertEqual((sleeps.waits, len(server.requests)), ([1.0], 2))
        invalid = self.stand_in([json_reply(400, {"error": "invalid_request", "code": "INVALID_REQUEST", "message": "no"}, {"x-should-retry": "true"}), json_reply(200, QUOTA)])
        with self.assertRaises(CreditgateError) as caught:
            client(invalid.url, Sleeps()).webhooks.quota()
        self.assertEqual((caught.exception.status, caught.exception.should_retry, caught.exception.is_transient), (400, True, False))
        self.assertEqual(len(invalid.requests), 1)

    def test_409_in_progress_is_retried_and_other_4xx_are_not(self) -> None:
        server = self.stand_in([json_reply(409, {"error": "idempotency_in_progress", "code": "IDEMPOTENCY_IN_PROGRESS", "message": "running"}), json_reply(200, QUOTA)])
        self.assertEqual(client(server.url, Sleeps()).webhooks.quota(), QUOTA)
        other = self.stand_in([json_reply(400, {"error": "invalid_request", "code": "INVALID_REQUEST", "message": "bad", "fields": [{"field": "url", "message": "must be a URL"}]})])
        with self.assertRaises(CreditgateError) as caught:
            client(other.url, Sleeps()).webhooks.quota()
        self.assertEqual(caught.exception.fields, [{"field": "url", "message": "must be a URL"}])
        self.assertEqual(len(other.requests), 1)

    def test_a_call_that_is_not_idempotent_is_sent_once(self) -> None:
        server = self.stand_in([json_reply(503, {"error": "x", "code": "SERVICE_UNAVAILABLE", "message": "x"}, {"Retry-After": "1"}), json_reply(200, {})])
        transport = Transport(server.url, sleep=Sleeps())
        with self.assertRaises(CreditgateError):
            transport.call("POST", "/x", headers={}, body={}, idempotent=False)
        self.assertEqual(len(server.requests), 1)

    def test_connection_refused_is_a_retried_network_error(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        sleeps = Sleeps()
        with self.assertRaises(CreditgateError) as caught:
            client(f"http://127.0.0.1:{port}", sleeps).webhooks.quota()
        self.assertEqual((caught.exception.code, caught.exception.status), ("NETWORK_ERROR", None))
        self.assertTrue(caught.exception.is_transient)
        self.assertEqual(len(sleeps.waits), 2)

    def test_timeout(self) -> None:
        server = StandIn(handler=lambda s, h, b: (time.sleep(0.6), json_reply(200, QUOTA))[1])
        self.addCleanup(server.close)
        with self.assertRaises(CreditgateError) as caught:
            client(server.url, Sleeps(), timeout=0.2, retries=0).webhooks.quota()
        self.assertEqual(caught.exception.code, "TIMEOUT")

    def test_an_answer_that_is_not_json_is_invalid_response(self) -> None:
        server = self.stand_in([(502, {"content-type": "text/html"}, b"<html><body>Bad gateway</body></html>")])
        with self.assertRaises(CreditgateError) as caught:
            client(server.url, Sleeps(), retries=0).webhooks.quota()
        self.assertEqual((caught.exception.code, caught.exception.status), ("INVALID_RESPONSE", 502))
        self.assertIn("text/html", caught.exception.message)
        self.assertIn("Bad gateway", caught.exception.message)

    def test_redirects_are_not_followed(self) -> None:
        server = self.stand_in([(307, {"location": "http://127.0.0.1:9/elsewhere"}, b"")])
        with self.assertRaises(CreditgateError) as caught:
            client(server.url, Sleeps(), retries=0).webhooks.quota()
        self.assertEqual((caught.exception.code, caught.exception.status), ("INVALID_RESPONSE", 307))
        self.assertEqual(len(server.requests), 1)

    def test_retry_after_parsing(self) -> None:
        self.assertEqual(retry_after_seconds("7"), 7.0)
        self.assertIsNone(retry_after_seconds(""))
        self.assertIsNone(retry_after_seconds("soon"))
        self.assertEqual(retry_after_seconds("Thu, 01 Jan 2026 00:00:10 GMT", now=1767225600.0), 10.0)

    def test_configuration_errors(self) -> None:
        for options in ({"base_url": "ftp://x"}, {"base_url": ""}, {"base_url": "http://x", "timeout": 0}, {"base_url": "http://x", "retries": -1}):
            with self.assertRaises(CreditgateError) as caught:
                Client(api_key="cg_x", **options)  # type: ignore[arg-type]
            self.assertEqual(caught.exception.code, "CONFIGURATION_ERROR")
        with self.assertRaises(CreditgateError) as caught:
            Client(base_url="http://x", api_key=" ")
        self.assertEqual(caught.exception.code, "CONFIGURATION_ERROR")


if __name__ == "__main__":
    unittest.main()
