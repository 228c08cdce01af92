#!/usr/bin/env python3
"""An unmodified discord.py 2.x bot that bursts concurrent sends through a
gatewayd node's REST edge, with the real rate limits on (5 sends per 5 s
per channel, 50 requests per second per bot).

The only change from a bot written for Discord is `point_at()` (the base
URLs), shared with bot.py. Once on_ready fired it sends `--per` messages to
each channel of `--channels` ALL AT ONCE (one `asyncio.gather` of every
`channel.send`): discord.py must pace them from the rate-limit headers
alone (its `Ratelimit` per bucket hash and channel), so no request of it
may ever get a 429. It then waits until every message the REST answers
named came back over its own gateway session as MESSAGE_CREATE (on_message),
and a second more for a late duplicate.

What counts as a 429, in discord.py's own reporting:
  - its WARNING "We are being rate limited. ... responded with 429";
  - its DEBUG record of every response ("%s %s with %s has returned %s")
    with the status 429;
  - every response status its aiohttp session saw (`http_trace`, the
    Client option discord.py offers for that).

Usage (run by tests/rest_bursts.rs):

    GATEWAYD_TOKEN=... python burst_bot.py --addr HOST:PORT --channels ID,ID --per N

Prints "READY" once on_ready fired, and a JSON summary as the last stdout
line; exit status 0 when every send succeeded, no 429 was seen, and every
sent message was seen exactly once.
"""

import argparse
import asyncio
import collections
import json
import logging
import os
import re
import sys
import time
import traceback

import aiohttp
import discord

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bot import ErrorRecords, point_at  # noqa: E402


class HttpRecords(logging.Handler):
    """discord.py's own logging of its REST traffic (logger discord.http):
    each 429 it met ("We are being rate limited", and the status of every
    response at DEBUG), and how often it paced itself before a request."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.rate_limited: list[str] = []
        self.responses_429: list[str] = []
        self.preemptive = 0

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        # A whole-word 429: message and channel ids may hold those digits.
        if record.levelno >= logging.WARNING and ("rate limited" in msg.lower() or re.search(r"\b429\b", msg)):
            self.rate_limited.append(f"{record.name}: {msg}")
        # '%s %s with %s has returned %s': (method, url, data, status)
        fmt = str(record.msg)
        if "has returned" in fmt and record.args and record.args[-1] == 429:
            self.responses_429.append(msg)
        if "Pre-emptively rate limiting" in fmt:
            self.preemptive += 1


class BurstBot(discord.Client):
    def __init__(self, channels: list[int], per: int, trace: aiohttp.TraceConfig) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, http_trace=trace)
        self.channels = channels
        self.per = per
        self.s: dict = {"sent": [], "send_failures": [], "created": []}
        self.sent_ids: set[str] = set()
        self.burst_done = asyncio.Event()
        self.all_seen = asyncio.Event()
        self.failure: str | None = None
        self.burst_task: asyncio.Task | None = None

    async def on_ready(self) -> None:
        print("READY", flush=True)
        if self.burst_task is None:
            self.burst_task = asyncio.create_task(self.burst())

    async def burst(self) -> None:
        try:
            targets = []
            for cid in self.channels:
                channel = self.get_channel(cid)
                if channel is None:
                    raise RuntimeError(f"channel {cid} is not in discord.py's cache (GUILD_CREATE?)")
                targets += [(channel, i) for i in range(self.per)]
            t0 = time.monotonic()
            # When each answer came (s after the burst began): how discord.py paced.
            at: dict[int, float] = {}

            async def send(k: int, ch, i: int) -> discord.Message:
                m = await ch.send(f"burst {ch.id} {i}")
                at[k] = round(time.monotonic() - t0, 3)
                return m

            results = await asyncio.gather(*(send(k, ch, i) for k, (ch, i) in enumerate(targets)), return_exceptions=True)
            self.s["burst_s"] = round(time.monotonic() - t0, 3)
            for k, ((ch, i), r) in enumerate(zip(targets, results)):
                if isinstance(r, BaseException):
                    self.s["send_failures"].append(f"{ch.id} {i}: {r!r}")
                else:
                    self.s["sent"].append({"id": str(r.id), "channel": str(ch.id), "content": r.content, "at_s": at.get(k)})
                    self.sent_ids.add(str(r.id))
        except Exception:  # noqa: BLE001 - the summary says what failed
            self.failure = traceback.format_exc()
        self.burst_done.set()
        self._check()

    async def on_message(self, message: discord.Message) -> None:
        if message.author.id != self.user.id:
            return
        self.s["created"].append(str(message.id))
        self._check()

    def _check(self) -> None:
        if self.burst_done.is_set() and self.sent_ids <= set(self.s["created"]):
            self.all_seen.set()


async def run(args, token: str, errors: ErrorRecords, http: HttpRecords) -> dict:
    statuses: collections.Counter = collections.Counter()
    trace = aiohttp.TraceConfig()

    async def on_request_end(_session, _ctx, params) -> None:
        statuses[params.response.status] += 1

    trace.on_request_end.append(on_request_end)
    channels = [int(c) for c in args.channels.split(",") if c]
    bot = BurstBot(channels, args.per, trace)
    summary: dict = {"discord_py": discord.__version__, "ok": False}
    started = time.monotonic()
    async with bot:
        runner = asyncio.create_task(bot.start(token))
        waiter = asyncio.create_task(bot.all_seen.wait())
        await asyncio.wait({runner, waiter}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED)
        if bot.all_seen.is_set():
            # A duplicate MESSAGE_CREATE would come right behind the original.
            await asyncio.sleep(1.0)
        summary["gateway_alive"] = not runner.done()
        if runner.done() and runner.exception():
            summary["client_stopped"] = "".join(traceback.format_exception(runner.exception()))
        if not bot.all_seen.is_set():
            summary["timeout_s"] = args.timeout
        waiter.cancel()
        await bot.close()
        if not runner.done():
            runner.cancel()
        try:
            await runner
        except BaseException:
            pass
    summary.update(bot.s)
    counts = collections.Counter(bot.s["created"])
    summary["missing"] = sorted(i for i in bot.sent_ids if counts[i] == 0)
    summary["duplicated"] = sorted(i for i, n in counts.items() if n > 1)
    summary["failure"] = bot.failure
    summary["statuses"] = {str(k): v for k, v in sorted(statuses.items())}
    summary["rate_limited_logged"] = http.rate_limited
    summary["responses_429_logged"] = http.responses_429
    summary["preemptive_waits"] = http.preemptive
    summary["logged_errors"] = errors.records
    summary["elapsed_s"] = round(time.monotonic() - started, 3)
    want = len(channels) * args.per
    summary["ok"] = (
        bot.all_seen.is_set()
        and summary["gateway_alive"]
        and bot.failure is None
        and not bot.s["send_failures"]
        and len(bot.sent_ids) == want
        and not summary["missing"]
        and not summary["duplicated"]
        and not http.rate_limited
        and not http.responses_429
        and statuses[429] == 0
        and not errors.records
    )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--channels", required=True, help="comma-separated channel ids")
    parser.add_argument("--per", type=int, required=True, help="messages per channel")
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    token = os.environ.get("GATEWAYD_TOKEN", "").strip()
    if not token:
        print("GATEWAYD_TOKEN is not set", file=sys.stderr)
        return 2
    # INFO and above to stderr (the test prints it on failure); discord.http
    # at DEBUG into HttpRecords only (its DEBUG lines carry every body).
    stream = logging.StreamHandler(sys.stderr)
    stream.setLevel(logging.INFO)
    stream.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(stream)
    errors = ErrorRecords()
    http = HttpRecords()
    root.addHandler(errors)
    logging.getLogger("discord.http").setLevel(logging.DEBUG)
    logging.getLogger("discord.http").addHandler(http)
    point_at(args.addr)
    summary = asyncio.run(run(args, token, errors, http))
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
