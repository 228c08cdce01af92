#!/usr/bin/env python3
"""An unmodified discord.py 2.x slash-command bot (`app_commands`) pointed at
a gatewayd node.

The only change from a bot written for Discord is `point_at()` (the base
URLs), shared with bot.py: follow-ups and interaction callbacks go through
the same `Route.BASE` (`discord/webhook/async_.py` imports `http.Route`).
The bot:

  - `await tree.sync(guild=...)` in `setup_hook` (PUT
    /applications/{app}/guilds/{guild}/commands), or `tree.sync()` globally
    with `--scope global`;
  - `/ping`: `await interaction.response.send_message("pong")`;
  - `/slow`: `await interaction.response.defer()`, 5 s later
    `await interaction.followup.send("done")`;
  - `/menu`: a message with a `discord.ui.View` holding one button
    (custom_id "menu:click") whose callback does
    `await interaction.response.edit_message(content="clicked")`.

Usage (run by tests/discord_py_slash.rs):

    GATEWAYD_TOKEN=... python slash_bot.py --addr HOST:PORT --guild ID

Prints `SYNCED {json}` once the commands are registered and `READY` once
on_ready fired (the test then uses the commands as a person), and a JSON
summary as the last stdout line once /ping, /slow, /menu and the button
have all been handled (or at `--timeout`). Exit status 0 when every handler
ran without an exception and discord.py logged no ERROR.
"""

import argparse
import asyncio
import json
import logging
import os
import sys
import traceback

import discord
from discord import app_commands

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bot import ErrorRecords, point_at  # noqa: E402

WANT = {"ping", "slow", "menu", "click"}
SLOW_SECONDS = 5.0


def seen(interaction: discord.Interaction) -> dict:
    """What discord.py made of the INTERACTION_CREATE."""
    channel = interaction.channel
    return {
        "id": str(interaction.id),
        "type": str(interaction.type),
        "command": interaction.command.name if interaction.command else None,
        "custom_id": (interaction.data or {}).get("custom_id"),
        "user": interaction.user.name if interaction.user else None,
        "user_is_member": isinstance(interaction.user, discord.Member),
        "guild_id": str(interaction.guild_id) if interaction.guild_id else None,
        "channel": getattr(channel, "name", None),
        "message_id": str(interaction.message.id) if interaction.message else None,
        "app_permissions": interaction.app_permissions.value,
        "locale": str(interaction.locale),
    }


class MenuView(discord.ui.View):
    def __init__(self, bot: "SlashBot") -> None:
        super().__init__(timeout=300)
        self.bot = bot

    @discord.ui.button(label="Click me", style=discord.ButtonStyle.primary, custom_id="menu:click")
    async def click(self, interaction: discord.Interaction, button: discord.ui.Button) -> None:
        self.bot.handled["click"] = seen(interaction)
        await interaction.response.edit_message(content="clicked")
        self.bot.done("click")

    async def on_error(self, interaction: discord.Interaction, error: Exception, item) -> None:
        self.bot.fail(f"button {item}: {error!r}", error)


class SlashBot(discord.Client):
    def __init__(self, guild: int, scope: str) -> None:
        super().__init__(intents=discord.Intents.default())
        self.tree = app_commands.CommandTree(self)
        self.guild_obj = discord.Object(id=guild)
        self.scope = scope
        self.handled: dict = {}
        self.finished: set = set()
        self.errors: list = []
        self.synced: list = []
        self.all_done = asyncio.Event()
        self.tree.on_error = self.on_tree_error
        self.add_commands()

    def add_commands(self) -> None:
        guild = self.guild_obj if self.scope == "guild" else None

        @self.tree.command(name="ping", description="Replies with pong", guild=guild)
        async def ping(interaction: discord.Interaction) -> None:
            self.handled["ping"] = seen(interaction)
            await interaction.response.send_message("pong")
            self.done("ping")

        @self.tree.command(name="slow", description="Thinks, then answers", guild=guild)
        async def slow(interaction: discord.Interaction) -> None:
            self.handled["slow"] = seen(interaction)
            await interaction.response.defer()
            await asyncio.sleep(SLOW_SECONDS)
            msg = await interaction.followup.send("done", wait=True)
            self.handled["slow"]["followup"] = {"id": str(msg.id), "content": msg.content}
            self.done("slow")

        @self.tree.command(name="menu", description="A button", guild=guild)
        async def menu(interaction: discord.Interaction) -> None:
            self.handled["menu"] = seen(interaction)
            await interaction.response.send_message("Pick one", view=MenuView(self))
            original = await interaction.original_response()
            self.handled["menu"]["original"] = {
                "id": str(original.id),
                "content": original.content,
                "components": len(original.components),
            }
            self.done("menu")

    async def setup_hook(self) -> None:
        if self.scope == "guild":
            cmds = await self.tree.sync(guild=self.guild_obj)
        else:
            cmds = await self.tree.sync()
        self.synced = [{"name": c.name, "id": str(c.id), "guild_id": str(c.guild_id)} for c in cmds]
        print("SYNCED " + json.dumps(self.synced), flush=True)

    async def on_ready(self) -> None:
        print("READY", flush=True)

    async def on_tree_error(self, interaction: discord.Interaction, error: Exception) -> None:
        self.fail(f"command {interaction.command and interaction.command.name}: {error!r}", error)

    def fail(self, what: str, error: Exception) -> None:
        self.errors.append(what + "\n" + "".join(traceback.format_exception(error)))
        self.all_done.set()

    def done(self, what: str) -> None:
        self.finished.add(what)
        if WANT <= self.finished:
            self.all_done.set()


async def run(args, token: str, logged: ErrorRecords) -> dict:
    bot = SlashBot(args.guild, args.scope)
    outcome = "ok"
    async with bot:
        task = asyncio.create_task(bot.start(token))
        try:
            await asyncio.wait_for(bot.all_done.wait(), timeout=args.timeout)
            # Let the last callback's request settle before closing.
            await asyncio.sleep(0.5)
        except asyncio.TimeoutError:
            outcome = "timeout"
        if task.done() and task.exception() is not None:
            outcome = f"client died: {task.exception()!r}"
        await bot.close()
        try:
            await asyncio.wait_for(task, timeout=10)
        except Exception as e:  # noqa: BLE001
            if outcome == "ok":
                outcome = f"client ended with {e!r}"
    return {
        "ok": outcome == "ok" and not bot.errors and not logged.records and WANT <= bot.finished,
        "outcome": outcome,
        "synced": bot.synced,
        "handled": bot.handled,
        "finished": sorted(bot.finished),
        "errors": bot.errors,
        "logged_errors": logged.records,
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--addr", required=True)
    p.add_argument("--guild", type=int, required=True)
    p.add_argument("--scope", choices=["guild", "global"], default="guild")
    p.add_argument("--timeout", type=float, default=90)
    args = p.parse_args()
    token = os.environ["GATEWAYD_TOKEN"]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logged = ErrorRecords()
    logging.getLogger().addHandler(logged)
    point_at(args.addr)
    summary = asyncio.run(run(args, token, logged))
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
