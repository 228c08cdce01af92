// An unmodified discord.js 14 slash-command bot pointed at a gatewayd node.
//
// The only change from a bot written for Discord is the REST base URL
// (`rest: { api }`); the gateway URL comes from GET /gateway/bot, as for
// Discord. The bot:
//
//   - `client.application.commands.set([...], guildId)` once ready
//     (PUT /applications/{app}/guilds/{guild}/commands);
//   - /ping: `interaction.reply("pong")`, then `channel.send("said")` and a
//     `reply` to that message;
//   - /slow: `interaction.deferReply()`, 2 s later `interaction.editReply("done")`,
//     then `interaction.followUp("and more")`;
//   - /menu: a reply with one button (custom_id "menu:click") and
//     `fetchReply`; the button: `interaction.update({ content: "clicked" })`.
//
// Usage (run by tests/discord_js_slash.rs; NODE_PATH is the node_modules
// scripts/test-all.sh installs from tests/js/package-lock.json):
//
//   GATEWAYD_TOKEN=... node slash_bot.js --addr HOST:PORT --guild ID
//
// Prints `SYNCED {json}` once the commands are registered and `READY` once
// ready, and a JSON summary as the last stdout line once /ping, /slow,
// /menu and the button were all handled (or at --timeout). Exit status 0
// when every handler ran without an exception.

"use strict";

const {
  Client,
  GatewayIntentBits,
  ActionRowBuilder,
  ButtonBuilder,
  ButtonStyle,
  Events,
} = require("discord.js");

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const addr = arg("addr");
const guildId = arg("guild");
const timeoutS = Number(arg("timeout", "90"));
const WANT = ["ping", "slow", "menu", "click"];
const summary = { ok: true, errors: [], handled: {}, synced: [] };

function finish() {
  summary.ok = summary.ok && WANT.every((k) => k in summary.handled);
  console.log(JSON.stringify(summary));
  process.exit(summary.ok ? 0 : 1);
}

function fail(what, e) {
  summary.ok = false;
  summary.errors.push(`${what}: ${e && e.stack ? e.stack : e}`);
}

function done(name, seen) {
  summary.handled[name] = seen;
  if (WANT.every((k) => k in summary.handled)) {
    setTimeout(finish, 200);
  }
}

/** What discord.js made of the INTERACTION_CREATE. */
function seen(i) {
  return {
    id: i.id,
    type: i.type,
    command: i.isChatInputCommand() ? i.commandName : null,
    custom_id: i.isButton() ? i.customId : null,
    user: i.user ? i.user.username : null,
    member: i.member ? i.member.user.username : null,
    guild_id: i.guildId,
    channel_id: i.channelId,
    message_id: i.message ? i.message.id : null,
    app_permissions: i.appPermissions ? i.appPermissions.bitfield.toString() : null,
    locale: i.locale,
  };
}

const client = new Client({
  intents: [GatewayIntentBits.Guilds, GatewayIntentBits.GuildMessages],
  rest: { api: `http://${addr}/api` },
});

client.once(Events.ClientReady, async (c) => {
  try {
    const cmds = await c.application.commands.set(
      [
        { name: "ping", description: "Ping", type: 1 },
        { name: "slow", description: "Answers slowly", type: 1 },
        { name: "menu", description: "A button", type: 1 },
      ],
      guildId,
    );
    summary.synced = [...cmds.values()].map((x) => ({ id: x.id, name: x.name, guild_id: x.guildId }));
    console.log(`SYNCED ${JSON.stringify(summary.synced)}`);
  } catch (e) {
    fail("commands.set", e);
  }
  console.log("READY");
});

client.on(Events.InteractionCreate, async (i) => {
  try {
    if (i.isChatInputCommand() && i.commandName === "ping") {
      await i.reply("pong");
      // A message and a reply to it, parsed from the REST edge's answers
      // (issue 26: their author was `{}` once an interaction was refused).
      const said = await i.channel.send("said");
      const replied = await said.reply("replied");
      done("ping", {
        ...seen(i),
        said_author: said.author ? said.author.id : null,
        replied_author: replied.author ? replied.author.id : null,
        replied_to: replied.reference ? replied.reference.messageId : null,
        said_id: said.id,
        me: client.user.id,
      });
    } else if (i.isChatInputCommand() && i.commandName === "slow") {
      await i.deferReply();
      await new Promise((r) => setTimeout(r, 2000));
      const edited = await i.editReply("done");
      const more = await i.followUp("and more");
      done("slow", { ...seen(i), edited: edited.content, followup: more.content });
    } else if (i.isChatInputCommand() && i.commandName === "menu") {
      const row = new ActionRowBuilder().addComponents(
        new ButtonBuilder().setCustomId("menu:click").setLabel("Click me").setStyle(ButtonStyle.Primary),
      );
      const r = await i.reply({ content: "Pick one", components: [row], withResponse: true });
      const m = r.resource && r.resource.message;
      done("menu", { ...seen(i), original: m ? { id: m.id, components: m.components.length } : null });
    } else if (i.isButton() && i.customId === "menu:click") {
      await i.update({ content: "clicked", components: [] });
      done("click", seen(i));
    }
  } catch (e) {
    fail(`interaction ${i.id}`, e);
  }
});

client.on(Events.Error, (e) => fail("client error", e));
// Every REST call and its status, to stderr (the test prints it on failure).
client.rest.on("response", (req, res) => console.error(`REST ${req.method} ${req.path} ${res.status}`));
process.on("unhandledRejection", (e) => fail("unhandled rejection", e));
setTimeout(finish, timeoutS * 1000);
client.login(process.env.GATEWAYD_TOKEN).catch((e) => {
  fail("login", e);
  finish();
});
