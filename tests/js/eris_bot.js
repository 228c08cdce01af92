// An unmodified Eris 0.18 bot pointed at a gatewayd node.
//
// The only changes from a bot written for Discord are Eris's documented
// REST settings: `rest.domain` (the host) and `rest.agent` (an
// https.Agent: Eris 0.18 sends every REST call with `https.request`, port
// 443 unless the agent says otherwise; lib/rest/RequestHandler.js), so the
// node serves TLS (--tls-cert/--tls-key) and Node.js trusts its CA through
// NODE_EXTRA_CA_CERTS. The gateway URL comes from GET /gateway/bot
// (lib/Client.js, connect), as for Discord.
//
// Modes (--mode), each ending with a JSON summary as the last stdout line
// and exit status 0 when every expectation of the mode held:
//
//   connect  READY, then --want `demo message N` messages; prints HOLDING
//            and stays connected until DIR/done exists (the test reads the
//            node's metrics meanwhile). With --compress, `compress: true`.
//   act      on a person's "!ping": createMessage, addMessageReaction (on
//            the person's message), a reply (messageReference),
//            editMessage, addMessageReaction + getMessage +
//            removeMessageReaction (own) + getMessage, deleteMessage; each
//            seen coming back as its gateway event, then a demo message
//            posted after them.
//   resume   READY, then `shard.disconnect({ reconnect: true })` (or, with
//            --cut terminate, `shard.ws.terminate()`: an abrupt drop Eris
//            reconnects from by itself); prints AWAY, and once DIR/back
//            exists reconnects (`client.shards.connect(shard)`); prints
//            RESUMED once resumed and finishes once --want MESSAGE_CREATEs
//            arrived after RESUMED (or at DIR/done).
//   burst    --per createMessage calls to --channel (default #general) at
//            once (Promise.all).
//   slash    bulkEditGuildCommands(--guild, [ping, slow, menu]); answers
//            /ping (createMessage), /slow (defer, editOriginalMessage,
//            createFollowup), /menu (a button) and the button (editParent).
//
// Recorded in every mode: each 'error' and 'warn' Eris emitted, every REST
// response (the 'rawREST' event) and any 429 among them or in its debug
// lines, each WebSocket connection's URL and its frames (binary or text,
// counted on the ws it opened), every gateway packet's op and `s` (the
// 'rawWS' event), READY and RESUMED.
//
// Usage (run by tests/eris.rs; NODE_PATH is the node_modules
// scripts/test-all.sh installs from tests/js/package-lock.json):
//
//   GATEWAYD_TOKEN=... NODE_EXTRA_CA_CERTS=ca.pem node eris_bot.js --addr HOST:PORT --mode connect

"use strict";

const fs = require("fs");
const https = require("https");
const path = require("path");
const Eris = require("eris");

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}
const flag = (name) => process.argv.includes(`--${name}`);

const addr = arg("addr");
const mode = arg("mode", "connect");
const want = Number(arg("want", "2"));
const timeoutS = Number(arg("timeout", "90"));
const signalDir = arg("signal-dir", "");
const compress = flag("compress");
const started = Date.now();
const [host, port] = addr.split(":");

let pako = null;
try {
  pako = require("pako/package.json").version;
} catch {} // eslint-disable-line no-empty

const summary = {
  ok: false,
  mode,
  eris: Eris.VERSION,
  pako,
  compress_asked: compress,
  errors: [],
  expected_errors: [],
  warns: [],
  failures: [],
  rest: [],
  rest_429: [],
  debug_429: [],
  connections: [],
  packets: [],
  ready: [],
  resumed: [],
  shard_resume_events: 0,
  messages: [],
};
let finished = false;

const stamp = () => `+${Date.now() - started}ms`;
const text = (e) => (e && e.stack ? e.stack : String(e));
function fail(what, e) {
  summary.failures.push(`${what}: ${text(e)}`);
}
function signal(name) {
  return signalDir !== "" && fs.existsSync(path.join(signalDir, name));
}
function waitFor(cond, ms = 50) {
  return new Promise((resolve) => {
    const t = setInterval(() => {
      if (cond()) {
        clearInterval(t);
        resolve();
      }
    }, ms);
  });
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A slash-command bot needs no message intents (and its application is not
// approved for MESSAGE_CONTENT: asking would end the session with 4014).
const intents = mode === "slash" ? ["guilds"] : ["guilds", "guildMessages", "guildMessageReactions", "messageContent"];
// Errors a test expects (e.g. the drop of --cut terminate, or an upgrade refused):
// still recorded, in `expected_errors`, but they do not fail the run.
const expectedErrors = arg("expected-errors") ? new RegExp(arg("expected-errors")) : null;
const client = new Eris.Client(`Bot ${process.env.GATEWAYD_TOKEN}`, {
  intents,
  compress,
  rest: { domain: host, agent: new https.Agent({ port: Number(port) }) },
});

// ------------------------------------------------------------ what Eris reports
client.on("error", (e, id) => {
  const entry = { at_ms: Date.now() - started, shard: id, message: String(e && e.message), code: e && e.code };
  if (expectedErrors && expectedErrors.test(entry.message)) summary.expected_errors.push(entry);
  else summary.errors.push(entry);
  console.error(`${stamp()} ERROR ${text(e)}`);
});
client.on("warn", (m, id) => {
  summary.warns.push(String(m && m.message ? m.message : m));
  console.error(`${stamp()} WARN ${m}`);
});
client.on("debug", (m) => {
  const s = String(m);
  // Eris's own words for a 429 (lib/rest/RequestHandler.js): "Global 429" /
  // "Unexpected 429", not any "429" (ids and contents may hold the digits).
  if (/(Global|Unexpected) 429/.test(s)) summary.debug_429.push(`${stamp()} ${s}`);
  console.error(`${stamp()} debug ${s.length > 400 ? s.slice(0, 400) + "..." : s}`);
});
client.on("rawREST", (r) => {
  const h = r.resp.headers;
  const entry = { method: r.method, url: r.url, status: r.resp.statusCode };
  summary.rest.push(entry);
  if (r.resp.statusCode === 429) summary.rest_429.push({ ...entry, at_ms: Date.now() - started, headers: h });
  console.error(
    `${stamp()} REST ${r.method} ${r.url} ${r.resp.statusCode} remaining=${h["x-ratelimit-remaining"]} ` +
      `reset_after=${h["x-ratelimit-reset-after"]} bucket=${h["x-ratelimit-bucket"]}`,
  );
});
// Each connection Eris opens: its URL and what came over it.
client.on("connect", (id) => {
  const shard = client.shards.get(id);
  const c = { url: shard.ws && shard.ws.url, at_ms: Date.now() - started, binary: 0, text: 0 };
  summary.connections.push(c);
  if (shard.ws) {
    shard.ws.on("message", (_data, isBinary) => {
      if (isBinary) c.binary += 1;
      else c.text += 1;
    });
  }
  console.error(`${stamp()} connected ${c.url}`);
});

const rawOwn = []; // MESSAGE_CREATE `d.author` of the bot's own messages, as received
client.on("rawWS", (p) => {
  summary.packets.push({ op: p.op, s: p.s === undefined ? null : p.s, t: p.t || null, conn: summary.connections.length });
  if (p.t === "READY") {
    const d = p.d;
    summary.ready.push({ s: p.s, session_id: d.session_id, user: d.user, resume_gateway_url: d.resume_gateway_url });
  } else if (p.t === "RESUMED") {
    summary.resumed.push({ s: p.s, conn: summary.connections.length });
    console.log(`RESUMED ${JSON.stringify({ s: p.s })}`);
  } else if (p.t === "MESSAGE_CREATE" && client.user && p.d.author && p.d.author.id === client.user.id) {
    rawOwn.push({ id: p.d.id, author: p.d.author });
  }
});

// ------------------------------------------------------------ the cache
function demoPlace() {
  for (const g of client.guilds.values()) {
    for (const c of g.channels.values()) {
      if (c.name === "general") return { guild: g, channel: c };
    }
  }
  return null;
}
function cacheView() {
  return [...client.guilds.values()].map((g) => ({
    id: g.id,
    name: g.name,
    channels: [...g.channels.values()].map((c) => ({ id: c.id, name: c.name, type: c.type })),
  }));
}
function seenMessage(m) {
  return {
    id: m.id,
    content: m.content,
    author: m.author ? m.author.username : null,
    author_id: m.author ? m.author.id : null,
    author_bot: m.author ? m.author.bot : null,
    channel: m.channel && m.channel.name !== undefined ? m.channel.name : null,
    channel_id: m.channel ? m.channel.id : null,
    guild: m.guildID && client.guilds.get(m.guildID) ? client.guilds.get(m.guildID).name : null,
    at_ms: Date.now() - started,
  };
}

let readyOnce = false;
client.on("ready", () => {
  if (readyOnce) return; // Eris emits "ready" again once a resumed shard is ready
  readyOnce = true;
  const place = demoPlace();
  summary.user = { id: client.user.id, username: client.user.username, bot: client.user.bot };
  summary.cache = cacheView();
  summary.application_id = client.application ? client.application.id : null;
  const shard = client.shards.get(0);
  summary.session_id = shard.sessionID;
  const line = {
    user: client.user.id,
    session_id: shard.sessionID,
    guild: place ? place.guild.id : null,
    general: place ? place.channel.id : null,
  };
  console.error(`${stamp()} ready`);
  console.log(`READY ${JSON.stringify(line)}`);
  MODES[mode]().catch((e) => {
    fail(`mode ${mode}`, e);
    finish();
  });
});
client.on("shardResume", () => {
  summary.shard_resume_events += 1;
});
client.on("messageCreate", (m) => {
  summary.messages.push(seenMessage(m));
  onMessage(m);
});
let onMessage = () => {};

// ------------------------------------------------------------ the modes
function demoMessages() {
  return summary.messages.filter((m) => m.content.startsWith("demo message "));
}

const MODES = {
  async connect() {
    await waitFor(() => demoMessages().length >= want);
    console.log("HOLDING");
    await waitFor(() => signal("done"));
    summary.expected = demoMessages().length >= want;
    finish();
  },

  async act() {
    const me = client.user.id;
    const seen = { updates: [], reactions_added: [], reactions_removed: [], deleted: [] };
    summary.seen = seen;
    client.on("messageUpdate", (m) => seen.updates.push({ id: m.id, content: m.content, edited: m.editedTimestamp != null }));
    client.on("messageReactionAdd", (m, emoji, reactor) =>
      seen.reactions_added.push({ message: m.id, emoji: emoji.name, user: reactor.id || reactor.user?.id }),
    );
    client.on("messageReactionRemove", (m, emoji, userID) =>
      seen.reactions_removed.push({ message: m.id, emoji: emoji.name, user: userID }),
    );
    client.on("messageDelete", (m) => seen.deleted.push(m.id));
    const person = await new Promise((resolve) => {
      onMessage = (m) => {
        if (m.content === "!ping" && !m.author.bot) resolve(m);
      };
    });
    onMessage = () => {};
    const ch = person.channel.id;
    const a = {};
    summary.actions = a;
    const shape = (m) => ({
      id: m.id,
      content: m.content,
      author_id: m.author.id,
      author_bot: m.author.bot,
      channel_id: m.channel.id,
      edited: m.editedTimestamp != null,
      reference: m.messageReference ? m.messageReference.messageID : null,
      referenced: m.referencedMessage ? m.referencedMessage.id : null,
      reactions: Object.fromEntries(Object.entries(m.reactions || {}).map(([k, v]) => [k, { count: v.count, me: v.me }])),
    });
    a.person = { id: person.id, author: person.author.username };
    const pong = await client.createMessage(ch, "pong");
    a.pong = shape(pong);
    await client.addMessageReaction(ch, person.id, "👀");
    const reply = await client.createMessage(ch, { content: "pong, as a reply", messageReference: { messageID: person.id } });
    a.reply = shape(reply);
    const edited = await client.editMessage(ch, pong.id, "pong (edited)");
    a.edited = shape(edited);
    await client.addMessageReaction(ch, pong.id, "👍");
    a.fetched_reacted = shape(await client.getMessage(ch, pong.id));
    await client.removeMessageReaction(ch, pong.id, "👍");
    a.fetched_unreacted = shape(await client.getMessage(ch, pong.id));
    await client.deleteMessage(ch, reply.id);
    a.deleted = reply.id;
    const sent = [pong.id, reply.id];
    const own = () => summary.messages.filter((m) => m.author_id === me).map((m) => m.id);
    const back = () =>
      sent.every((id) => own().includes(id)) &&
      seen.updates.some((u) => u.id === pong.id && u.content === "pong (edited)") &&
      seen.reactions_added.some((r) => r.message === person.id && r.emoji === "👀") &&
      seen.reactions_added.some((r) => r.message === pong.id && r.emoji === "👍") &&
      seen.reactions_removed.some((r) => r.message === pong.id && r.emoji === "👍") &&
      seen.deleted.includes(reply.id);
    await waitFor(back);
    // The gateway still delivers after the bot's own messages came back.
    const newest = sent.map(BigInt).reduce((x, y) => (x > y ? x : y));
    await waitFor(() => demoMessages().some((m) => BigInt(m.id) > newest));
    summary.alive_after_actions = true;
    summary.own_created = own();
    summary.raw_own_authors = rawOwn;
    summary.expected = true;
    finish();
  },

  async resume() {
    const shard = client.shards.get(0);
    const before = shard.sessionID;
    await sleep(500);
    summary.cut = arg("cut", "disconnect");
    summary.seq_at_cut = shard.seq;
    if (summary.cut === "terminate") {
      // The connection dies under Eris (no close frame): it reconnects and
      // resumes by itself (lib/gateway/Shard.js, _onWSClose: 1006, "auto").
      shard.ws.terminate();
      console.log(`AWAY ${JSON.stringify({ seq: summary.seq_at_cut })}`);
    } else {
      shard.disconnect({ reconnect: true }); // close 4901, session kept
      console.log(`AWAY ${JSON.stringify({ seq: summary.seq_at_cut })}`);
      await waitFor(() => signal("back"));
      client.shards.connect(shard);
    }
    await waitFor(() => summary.resumed.length > 0 && shard.ready);
    summary.session_after = shard.sessionID;
    summary.session_before = before;
    // Messages that arrived after RESUMED: the live stream joined the replay.
    const resumedAt = summary.packets.findIndex((p) => p.t === "RESUMED");
    const after = () => summary.packets.slice(resumedAt + 1).filter((p) => p.t === "MESSAGE_CREATE").length;
    await waitFor(() => after() >= want || signal("done"));
    await sleep(1000); // a late duplicate would come right behind
    summary.expected = after() >= want && summary.session_after === before;
    finish();
  },

  async burst() {
    const ch = arg("channel") || demoPlace().channel.id;
    const per = Number(arg("per", "30"));
    const t0 = Date.now();
    const at = [];
    const results = await Promise.allSettled(
      Array.from({ length: per }, (_, i) =>
        client.createMessage(ch, `burst ${i}`).then((m) => {
          at[i] = (Date.now() - t0) / 1000;
          return m;
        }),
      ),
    );
    summary.burst_s = (Date.now() - t0) / 1000;
    summary.sent = [];
    summary.send_failures = [];
    results.forEach((r, i) => {
      if (r.status === "fulfilled") summary.sent.push({ id: r.value.id, content: r.value.content, at_s: at[i] });
      else summary.send_failures.push(`${i}: ${text(r.reason)}`);
    });
    const me = client.user.id;
    const ids = summary.sent.map((s) => s.id);
    const raw = () => rawOwn.map((r) => r.id);
    await waitFor(() => {
      const made = new Set(summary.messages.filter((m) => m.author_id === me).map((m) => m.id));
      const got = new Set(raw());
      return ids.every((id) => made.has(id) && got.has(id));
    });
    await sleep(1000); // a late duplicate
    summary.created = summary.messages.filter((m) => m.author_id === me).map((m) => m.id);
    summary.raw_created = rawOwn.map((r) => r.id);
    summary.expected = summary.send_failures.length === 0 && summary.sent.length === per;
    finish();
  },

  async slash() {
    const guild = arg("guild");
    const handled = {};
    summary.handled = handled;
    const seen = (i) => ({
      id: i.id,
      type: i.type,
      command: i.data && i.data.name !== undefined ? i.data.name : null,
      custom_id: i.data && i.data.custom_id !== undefined ? i.data.custom_id : null,
      member: i.member ? i.member.username : null,
      guild_id: i.guildID || null,
      channel_id: i.channel ? i.channel.id : null,
      message_id: i.message ? i.message.id : null,
      app_permissions: i.appPermissions ? String(i.appPermissions.allow) : null,
    });
    const done = () => ["ping", "slow", "menu", "click"].every((k) => k in handled);
    client.on("interactionCreate", async (i) => {
      try {
        if (i instanceof Eris.CommandInteraction && i.data.name === "ping") {
          await i.createMessage("pong");
          handled.ping = seen(i);
        } else if (i instanceof Eris.CommandInteraction && i.data.name === "slow") {
          await i.defer();
          await sleep(2000);
          const edited = await i.editOriginalMessage("done");
          const more = await i.createFollowup("and more");
          handled.slow = { ...seen(i), edited: edited.content, followup: more.content };
        } else if (i instanceof Eris.CommandInteraction && i.data.name === "menu") {
          await i.createMessage({
            content: "Pick one",
            components: [{ type: 1, components: [{ type: 2, style: 1, label: "Click me", custom_id: "menu:click" }] }],
          });
          const original = await i.getOriginalMessage();
          handled.menu = { ...seen(i), original: { id: original.id, components: (original.components || []).length } };
        } else if (i instanceof Eris.ComponentInteraction && i.data.custom_id === "menu:click") {
          await i.editParent({ content: "clicked", components: [] });
          handled.click = seen(i);
        } else {
          fail(`interaction ${i.id}`, `unexpected ${i.constructor.name} ${JSON.stringify(i.data)}`);
        }
      } catch (e) {
        fail(`interaction ${i.id}`, e);
      }
    });
    const cmds = await client.bulkEditGuildCommands(guild, [
      { name: "ping", description: "Ping", type: 1 },
      { name: "slow", description: "Answers slowly", type: 1 },
      { name: "menu", description: "A button", type: 1 },
    ]);
    summary.synced = cmds.map((c) => ({ id: c.id, name: c.name, guild_id: c.guild ? c.guild.id : null }));
    console.log(`SYNCED ${JSON.stringify(summary.synced)}`);
    await waitFor(done);
    await sleep(200);
    summary.expected = true;
    finish();
  },
};

// ------------------------------------------------------------ the end
function finish() {
  if (finished) return;
  finished = true;
  summary.elapsed_s = (Date.now() - started) / 1000;
  summary.ok =
    summary.expected === true &&
    summary.failures.length === 0 &&
    summary.errors.length === 0 &&
    summary.warns.length === 0 &&
    summary.rest_429.length === 0 &&
    summary.debug_429.length === 0;
  console.log(JSON.stringify(summary));
  process.exit(summary.ok ? 0 : 1);
}

process.on("unhandledRejection", (e) => fail("unhandled rejection", e));
setTimeout(() => {
  summary.timeout_s = timeoutS;
  fail("timeout", `after ${timeoutS} s`);
  finish();
}, timeoutS * 1000);
client.connect().catch((e) => {
  fail("connect", e);
  finish();
});
