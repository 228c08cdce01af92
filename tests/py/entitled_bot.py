#!/usr/bin/env python3
"""An unmodified discord.py 2.x bot that must receive exactly the messages it
is entitled to, in order (run by tests/entitlement.rs).

The only changes from a bot written for Discord are the two lines in
`point_at()` (REST base and gateway URL), as in tests/py/bot.py.

Usage:

    GATEWAYD_TOKEN=... GATEWAYD_EXPECT='{"message_content": false,
        "messages": [{"id": "...", "content": "...", "redacted": true}, ...]}' \\
        python entitled_bot.py --addr 127.0.0.1:PORT [--timeout S]

It prints `READY` on stdout once on_ready fired (the test pushes its events
then), collects every MESSAGE_CREATE (`on_message`) until it has as many as
expected (or one that does not match), waits 0.5 s more for stragglers, and
prints a JSON summary as the last stdout line. Exit status 0 only if the
messages were exactly the expected ones, in order, each with the expected
content and with embeds/attachments/components/poll present (full) or empty
(redacted), the dispatch sequence numbers were contiguous, and discord.py
logged no error.
"""

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import traceback

import discord
import yarl


def point_at(addr: str) -> None:
    discord.http.Route.BASE = f"http://{addr}/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"ws://{addr}/")


class ErrorRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        self.records.append(text)


class EntitledBot(discord.Client):
    def __init__(self, expect: list[dict], message_content: bool) -> None:
        intents = discord.Intents.default()
        intents.message_content = message_content
        super().__init__(intents=intents, enable_debug_events=True)
        self.expect = expect
        self.got: list[dict] = []
        self.mismatch: str | None = None
        self.seq_errors: list[str] = []
        self.last_seq: int | None = None
        self.ready_count = 0
        self.handler_errors: list[str] = []
        self.enough = asyncio.Event()

    async def on_socket_raw_receive(self, msg) -> None:
        try:
            payload = json.loads(msg)
        except Exception:  # noqa: BLE001
            self.seq_errors.append(f"non-JSON frame: {msg!r:.200}")
            return
        if payload.get("op") != 0:
            return
        s = payload.get("s")
        if self.last_seq is None:
            if s != 1:
                self.seq_errors.append(f"first dispatch {payload.get('t')} has s={s}")
        elif s != self.last_seq + 1:
            self.seq_errors.append(f"s jumped from {self.last_seq} to {s} at {payload.get('t')}")
        self.last_seq = s

    async def on_ready(self) -> None:
        self.ready_count += 1
        if self.ready_count == 1:
            print("READY", flush=True)

    async def on_message(self, message: discord.Message) -> None:
        seen = {
            "id": str(message.id),
            "content": message.content,
            "embeds": len(message.embeds),
            "attachments": len(message.attachments),
            "components": len(message.components),
            "poll": message.poll is not None,
            "channel": getattr(message.channel, "name", None),
            "guild": message.guild.name if message.guild else None,
        }
        self.got.append(seen)
        i = len(self.got) - 1
        if self.mismatch is None:
            if i >= len(self.expect):
                self.mismatch = f"message #{i} beyond the {len(self.expect)} expected: {seen}"
            else:
                want = self.expect[i]
                rich = (seen["embeds"], seen["attachments"], seen["components"], seen["poll"])
                want_rich = (0, 0, 0, False) if want["redacted"] else (1, 1, 1, True)
                if seen["id"] != want["id"] or seen["content"] != want["content"] or rich != want_rich:
                    self.mismatch = f"message #{i}: got {seen}, expected {want} with (embeds, attachments, components, poll) = {want_rich}"
                elif seen["channel"] is None:
                    self.mismatch = f"message #{i}: channel not resolved from GUILD_CREATE: {seen}"
        if self.mismatch is not None or len(self.got) >= len(self.expect):
            self.enough.set()

    async def on_error(self, event_method: str, /, *args, **kwargs) -> None:
        self.handler_errors.append(f"in {event_method}: {traceback.format_exc()}")
        self.enough.set()


async def run(args, token: str, spec: dict, errors: ErrorRecords) -> dict:
    bot = EntitledBot(spec["messages"], bool(spec.get("message_content")))
    summary: dict = {"discord_py": discord.__version__, "ok": False}
    started = time.monotonic()
    async with bot:
        runner = asyncio.create_task(bot.start(token), name="discord.py client")
        waiter = asyncio.create_task(bot.enough.wait())
        done, _ = await asyncio.wait({runner, waiter}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            # Anything arriving after the last expected message is an error too.
            await asyncio.sleep(0.5)
        elif runner in done:
            exc = runner.exception()
            summary["client_stopped"] = repr(exc) if exc else "returned"
        else:
            summary["timeout_s"] = args.timeout
        waiter.cancel()
        summary["elapsed_s"] = round(time.monotonic() - started, 3)
        await bot.close()
        if not runner.done():
            runner.cancel()
        try:
            await runner
        except BaseException:  # noqa: BLE001
            pass
    if bot.mismatch is None and len(bot.got) > len(bot.expect):
        bot.mismatch = f"{len(bot.got) - len(bot.expect)} message(s) after the last expected one: {bot.got[len(bot.expect):]}"
    summary.update(
        {
            "ready_count": bot.ready_count,
            "got": bot.got,
            "expected": bot.expect,
            "mismatch": bot.mismatch,
            "seq_errors": bot.seq_errors,
            "last_seq": bot.last_seq,
            "handler_errors": bot.handler_errors,
            "logged_errors": list(errors.records),
        }
    )
    summary["ok"] = (
        bot.ready_count == 1
        and bot.mismatch is None
        and len(bot.got) == len(bot.expect)
        and not bot.seq_errors
        and not bot.handler_errors
        and not errors.records
        and "client_stopped" not in summary
        and "timeout_s" not in summary
    )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    token = os.environ.get("GATEWAYD_TOKEN", "").strip()
    spec_text = os.environ.get("GATEWAYD_EXPECT", "")
    if not token or not spec_text:
        print("GATEWAYD_TOKEN and GATEWAYD_EXPECT must be set", file=sys.stderr)
        return 2
    spec = json.loads(spec_text)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    errors = ErrorRecords()
    logging.getLogger().addHandler(errors)
    point_at(args.addr)
    summary = asyncio.run(run(args, token, spec, errors))
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
