#!/usr/bin/env python3
"""An unmodified discord.py 2.x bot that ACTS through a gatewayd node's REST
edge: the classic "!ping" bot, plus the other things bots do.

The only change from a bot written for Discord is `point_at()` (the base
URLs), shared with bot.py. When a person writes "!ping" in a channel the bot
sees, it:

  1. answers `await message.channel.send("pong")`,
  2. replies to the person (`message.reply`),
  3. reacts to the person's message with eyes, edits its pong, reacts to
     it with a thumbs-up, deletes its reply,
  4. sends 30 messages one after the other (a burst at the 5 per 5 s
     channel limit: discord.py must read the rate-limit headers and wait,
     so no request of it ever gets a 429),

and watches its own actions come back over the gateway: MESSAGE_CREATE for
each message it sent, MESSAGE_UPDATE, MESSAGE_REACTION_ADD, MESSAGE_DELETE.
It runs with the node's demo on, past the demo's timers (issue 26: from the
demo's first refused /ping on, the echo of a bot's own message carried
`"author": {}`, which crashed discord.py's gateway task in
`Message._handle_member`): after its actions it must still receive a demo
message posted after them, and its gateway task must still be running.

Usage (run by tests/discord_py.rs): GATEWAYD_TOKEN=... python ping_bot.py --addr HOST:PORT
Prints "READY" once on_ready fired (the test then writes "!ping"), and a
JSON summary as the last stdout line; exit status 0 when every expectation
held. Any ERROR logged by discord.py, and any 429 it logs, fails the run.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bot import ErrorRecords, point_at  # noqa: E402

BURST = 30


class RateLimitWarnings(logging.Handler):
    """discord.py logs every 429 it gets ("We are being rate limited")."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "rate limited" in msg.lower() or "429" in msg:
            self.seen.append(f"{record.name}: {msg}")


class PingBot(discord.Client):
    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents)
        self.s: dict = {"own_created": [], "updated": [], "reactions": [], "deleted": [], "burst_ok": 0}
        self.sent_ids: set[int] = set()
        self.done = asyncio.Event()
        self.failure: str | None = None

    async def on_ready(self) -> None:
        print("READY", flush=True)

    async def on_message(self, message: discord.Message) -> None:
        if message.author.id == self.user.id:
            self.s["own_created"].append(str(message.id))
            self._check()
            return
        if (
            self.s.get("actions_done")
            and message.content.startswith("demo message ")
            and self.sent_ids
            and message.id > max(self.sent_ids)
        ):
            # The gateway still delivers after the bot's own messages came back.
            self.s["alive_after_actions"] = True
            self._check()
            return
        if message.content != "!ping" or message.author.bot:
            return
        try:
            t0 = time.monotonic()
            pong = await message.channel.send("pong")
            self.sent_ids.add(pong.id)
            self.s["pong"] = {"id": str(pong.id), "content": pong.content, "author_is_me": pong.author.id == self.user.id}
            # React to the person's message (it reached the node from another
            # producer: the chat service learnt it from the stream).
            await message.add_reaction("\N{EYES}")
            reply = await message.reply("pong, as a reply")
            self.sent_ids.add(reply.id)
            self.s["reply"] = {"id": str(reply.id), "type": str(reply.type), "ref": str(reply.reference.message_id) if reply.reference else None}
            edited = await pong.edit(content="pong (edited)")
            self.s["edited"] = {"content": edited.content, "edited_at": edited.edited_at is not None}
            await pong.add_reaction("\N{THUMBS UP SIGN}")
            await reply.delete()
            self.s["deleted_id"] = str(reply.id)
            for i in range(BURST):
                m = await message.channel.send(f"burst {i}")
                self.sent_ids.add(m.id)
                self.s["burst_ok"] += 1
            self.s["actions_s"] = round(time.monotonic() - t0, 3)
            fetched = await message.channel.fetch_message(pong.id)
            self.s["fetched"] = {"content": fetched.content, "reactions": [str(r.emoji) for r in fetched.reactions]}
            self.s["actions_done"] = True
        except Exception:  # noqa: BLE001 - the summary says what failed
            self.failure = traceback.format_exc()
            self.done.set()
        self._check()

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        self.s["updated"].append(str(payload.message_id))
        self._check()

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        self.s["reactions"].append({"message": str(payload.message_id), "emoji": str(payload.emoji), "user_is_me": payload.user_id == self.user.id})
        self._check()

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.s["deleted"].append(str(payload.message_id))
        self._check()

    def _check(self) -> None:
        s = self.s
        own = set(s["own_created"])
        if (
            s.get("actions_done")
            and all(str(i) in own for i in self.sent_ids)
            and s.get("pong", {}).get("id") in s["updated"]
            and len(s["reactions"]) >= 2
            and s.get("deleted_id") in s["deleted"]
            and s.get("alive_after_actions")
        ):
            self.done.set()


async def run(args, token: str, errors: ErrorRecords, limited: RateLimitWarnings) -> dict:
    bot = PingBot()
    summary: dict = {"discord_py": discord.__version__, "ok": False}
    async with bot:
        runner = asyncio.create_task(bot.start(token))
        waiter = asyncio.create_task(bot.done.wait())
        await asyncio.wait({runner, waiter}, timeout=args.timeout, return_when=asyncio.FIRST_COMPLETED)
        # The gateway task is still running when every expectation held.
        summary["gateway_alive"] = not runner.done()
        if runner.done() and runner.exception():
            summary["client_stopped"] = "".join(traceback.format_exception(runner.exception()))
        if not bot.done.is_set():
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
    summary["sent"] = sorted(str(i) for i in bot.sent_ids)
    summary["failure"] = bot.failure
    summary["rate_limited_logged"] = limited.seen
    summary["logged_errors"] = errors.records
    summary["ok"] = (
        bot.done.is_set()
        and summary["gateway_alive"]
        and bot.failure is None
        and "timeout_s" not in summary
        and "client_stopped" not in summary
        and not limited.seen
        and not errors.records
        and bot.s["burst_ok"] == BURST
    )
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--timeout", type=float, default=90.0)
    args = parser.parse_args()
    token = os.environ.get("GATEWAYD_TOKEN", "").strip()
    if not token:
        print("GATEWAYD_TOKEN is not set", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    errors = ErrorRecords()
    limited = RateLimitWarnings()
    logging.getLogger().addHandler(errors)
    logging.getLogger().addHandler(limited)
    point_at(args.addr)
    summary = asyncio.run(run(args, token, errors, limited))
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
