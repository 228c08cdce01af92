#!/usr/bin/env python3
"""An unmodified hikari 2.x `GatewayBot` pointed at a gatewayd node.

The only change from a bot written for Discord is `make_bot()`'s
`rest_url=`: hikari builds every REST URL as `rest_url + path`
(`hikari/impl/rest.py`, `RESTClientImpl._request`) and takes the gateway
URL from `GET /gateway/bot`'s `url` (`hikari/impl/gateway_bot.py`,
`GatewayBot.start`), which the node answers with its own WebSocket URL. Its
shard connects to that URL with `?v=10&encoding=json&compress=zlib-stream`
(`hikari/impl/shard.py`, `GatewayShardImpl._connect`: zstd-stream instead
when `backports.zstd` is importable) and resumes to READY's
`resume_gateway_url`. Two more arguments are not about the node:
`check_for_updates=False` (hikari would ask PyPI for a newer version) and
`logs=None` (hikari's default logging writes to stdout, where the summary
goes; this script logs to stderr itself).

Usage (run by tests/hikari.rs):

    GATEWAYD_TOKEN=... python hikari_bot.py --addr 127.0.0.1:PORT --mode MODE [...]

Modes:
  messages   READY, Demo Server and #general in hikari's cache, `--want`
             MESSAGE_CREATEs whose content starts with "demo message", a
             heartbeat ACK.
  act        the "!ping" bot: on a person's "!ping" it sends, reacts,
             replies, edits, reacts, fetches, removes its reaction,
             deletes and fetches again, and waits for each to come back as
             its gateway event (and for a demo message after them).
  slash      registers /ping in `--guild` (set_application_commands) and
             answers it with create_initial_response; prints READY once
             the command is registered.
  app        rest.fetch_application() (GET /oauth2/applications/@me).
  button     a message with a button row to `--channels` (one id), parsed
             from the REST answer and from its MESSAGE_CREATE.
  resume     prints READY, then RESUMED when hikari resumes after the test
             cut its connection; ends at the message `--until`.
  burst      `--per` messages to each of `--channels` all at once
             (asyncio.gather); hikari must pace them from the rate-limit
             headers: no 429 by its own logging, each message back once.

Stdout: progress lines ("READY ...", "RESUMED", "HOLDING") and a JSON
summary as the last line; exit 0 when every expectation of the mode held.
With `--hold-file PATH` the bot stays connected once done, printing
HOLDING, until PATH exists (the test looks at the node meanwhile).
Everything hikari logs at INFO and above goes to stderr; any ERROR record
fails the run, and so does any 429 hikari reports. hikari's own TRACE log
of every gateway payload it received (`hikari.gateway.N`, "received
payload") is kept in memory: it is the raw JSON, in order, with `s`.
GATEWAYD_TRACE=1 also prints hikari's DEBUG log.
"""

import argparse
import asyncio
import collections
import json
import logging
import math
import os
import re
import sys
import time
import traceback

import hikari

TRACE = 5  # hikari's TRACE_HIKARI level (hikari.internal.ux.TRACE)
BOT_INTENTS = hikari.Intents.ALL_UNPRIVILEGED | hikari.Intents.MESSAGE_CONTENT
# What a user object carries only for its own user (GET /users/@me, READY).
PRIVATE_USER_FIELDS = ("email", "verified", "mfa_enabled", "locale", "premium_type")


def make_bot(addr: str, token: str, intents: hikari.Intents = BOT_INTENTS) -> hikari.GatewayBot:
    """The whole integration: where REST lives (the gateway URL comes from it)."""
    return hikari.GatewayBot(
        token,
        rest_url=f"http://{addr}/api/v10",  # the only change for the node
        intents=intents,
        logs=None,  # hikari's default logging writes to stdout
        banner=None,
        suppress_optimization_warning=True,
    )


START = {"check_for_updates": False}  # GatewayBot.start(...): no PyPI look-up


class Records(logging.Handler):
    """What hikari logs, kept: ERRORs, 429s, every raw gateway payload in
    order, the REST statuses, and when it tried to connect."""

    def __init__(self) -> None:
        super().__init__(level=TRACE)
        self.t0 = time.monotonic()
        self.errors: list[str] = []
        self.rate_limited: list[str] = []
        self.statuses: collections.Counter = collections.Counter()
        self.received: list[dict] = []  # raw payloads (op, t, s, d)
        self.sent_ops: list[dict] = []  # what hikari sent (token redacted by hikari)
        self.compression: list[str] = []
        self.connect_failures: list[dict] = []
        self.backoffs: list[float] = []
        self.warnings: list[str] = []

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._emit(record)
        except Exception:  # noqa: BLE001 - a bookkeeping bug must show, not vanish
            self.errors.append("Records.emit: " + traceback.format_exc())

    def _emit(self, record: logging.LogRecord) -> None:
        fmt = str(record.msg)
        args = record.args if isinstance(record.args, tuple) else ()
        if record.levelno >= logging.ERROR:
            text = f"{record.name}: {record.getMessage()}"
            if record.exc_info:
                text += "\n" + "".join(traceback.format_exception(*record.exc_info))
            self.errors.append(text)
        if record.name.startswith("hikari.gateway"):
            if fmt.startswith("received payload with size") and len(args) == 2:
                pl = json.loads(args[1])
                pl["_at"] = self.now()
                self.received.append(pl)
            elif fmt.startswith("sending payload with size") and len(args) == 2:
                pl = json.loads(args[1])
                if pl.get("op") != 1:
                    self.sent_ops.append({"op": pl.get("op"), "d": pl.get("d"), "at": self.now()})
            elif fmt.startswith("Using '%s' compression"):
                self.compression.append(str(args[0]))
            elif fmt.startswith("failed to communicate with server") or fmt.startswith("encountered transport error"):
                self.connect_failures.append({"at": self.now(), "what": record.getMessage()[:300]})
            elif fmt.startswith("backing off reconnecting for"):
                self.backoffs.append(float(args[0]))
        if record.name.startswith("hikari.rest"):
            # TRACE "%s %s %s in %sms\n%s": (uuid, status, reason, ms, headers+body)
            if "in %sms" in fmt and len(args) >= 2 and isinstance(args[1], int):
                self.statuses[args[1]] += 1
                if args[1] == 429:
                    self.rate_limited.append(f"{record.name}: a {args[1]} response ({args[2]})")
        if record.levelno >= logging.WARNING:
            msg = record.getMessage()
            if record.levelno < logging.ERROR:
                self.warnings.append(f"{record.name}: {msg[:300]}")
            # hikari.rest: "rate limited on a %s sub bucket ...", "rate limited on
            # the global bucket ...", "rate limited on bucket %s, maybe ...";
            # hikari.ratelimits: "you are being globally rate limited for %ss".
            if "rate limited" in msg.lower() or re.search(r"\b429\b", msg):
                self.rate_limited.append(f"{record.name}: {msg[:300]}")

    def dispatches(self) -> list[dict]:
        return [p for p in self.received if p.get("op") == 0]

    def seq_gaps(self) -> list[str]:
        """Dispatch `s` as hikari received them: 1, 2, 3, ... across resumes."""
        gaps = []
        prev = None
        for p in self.dispatches():
            s = p.get("s")
            if prev is not None and s != prev + 1:
                gaps.append(f"{p.get('t')} s={s} after s={prev}")
            if prev is None and s != 1:
                gaps.append(f"first dispatch {p.get('t')} has s={s}")
            prev = s
        return gaps

    def raw_message(self, t: str, message_id: int) -> dict | None:
        for p in self.dispatches():
            if p.get("t") == t and str(p.get("d", {}).get("id")) == str(message_id):
                return p
        return None


def shard_of(bot: hikari.GatewayBot):
    return next(iter(bot.shards.values()), None)


def cache_view(bot: hikari.GatewayBot) -> list[dict]:
    out = []
    for gid, g in bot.cache.get_guilds_view().items():
        chans = bot.cache.get_guild_channels_view_for_guild(gid).values()
        out.append(
            {
                "id": str(gid),
                "name": g.name,
                "text_channels": sorted(c.name for c in chans if c.type == hikari.ChannelType.GUILD_TEXT),
            }
        )
    return out


def transport_of(bot: hikari.GatewayBot) -> str | None:
    # Observation only: the transport class hikari picked for the live connection.
    sh = shard_of(bot)
    ws = getattr(sh, "_ws", None) if sh else None
    return type(ws).__name__ if ws is not None else None


class Base:
    """A GatewayBot, its bookkeeping and the run loop every mode shares."""

    mode = "base"
    intents = BOT_INTENTS

    def __init__(self, args, token: str, rec: Records) -> None:
        self.args = args
        self.rec = rec
        self.bot = make_bot(args.addr, token, self.intents)
        self.s: dict = {"mode": self.mode, "hikari": hikari.__version__, "ok": False}
        self.done = asyncio.Event()
        self.failures: list[str] = []
        self.ready_events: list[dict] = []
        self.bot.subscribe(hikari.ShardReadyEvent, self._on_ready)
        self.bot.subscribe(hikari.ExceptionEvent, self._on_exception)

    async def _on_ready(self, e: hikari.ShardReadyEvent) -> None:
        self.ready_events.append(
            {
                "session_id": e.session_id,
                "resume_gateway_url": e.resume_gateway_url,
                "user_id": str(e.my_user.id),
                "username": e.my_user.username,
                "is_bot": e.my_user.is_bot,
                "application_id": str(e.application_id),
                "gateway_version": e.actual_gateway_version,
                "unavailable_guilds": [str(g) for g in e.unavailable_guilds],
                "at": self.rec.now(),
            }
        )
        await self.on_ready(e)

    async def _on_exception(self, e: hikari.ExceptionEvent) -> None:
        # A listener raised: hikari logs it at ERROR too; keep the traceback.
        self.failures.append("listener raised: " + "".join(traceback.format_exception(e.exception)))
        self.done.set()

    async def on_ready(self, e: hikari.ShardReadyEvent) -> None:
        pass

    async def after_start(self) -> None:
        """Runs once GatewayBot.start() returned (every shard READY)."""

    def expectations(self) -> bool:
        return True

    def summary(self) -> None:
        """Fill self.s at the end."""

    def check(self) -> None:
        if self.expectations():
            self.done.set()

    async def guarded(self, coro) -> None:
        try:
            await coro
        except Exception:  # noqa: BLE001 - the summary says what failed
            self.failures.append(traceback.format_exc())
            self.done.set()

    async def run(self) -> dict:
        started = time.monotonic()
        deadline = started + self.args.timeout
        starter = asyncio.create_task(self.bot.start(**START), name="GatewayBot.start")
        waiter = asyncio.create_task(self.done.wait())
        try:
            await asyncio.wait({starter, waiter}, timeout=self.args.timeout, return_when=asyncio.FIRST_COMPLETED)
            if starter.done() and not starter.cancelled() and starter.exception() is None:
                self.s["started_s"] = round(time.monotonic() - started, 3)
                await self.guarded(self.after_start())
                self.check()
                left = max(0.0, deadline - time.monotonic())
                joiner = asyncio.create_task(self.bot.join())
                await asyncio.wait({joiner, waiter}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if joiner.done():
                    self.failures.append(f"GatewayBot.join() returned: {joiner.exception()!r}")
                else:
                    joiner.cancel()
            elif starter.done() and not starter.cancelled():
                self.failures.append("GatewayBot.start raised: " + "".join(traceback.format_exception(starter.exception())))
            if not self.done.is_set() and time.monotonic() >= deadline - 0.1:
                self.s["timeout_s"] = self.args.timeout
            if self.done.is_set() and not self.failures:
                await self.linger()
                await self.hold()
            self.s["gateway_alive"] = bool(self.bot.shards) and all(sh.is_alive for sh in self.bot.shards.values())
            sh = shard_of(self.bot)
            self.s["heartbeat_latency_ms"] = (
                round(sh.heartbeat_latency * 1000, 3) if sh and math.isfinite(sh.heartbeat_latency) else None
            )
            self.s["transport"] = transport_of(self.bot)
            self.s["guilds"] = cache_view(self.bot)  # before close() empties the cache
            self.summary()
            self.s["expectations_held"] = self.expectations()
        finally:
            waiter.cancel()
            if not starter.done():
                starter.cancel()
            try:
                await self.bot.close()
            except Exception:  # noqa: BLE001 - not started: nothing to close
                pass
        self.s["elapsed_s"] = round(time.monotonic() - started, 3)
        self.s["ready_events"] = self.ready_events
        self.s["compression"] = self.rec.compression
        self.s["connect_failures"] = self.rec.connect_failures
        self.s["backoffs_s"] = self.rec.backoffs
        self.s["seq_gaps"] = self.rec.seq_gaps()
        self.s["dispatches"] = len(self.rec.dispatches())
        self.s["rest_statuses"] = {str(k): v for k, v in sorted(self.rec.statuses.items())}
        self.s["rate_limited_logged"] = list(self.rec.rate_limited)
        self.s["logged_errors"] = list(self.rec.errors)
        self.s["logged_warnings"] = self.rec.warnings[:50]
        self.s["failures"] = self.failures
        self.s["ok"] = (
            self.done.is_set()
            and self.s.get("expectations_held") is True
            and not self.failures
            and "timeout_s" not in self.s
            and not self.rec.errors
            and not self.rec.rate_limited
            and not self.s["seq_gaps"]
        )
        return self.s

    async def linger(self) -> None:
        """A second more for a late duplicate, where a mode counts."""

    async def hold(self) -> None:
        if not self.args.hold_file:
            return
        print("HOLDING", flush=True)
        self.s["held_transport"] = transport_of(self.bot)
        limit = time.monotonic() + self.args.timeout
        while not os.path.exists(self.args.hold_file) and time.monotonic() < limit:
            await asyncio.sleep(0.05)


class Messages(Base):
    mode = "messages"

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.messages: list[dict] = []
        self.bot.subscribe(hikari.GuildMessageCreateEvent, self.on_message)

    async def after_start(self) -> None:
        me = self.bot.get_me()
        self.s["me"] = {"id": str(me.id), "username": me.username, "is_bot": me.is_bot} if me else None
        print("READY", flush=True)

    async def on_message(self, e: hikari.GuildMessageCreateEvent) -> None:
        if not (e.content or "").startswith("demo message"):
            return
        ch = e.get_channel()
        g = e.get_guild()
        raw = self.rec.raw_message("MESSAGE_CREATE", e.message_id)
        self.messages.append(
            {
                "content": e.content,
                "author": e.author.username,
                "author_is_bot": e.author.is_bot,
                "channel": ch.name if ch else None,
                "guild": g.name if g else None,
                "seq": raw.get("s") if raw else None,
            }
        )
        self.check()

    def expectations(self) -> bool:
        sh = shard_of(self.bot)
        acked = sh is not None and math.isfinite(sh.heartbeat_latency)
        return bool(self.ready_events) and len(self.messages) >= self.args.want and acked

    def summary(self) -> None:
        self.s["messages"] = self.messages


class Act(Base):
    """The '!ping' bot: every kind of action through REST, each seen back."""

    mode = "act"

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.sent: set[int] = set()
        self.own_created: list[dict] = []
        self.updated: list[dict] = []
        self.reactions_added: list[dict] = []
        self.reactions_removed: list[dict] = []
        self.deleted: list[str] = []
        self.rest_authors: list[dict] = []
        self.bot.subscribe(hikari.GuildMessageCreateEvent, self.on_message)
        self.bot.subscribe(hikari.GuildMessageUpdateEvent, self.on_update)
        self.bot.subscribe(hikari.GuildReactionAddEvent, self.on_reaction_add)
        self.bot.subscribe(hikari.GuildReactionDeleteEvent, self.on_reaction_delete)
        self.bot.subscribe(hikari.GuildMessageDeleteEvent, self.on_delete)

    async def after_start(self) -> None:
        print("READY", flush=True)

    def me(self) -> int:
        return int(self.bot.get_me().id)

    async def on_message(self, e: hikari.GuildMessageCreateEvent) -> None:
        if e.author_id == self.me():
            raw = self.rec.raw_message("MESSAGE_CREATE", e.message_id)
            author = (raw or {}).get("d", {}).get("author")
            self.own_created.append(
                {
                    "id": str(e.message_id),
                    "content": e.content,
                    "author_id": str(e.author.id),
                    "author_is_bot": e.author.is_bot,
                    "author_username": e.author.username,
                    "raw_author": author,
                    "seq": (raw or {}).get("s"),
                }
            )
            self.check()
            return
        if (
            self.s.get("actions_done")
            and (e.content or "").startswith("demo message ")
            and self.sent
            and int(e.message_id) > max(self.sent)
        ):
            # Still delivering after the bot's own messages came back.
            self.s["alive_after_actions"] = True
            self.check()
            return
        if e.content != "!ping" or e.author.is_bot or "person" in self.s:
            return
        self.s["person"] = {"id": str(e.message_id), "author": e.author.username, "channel": getattr(e.get_channel(), "name", None)}
        await self.guarded(self.act(e.message))

    async def act(self, person: hikari.Message) -> None:
        t0 = time.monotonic()
        pong = await person.respond("pong")  # POST /channels/{c}/messages
        self.sent.add(int(pong.id))
        self.s["pong"] = {"id": str(pong.id), "content": pong.content, "author_is_me": pong.author.id == self.me()}
        await person.add_reaction("\N{EYES}")  # PUT .../reactions/{e}/@me on the person's message
        reply = await person.respond("pong, as a reply", reply=True)
        self.sent.add(int(reply.id))
        self.s["reply"] = {
            "id": str(reply.id),
            "type": str(reply.type),
            "ref": str(reply.message_reference.id) if reply.message_reference else None,
            "referenced_content": reply.referenced_message.content if reply.referenced_message else None,
        }
        edited = await pong.edit("pong (edited)")  # PATCH
        self.s["edited"] = {"id": str(edited.id), "content": edited.content, "edited_at": edited.edited_timestamp is not None}
        await pong.add_reaction("\N{THUMBS UP SIGN}")
        fetched = await self.bot.rest.fetch_message(pong.channel_id, pong.id)  # GET
        self.s["fetched"] = {
            "content": fetched.content,
            "reactions": [str(r.emoji) for r in fetched.reactions],
            "author_is_me": fetched.author.id == self.me(),
        }
        await pong.remove_reaction("\N{THUMBS UP SIGN}")  # DELETE .../@me
        await reply.delete()  # DELETE /channels/{c}/messages/{m}
        self.s["deleted_id"] = str(reply.id)
        after = await self.bot.rest.fetch_message(pong.channel_id, pong.id)
        self.s["fetched_after_removal"] = {"content": after.content, "reactions": [str(r.emoji) for r in after.reactions]}
        for m in (pong, reply, edited):
            self.rest_authors.append({"id": str(m.id), "author_id": str(m.author.id), "author_is_bot": m.author.is_bot})
        self.s["actions_s"] = round(time.monotonic() - t0, 3)
        self.s["actions_done"] = True
        self.check()

    async def on_update(self, e: hikari.GuildMessageUpdateEvent) -> None:
        raw = self.rec.raw_message("MESSAGE_UPDATE", e.message_id)
        self.updated.append(
            {
                "id": str(e.message_id),
                "content": e.message.content if e.message.content is not hikari.UNDEFINED else None,
                "raw_author": (raw or {}).get("d", {}).get("author"),
            }
        )
        self.check()

    async def on_reaction_add(self, e: hikari.GuildReactionAddEvent) -> None:
        self.reactions_added.append(
            {"message": str(e.message_id), "emoji": str(e.emoji_name), "user_is_me": e.user_id == self.me(), "member": e.member.username}
        )
        self.check()

    async def on_reaction_delete(self, e: hikari.GuildReactionDeleteEvent) -> None:
        self.reactions_removed.append({"message": str(e.message_id), "emoji": str(e.emoji_name), "user_is_me": e.user_id == self.me()})
        self.check()

    async def on_delete(self, e: hikari.GuildMessageDeleteEvent) -> None:
        self.deleted.append(str(e.message_id))
        self.check()

    def expectations(self) -> bool:
        s = self.s
        own = {m["id"] for m in self.own_created}
        pong = s.get("pong", {}).get("id")
        return bool(
            s.get("actions_done")
            and all(str(i) in own for i in self.sent)
            and any(u["id"] == pong for u in self.updated)
            and any(r["message"] == pong for r in self.reactions_added)
            and any(r["message"] == s.get("person", {}).get("id") for r in self.reactions_added)
            and any(r["message"] == pong for r in self.reactions_removed)
            and s.get("deleted_id") in self.deleted
            and s.get("alive_after_actions")
        )

    def summary(self) -> None:
        self.s["me"] = str(self.me()) if self.bot.get_me() else None
        self.s["sent"] = sorted(str(i) for i in self.sent)
        self.s["own_created"] = self.own_created
        self.s["updated"] = self.updated
        self.s["reactions_added"] = self.reactions_added
        self.s["reactions_removed"] = self.reactions_removed
        self.s["deleted"] = self.deleted
        self.s["rest_authors"] = self.rest_authors
        self.s["private_fields_seen"] = sorted(
            {f for m in self.own_created + self.updated for f in PRIVATE_USER_FIELDS if f in (m.get("raw_author") or {})}
        )


class Slash(Base):
    mode = "slash"
    # The application the test installs has no privileged intent approved.
    intents = hikari.Intents.ALL_UNPRIVILEGED

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.handled: dict = {}
        self.bot.subscribe(hikari.InteractionCreateEvent, self.on_interaction)

    async def after_start(self) -> None:
        # The application id as READY gave it (`fetch_application` is the
        # app mode's: GET /oauth2/applications/@me).
        app_id = self.ready_events[0]["application_id"]
        self.s["application_id"] = app_id
        cmd = self.bot.rest.slash_command_builder("ping", "Replies with pong")
        synced = await self.bot.rest.set_application_commands(int(app_id), [cmd], guild=int(self.args.guild))
        self.s["synced"] = [{"name": c.name, "guild_id": str(c.guild_id) if c.guild_id else None, "id": str(c.id)} for c in synced]
        print("READY", flush=True)

    async def on_interaction(self, e: hikari.InteractionCreateEvent) -> None:
        i = e.interaction
        if not isinstance(i, hikari.CommandInteraction):
            self.handled.setdefault("other", []).append(str(i.type))
            return
        raw = next((p for p in reversed(self.rec.dispatches()) if p.get("t") == "INTERACTION_CREATE"), None)
        h = {
            "command": i.command_name,
            "type": str(i.type),
            "user": i.user.username,
            "member": i.member.username if i.member else None,
            "guild_id": str(i.guild_id) if i.guild_id else None,
            "channel_id": str(i.channel.id),
            "channel_name": i.channel.name,
            "application_id": str(i.application_id),
            "registered_guild_id": str(i.registered_guild_id) if i.registered_guild_id else None,
            "raw_keys": sorted((raw or {}).get("d", {}).keys()),
        }
        self.handled[i.command_name] = h

        async def answer() -> None:
            await i.create_initial_response(hikari.ResponseType.MESSAGE_CREATE, "pong")
            original = await i.fetch_initial_response()  # GET /webhooks/{app}/{token}/messages/@original
            h["original"] = {"id": str(original.id), "content": original.content}
            self.check()

        await self.guarded(answer())

    def expectations(self) -> bool:
        return "original" in self.handled.get("ping", {})

    def summary(self) -> None:
        self.s["handled"] = self.handled


class App(Base):
    """`rest.fetch_application()` (GET /oauth2/applications/@me): a bot's
    way to its application id and public key."""

    mode = "app"

    async def after_start(self) -> None:
        app = await self.bot.rest.fetch_application()
        self.s["application"] = {
            "id": str(app.id),
            "name": app.name,
            "owner": app.owner.username,
            "public_key_len": len(app.public_key),
            "is_bot_public": app.is_bot_public,
            "approximate_guild_count": app.approximate_guild_count,
        }
        self.check()

    def expectations(self) -> bool:
        return "application" in self.s


class Button(Base):
    """A message with a button row (`rest.create_message(..., component=row)`):
    hikari parses the REST answer and the MESSAGE_CREATE echo with their
    components."""

    mode = "button"

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.echo: dict | None = None
        self.sent_id: str | None = None
        self.bot.subscribe(hikari.GuildMessageCreateEvent, self.on_message)

    @staticmethod
    def components(m: hikari.PartialMessage) -> list:
        return [
            {
                "type": str(row.type),
                "id": row.id,
                "components": [
                    {"type": str(c.type), "id": c.id, "custom_id": getattr(c, "custom_id", None), "label": getattr(c, "label", None)}
                    for c in row.components
                ],
            }
            for row in (m.components or [])
        ]

    async def after_start(self) -> None:
        row = self.bot.rest.build_message_action_row().add_interactive_button(
            hikari.ButtonStyle.PRIMARY, "press", label="Press"
        )
        m = await self.bot.rest.create_message(int(self.args.channels), "with a button", component=row)
        self.sent_id = str(m.id)
        self.s["rest"] = {"id": str(m.id), "components": self.components(m)}
        self.check()

    async def on_message(self, e: hikari.GuildMessageCreateEvent) -> None:
        if e.author_id != self.bot.get_me().id:
            return
        raw = self.rec.raw_message("MESSAGE_CREATE", e.message_id)
        self.echo = {"id": str(e.message_id), "components": self.components(e.message), "raw_components": (raw or {}).get("d", {}).get("components")}
        self.check()

    def expectations(self) -> bool:
        return self.sent_id is not None and self.echo is not None and self.echo["id"] == self.sent_id

    def summary(self) -> None:
        self.s["echo"] = self.echo


class Resume(Base):
    mode = "resume"

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.messages: list[dict] = []
        self.resumed: list[dict] = []
        self.connected: list[float] = []
        self.disconnected: list[float] = []
        self.bot.subscribe(hikari.GuildMessageCreateEvent, self.on_message)
        self.bot.subscribe(hikari.ShardResumedEvent, self.on_resumed)
        self.bot.subscribe(hikari.ShardConnectedEvent, self.on_connected)
        self.bot.subscribe(hikari.ShardDisconnectedEvent, self.on_disconnected)

    async def on_connected(self, e: hikari.ShardConnectedEvent) -> None:
        self.connected.append(self.rec.now())

    async def on_disconnected(self, e: hikari.ShardDisconnectedEvent) -> None:
        self.disconnected.append(self.rec.now())

    async def after_start(self) -> None:
        sh = shard_of(self.bot)
        last = self.rec.dispatches()[-1]["s"] if self.rec.dispatches() else None
        session = self.ready_events[0]["session_id"] if self.ready_events else None
        print(f"READY session={session} seq={last} shard_alive={sh is not None and sh.is_alive}", flush=True)

    async def on_resumed(self, e: hikari.ShardResumedEvent) -> None:
        sh = e.shard
        raw = next((p for p in reversed(self.rec.dispatches()) if p.get("t") == "RESUMED"), None)
        self.resumed.append({"at": self.rec.now(), "session_id": getattr(sh, "_session_id", None), "seq": (raw or {}).get("s")})
        print("RESUMED", flush=True)
        self.check()

    async def on_message(self, e: hikari.GuildMessageCreateEvent) -> None:
        raw = self.rec.raw_message("MESSAGE_CREATE", e.message_id)
        self.messages.append({"content": e.content, "id": str(e.message_id), "seq": (raw or {}).get("s"), "at": self.rec.now()})
        self.check()

    def expectations(self) -> bool:
        return bool(self.resumed) and any(m["content"] == self.args.until for m in self.messages)

    def summary(self) -> None:
        self.s["messages"] = self.messages
        self.s["resumed"] = self.resumed
        self.s["connected_at"] = self.connected
        self.s["disconnected_at"] = self.disconnected
        self.s["sent_ops"] = [
            {"op": o["op"], "at": o["at"], **({"session_id": o["d"].get("session_id"), "seq": o["d"].get("seq")} if o["op"] == 6 else {})}
            for o in self.rec.sent_ops
        ]
        # The dispatches in the order hikari got them (t, s), for the test.
        self.s["dispatch_log"] = [[p.get("t"), p.get("s")] for p in self.rec.dispatches()]


class Burst(Base):
    mode = "burst"

    def __init__(self, *a) -> None:
        super().__init__(*a)
        self.channels = [int(c) for c in self.args.channels.split(",") if c]
        self.sent: list[dict] = []
        self.sent_ids: set[str] = set()
        self.send_failures: list[str] = []
        self.created: list[str] = []
        self.burst_done = False
        self.bot.subscribe(hikari.GuildMessageCreateEvent, self.on_message)

    async def after_start(self) -> None:
        print("READY", flush=True)
        targets = [(c, i) for c in self.channels for i in range(self.args.per)]
        t0 = time.monotonic()
        at: dict[int, float] = {}

        async def send(k: int, ch: int, i: int) -> hikari.Message:
            m = await self.bot.rest.create_message(ch, f"burst {ch} {i}")
            at[k] = round(time.monotonic() - t0, 3)
            return m

        results = await asyncio.gather(*(send(k, c, i) for k, (c, i) in enumerate(targets)), return_exceptions=True)
        self.s["burst_s"] = round(time.monotonic() - t0, 3)
        for k, ((c, i), r) in enumerate(zip(targets, results)):
            if isinstance(r, BaseException):
                self.send_failures.append(f"{c} {i}: {r!r}")
            else:
                self.sent.append({"id": str(r.id), "channel": str(c), "content": r.content, "at_s": at.get(k)})
                self.sent_ids.add(str(r.id))
        self.burst_done = True

    async def on_message(self, e: hikari.GuildMessageCreateEvent) -> None:
        me = self.bot.get_me()
        if me is not None and e.author_id == me.id:
            self.created.append(str(e.message_id))
            self.check()

    def expectations(self) -> bool:
        return self.burst_done and self.sent_ids <= set(self.created)

    async def linger(self) -> None:
        await asyncio.sleep(1.0)  # a duplicate MESSAGE_CREATE would come right behind

    def summary(self) -> None:
        counts = collections.Counter(self.created)
        self.s["sent"] = self.sent
        self.s["send_failures"] = self.send_failures
        self.s["created"] = self.created
        self.s["missing"] = sorted(i for i in self.sent_ids if counts[i] == 0)
        self.s["duplicated"] = sorted(i for i, n in counts.items() if n > 1)
        want = len(self.channels) * self.args.per
        if self.send_failures or len(self.sent_ids) != want or self.s["missing"] or self.s["duplicated"]:
            self.failures.append(f"burst: {len(self.sent_ids)}/{want} sent, failures/missing/duplicated above")


MODES = {"messages": Messages, "act": Act, "slash": Slash, "app": App, "button": Button, "resume": Resume, "burst": Burst}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--addr", required=True, help="host:port of the node's REST listener")
    parser.add_argument("--mode", choices=sorted(MODES), default="messages")
    parser.add_argument("--want", type=int, default=2, help="messages: demo messages to wait for")
    parser.add_argument("--guild", help="slash: the server to register /ping in")
    parser.add_argument("--until", default="after", help="resume: the message content that ends the run")
    parser.add_argument("--channels", default="", help="burst: comma-separated channel ids")
    parser.add_argument("--per", type=int, default=30, help="burst: messages per channel")
    parser.add_argument("--hold-file", help="once done, stay connected until this file exists")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before giving up")
    args = parser.parse_args()
    token = os.environ.get("GATEWAYD_TOKEN", "").strip()
    if not token:
        print("GATEWAYD_TOKEN is not set", file=sys.stderr)
        return 2

    trace = os.environ.get("GATEWAYD_TRACE", "") not in ("", "0")
    stream = logging.StreamHandler(sys.stderr)
    stream.setLevel(logging.DEBUG if trace else logging.INFO)
    stream.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(stream)
    rec = Records()
    root.addHandler(rec)
    # hikari's TRACE records (raw payloads, REST statuses) into Records only.
    logging.getLogger("hikari").setLevel(TRACE)
    logging.getLogger("asyncio").setLevel(logging.INFO)

    async def go() -> dict:
        return await MODES[args.mode](args, token, rec).run()

    summary = asyncio.run(go())
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
