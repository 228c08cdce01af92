#!/usr/bin/env python3
"""An unmodified discord.py 2.x bot pointed at a gatewayd node.

The only changes from a bot written for Discord are the two lines in
`point_at()`: discord.py builds every REST URL as `Route.BASE + path` and, for a
non-sharded `Client`, connects the gateway to `DiscordWebSocket.DEFAULT_GATEWAY`
(a `yarl.URL`) with `?v=10&encoding=json&compress=zlib-stream` appended. It
never calls `GET /gateway/bot` for a plain `Client`; it calls `GET /users/@me`
and `GET /oauth2/applications/@me` in `Client.login()`. After READY it resumes to
READY's `resume_gateway_url`.

Usage (run by tests/discord_py.rs):

    GATEWAYD_TOKEN=... python bot.py --addr 127.0.0.1:PORT [--mode MODE]

Modes:
  messages (default)   wait for on_ready and `--want` MESSAGE_CREATEs whose
                       content starts with "demo message", and one heartbeat ACK.
  bad-token            log in with a mangled token: discord.py must raise
                       LoginFailure (REST 401 with the documented body).
  privileged-refused   also ask for the presences intent (not approved for the
                       demo app): discord.py must raise PrivilegedIntentsRequired
                       (gateway close 4014).

The last line on stdout is a JSON summary; the exit status is 0 when the
scenario's expectations held, 1 otherwise (including the `--timeout`).
Everything discord.py logs goes to stderr; any ERROR record fails the run.
Set GATEWAYD_TRACE=1 to also log every raw gateway frame received and sent.
"""

import argparse
import asyncio
import json
import logging
import math
import os
import sys
import time
import traceback

import discord
import yarl


def point_at(addr: str) -> None:
    """The whole integration: where REST and the gateway live."""
    discord.http.Route.BASE = f"http://{addr}/api/v10"
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(f"ws://{addr}/")


class ErrorRecords(logging.Handler):
    """Collects every ERROR (or worse) record discord.py or asyncio logs."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        self.records.append(text)


class DemoBot(discord.Client):
    def __init__(self, want: int, trace: bool, presences: bool = False) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        if presences:
            intents.presences = True
        super().__init__(intents=intents, enable_debug_events=trace)
        self.want = want
        self.trace = trace
        self.ready_count = 0
        self.ready_info: dict = {}
        self.messages: list[dict] = []
        self.handler_errors: list[str] = []
        self.enough = asyncio.Event()

    async def on_socket_raw_receive(self, msg: str) -> None:
        if self.trace:
            print(f"<< {msg}", file=sys.stderr, flush=True)

    async def on_socket_raw_send(self, payload) -> None:
        if self.trace:
            print(f">> {payload}", file=sys.stderr, flush=True)

    async def on_ready(self) -> None:
        self.ready_count += 1
        self.ready_info = {
            "user": {"id": str(self.user.id), "name": self.user.name, "bot": self.user.bot},
            "application_id": str(self.application_id) if self.application_id else None,
            "session_id": self.ws.session_id if self.ws else None,
            "resume_gateway_url": str(self.ws.gateway) if self.ws else None,
            "guilds": [
                {
                    "id": str(g.id),
                    "name": g.name,
                    "text_channels": [c.name for c in g.text_channels],
                }
                for g in self.guilds
            ],
        }
        self._check_done()

    async def on_message(self, message: discord.Message) -> None:
        if not message.content.startswith("demo message"):
            return
        self.messages.append(
            {
                "content": message.content,
                "author": message.author.name,
                "author_bot": message.author.bot,
                # Resolved from the GUILD_CREATE cache: a plain Object (no
                # name) here means discord.py did not know the channel/guild.
                "channel": getattr(message.channel, "name", None),
                "channel_id": str(message.channel.id),
                "guild": message.guild.name if message.guild else None,
            }
        )
        self._check_done()

    async def on_error(self, event_method: str, /, *args, **kwargs) -> None:
        self.handler_errors.append(f"in {event_method}: {traceback.format_exc()}")
        self.enough.set()

    def heartbeat_acked(self) -> bool:
        return math.isfinite(self.latency)

    def _check_done(self) -> None:
        if self.ready_count and len(self.messages) >= self.want and self.heartbeat_acked():
            self.enough.set()


def emit(summary: dict) -> int:
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


async def run_messages(args, token: str, errors: ErrorRecords) -> dict:
    bot = DemoBot(args.want, args.trace)
    summary: dict = {"mode": "messages", "discord_py": discord.__version__, "ok": False}
    started = time.monotonic()
    async with bot:
        runner = asyncio.create_task(bot.start(token), name="discord.py client")
        waiter = asyncio.create_task(bot.enough.wait())
        deadline = started + args.timeout
        # The ACK of the heartbeat discord.py sends right after Hello normally
        # precedes the messages; poll for it in case it is the last thing missing.
        while not bot.enough.is_set() and not runner.done() and time.monotonic() < deadline:
            await asyncio.wait({runner, waiter}, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
            bot._check_done()
        if runner.done():
            exc = runner.exception()
            summary["client_stopped"] = repr(exc) if exc else "returned"
            if exc:
                summary["client_traceback"] = "".join(traceback.format_exception(exc))
        elif not bot.enough.is_set():
            summary["timeout_s"] = args.timeout
        waiter.cancel()
        summary.update(bot.ready_info)
        summary["ready_count"] = bot.ready_count
        summary["messages"] = bot.messages
        summary["latency_ms"] = bot.latency * 1000 if bot.heartbeat_acked() else None
        summary["elapsed_s"] = round(time.monotonic() - started, 3)
        await bot.close()
        if not runner.done():
            runner.cancel()
        try:
            await runner
        except BaseException:
            pass
    summary["handler_errors"] = bot.handler_errors
    summary["logged_errors"] = list(errors.records)
    summary["ok"] = (
        bot.ready_count >= 1
        and len(bot.messages) >= args.want
        and summary["latency_ms"] is not None
        and "client_stopped" not in summary
        and "timeout_s" not in summary
        and not bot.handler_errors
        and not errors.records
    )
    return summary


async def run_bad_token(args, token: str, errors: ErrorRecords) -> dict:
    bot = DemoBot(args.want, args.trace)
    summary: dict = {"mode": "bad-token", "discord_py": discord.__version__, "ok": False}
    async with bot:
        try:
            await asyncio.wait_for(bot.login(token + "x"), timeout=args.timeout)
            summary["outcome"] = "logged in"
        except discord.LoginFailure as e:
            summary["outcome"] = "LoginFailure"
            summary["detail"] = str(e)
        except discord.HTTPException as e:
            summary["outcome"] = "HTTPException"
            summary["detail"] = f"status {e.status} code {e.code} text {e.text!r}"
        except Exception as e:  # noqa: BLE001 - report whatever happened
            summary["outcome"] = type(e).__name__
            summary["detail"] = "".join(traceback.format_exception(e))
        await bot.close()
    summary["logged_errors"] = list(errors.records)
    summary["ok"] = summary["outcome"] == "LoginFailure"
    return summary


async def run_privileged_refused(args, token: str, errors: ErrorRecords) -> dict:
    bot = DemoBot(args.want, args.trace, presences=True)
    summary: dict = {"mode": "privileged-refused", "discord_py": discord.__version__, "ok": False}
    async with bot:
        try:
            await asyncio.wait_for(bot.start(token), timeout=args.timeout)
            summary["outcome"] = "client returned"
        except discord.PrivilegedIntentsRequired:
            summary["outcome"] = "PrivilegedIntentsRequired"
        except discord.ConnectionClosed as e:
            summary["outcome"] = "ConnectionClosed"
            summary["detail"] = f"code {e.code} reason {e.reason!r}"
        except asyncio.TimeoutError:
            summary["outcome"] = "timeout"
        except Exception as e:  # noqa: BLE001
            summary["outcome"] = type(e).__name__
            summary["detail"] = "".join(traceback.format_exception(e))
        summary["ready_count"] = bot.ready_count
        await bot.close()
    summary["ok"] = summary["outcome"] == "PrivilegedIntentsRequired" and bot.ready_count == 0
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addr", required=True, help="host:port of the node's gateway/REST listener")
    parser.add_argument("--mode", choices=["messages", "bad-token", "privileged-refused"], default="messages")
    parser.add_argument("--want", type=int, default=2, help="demo messages to wait for")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")
    args = parser.parse_args()
    args.trace = os.environ.get("GATEWAYD_TRACE", "") not in ("", "0")

    token = os.environ.get("GATEWAYD_TOKEN", "").strip()
    if not token:
        print("GATEWAYD_TOKEN is not set", file=sys.stderr)
        return 2

    logging.basicConfig(
        level=logging.DEBUG if args.trace else logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    errors = ErrorRecords()
    logging.getLogger().addHandler(errors)

    point_at(args.addr)
    scenario = {
        "messages": run_messages,
        "bad-token": run_bad_token,
        "privileged-refused": run_privileged_refused,
    }[args.mode]
    summary = asyncio.run(scenario(args, token, errors))
    return emit(summary)


if __name__ == "__main__":
    sys.exit(main())
