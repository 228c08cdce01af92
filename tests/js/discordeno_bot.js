// An unmodified discordeno 21 bot (`@discordeno/bot`) pointed at a gatewayd
// node.
//
// The only change from a bot written for Discord is discordeno's documented
// REST setting `rest: { proxy: { baseUrl: "http://HOST:PORT/api" } }`
// (@discordeno/rest dist/esm/manager.js: every URL is
// `${baseUrl}/v${version}${route}`). The gateway URL comes from
// GET /gateway/bot (`bot.start()` -> `rest.getSessionInfo()`,
// @discordeno/bot dist/esm/bot.js), as for Discord.
//
// discordeno treats every base URL that does not start with
// https://discord.com/api as a REST *proxy* (`isProxied`) and then sends
// each request at once with no rate limiting of its own (manager.js,
// `makeRequest`): the proxy is meant to pace. With `--rest own` the bot
// also sets `bot.rest.isProxied = false` (a field of discordeno's
// documented `RestManager`), so discordeno queues and paces its requests
// from the headers as it does against Discord. `--rest proxy` (the
// default) is the documented setting alone.
//
// Modes (--mode), each ending with a JSON summary as the last stdout line
// and exit status 0 when every expectation of the mode held:
//
//   connect  READY, GUILD_CREATE, then --want `demo message N` messages
//            (and --acks heartbeat ACKs); prints HOLDING and stays
//            connected until DIR/done exists (the test reads the node's
//            metrics meanwhile). --compression none|zlib-stream|zstd-stream
//            is discordeno's `gateway.transportCompression` (default none).
//   act      on a person's "!ping": sendMessage, a reply to it
//            (messageReference), editMessage, addReaction + getMessage +
//            deleteOwnReaction + getMessage (own message), deleteMessage;
//            each seen coming back as its gateway event, then a demo
//            message posted after them.
//   resume   READY; the test cuts the connection (or, with --cut
//            terminate, the bot drops its own socket: `ws.terminate()`, no
//            close frame); prints RESUMED once resumed and finishes once
//            --want MESSAGE_CREATEs arrived after RESUMED (or at DIR/done).
//   burst    --per sendMessage calls to #general at once (Promise.allSettled).
//
// Recorded in every mode: every line discordeno logs (its `loggerFactory`
// loggers and its default logger; WARN, ERROR and FATAL fail the run),
// every REST response (a wrapper around `fetch`, which discordeno calls)
// and every 429 among them, each WebSocket connection's URL and frames
// (binary or text), every payload discordeno sent (its op, and for
// Identify / Resume the session and seq), every gateway packet it handled
// (the `raw` event: op, s, t) and the shard events (hello, heartbeat,
// heartbeatAck, resumed, disconnected, ...).
//
// Usage (run by tests/discordeno.rs; NODE_PATH is the node_modules
// scripts/test-all.sh installs from tests/js/package-lock.json):
//
//   GATEWAYD_TOKEN=... node discordeno_bot.js --addr HOST:PORT --mode connect

"use strict";

const fs = require("fs");
const path = require("path");
const { createBot, Intents, DISCORDENO_VERSION, logger: defaultLogger } = require("@discordeno/bot");

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
}

const addr = arg("addr");
const mode = arg("mode", "connect");
const want = Number(arg("want", "2"));
const acks = Number(arg("acks", "0"));
const timeoutS = Number(arg("timeout", "90"));
const signalDir = arg("signal-dir", "");
const compression = arg("compression", "none");
const restMode = arg("rest", "proxy");
const allow429 = process.argv.includes("--allow-429");
// Log lines a test expects (e.g. the error discordeno logs when its socket
// drops): still recorded, in `expected_logs`, but they do not fail the run.
const expectedLogs = arg("expected-logs") ? new RegExp(arg("expected-logs")) : null;
const started = Date.now();

// Versions, read from the installed packages (their `exports` hide
// package.json from require).
function version(pkg) {
  for (const dir of (process.env.NODE_PATH || "").split(path.delimiter).filter((d) => d)) {
    try {
      return JSON.parse(fs.readFileSync(path.join(dir, pkg, "package.json"), "utf8")).version;
    } catch {} // eslint-disable-line no-empty
  }
  return null;
}

const summary = {
  ok: false,
  mode,
  discordeno: DISCORDENO_VERSION,
  versions: {
    bot: version("@discordeno/bot"),
    gateway: version("@discordeno/gateway"),
    rest: version("@discordeno/rest"),
    fzstd: version("fzstd"),
    ws: version("ws"),
  },
  compression,
  rest_mode: restMode,
  logs: [], // WARN / ERROR / FATAL lines
  expected_logs: [],
  failures: [],
  rest: [],
  rest_429: [],
  connections: [],
  sent_ops: [],
  packets: [],
  shard_events: [],
  ready: [],
  resumed: [],
  messages: [],
  own_raw: [],
};
let finished = false;

const stamp = () => `+${Date.now() - started}ms`;
const text = (e) => (e && e.stack ? e.stack : typeof e === "object" ? JSON.stringify(e) : String(e));
function fail(what, e) {
  summary.failures.push(`${what}: ${text(e)}${e && e.cause ? ` cause ${JSON.stringify(e.cause)}` : ""}`);
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

// ------------------------------------------------------------ what discordeno logs
// All of it on stderr (discordeno's default logger writes INFO to stdout,
// where the summary goes); WARN and above recorded.
const LEVELS = ["debug", "info", "warn", "error", "fatal"];
function recordingLogger(name) {
  const l = {};
  for (const level of LEVELS) {
    l[level] = (...args) => {
      const line = args.map((a) => (a instanceof Error ? text(a) : typeof a === "object" ? safeJson(a) : String(a))).join(" ");
      if (level !== "debug" && level !== "info") {
        const entry = { at_ms: Date.now() - started, logger: name, level, line: line.slice(0, 2000) };
        if (expectedLogs && expectedLogs.test(line)) summary.expected_logs.push(entry);
        else summary.logs.push(entry);
      }
      console.error(`${stamp()} ${level.toUpperCase()} ${name} ${line.length > 600 ? line.slice(0, 600) + "..." : line}`);
    };
  }
  l.log = (level, ...args) => l[LEVELS[level] || "debug"](...args);
  l.setLevel = () => {};
  l.setDepth = () => {};
  return l;
}
function safeJson(v) {
  try {
    return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
  } catch {
    return String(v);
  }
}
// The default logger (used where no logger was handed down).
const fallback = recordingLogger("default");
for (const level of LEVELS) defaultLogger[level] = fallback[level];

// ------------------------------------------------------------ REST, as it happened
const realFetch = globalThis.fetch;
globalThis.fetch = async (url, init) => {
  const method = (init && init.method) || "GET";
  const p = String(url).replace(/^https?:\/\/[^/]+/, "");
  const t0 = Date.now() - started;
  const res = await realFetch(url, init);
  const h = (k) => res.headers.get(k);
  const entry = {
    method,
    path: p,
    status: res.status,
    at_ms: t0,
    remaining: h("x-ratelimit-remaining"),
    reset_after: h("x-ratelimit-reset-after"),
    bucket: h("x-ratelimit-bucket"),
  };
  summary.rest.push(entry);
  if (res.status === 429) {
    const body = await res.clone().text();
    summary.rest_429.push({ ...entry, scope: h("x-ratelimit-scope"), retry_after: h("retry-after"), content_type: h("content-type"), body });
  }
  console.error(`${stamp()} REST ${method} ${p} ${res.status} remaining=${entry.remaining} reset_after=${entry.reset_after}`);
  return res;
};

// ------------------------------------------------------------ the bot
const INTENTS = Intents.Guilds | Intents.GuildMessages | Intents.GuildMessageReactions | Intents.MessageContent;
const shardEvent = (name) => (shard) => {
  summary.shard_events.push({ event: name, at_ms: Date.now() - started, conn: summary.connections.length, state: shard.state });
  console.error(`${stamp()} shard ${name}`);
};
const gatewayEvents = {};
for (const e of ["connecting", "hello", "heartbeat", "heartbeatAck", "identifying", "identified", "resumed", "disconnected", "requestedReconnect", "invalidSession"]) {
  gatewayEvents[e] = shardEvent(e);
}
// Each connection: its URL, the frames that came over it, what was sent.
gatewayEvents.connected = (shard) => {
  shardEvent("connected")(shard);
  const ws = shard.socket;
  const c = { url: ws.url, at_ms: Date.now() - started, binary: 0, text: 0 };
  summary.connections.push(c);
  const conn = summary.connections.length;
  ws.on("message", (_data, isBinary) => {
    if (isBinary) c.binary += 1;
    else c.text += 1;
  });
  ws.on("close", (code) => {
    c.closed = code;
  });
  const send = ws.send.bind(ws);
  ws.send = (data, ...rest) => {
    try {
      const p = JSON.parse(String(data));
      const o = { op: p.op, conn, at_ms: Date.now() - started };
      if (p.op === 1) o.d = p.d;
      if (p.op === 2) Object.assign(o, { intents: p.d.intents, compress: p.d.compress, shard: p.d.shard });
      if (p.op === 6) Object.assign(o, { session_id: p.d.session_id, seq: p.d.seq });
      summary.sent_ops.push(o);
    } catch (e) {
      summary.sent_ops.push({ unparsed: String(e), conn });
    }
    return send(data, ...rest);
  };
};

const desiredProperties = {
  user: { id: true, username: true, discriminator: true, toggles: true },
  guild: { id: true, name: true, channels: true },
  channel: { id: true, name: true, type: true, guildId: true },
  message: {
    id: true,
    content: true,
    author: true,
    channelId: true,
    guildId: true,
    editedTimestamp: true,
    messageReference: true,
    referencedMessage: true,
    reactions: true,
  },
  messageReference: { messageId: true, channelId: true, guildId: true },
  reaction: { count: true, me: true, emoji: true },
  emoji: { id: true, name: true },
};

const guilds = new Map(); // name -> { id, channels: [{id, name, type}] }
let place = null; // { guild, general }
let readyPayload = null;

const bot = createBot({
  token: process.env.GATEWAYD_TOKEN,
  intents: INTENTS,
  rest: { proxy: { baseUrl: `http://${addr}/api` } },
  gateway: {
    transportCompression: compression === "none" ? null : compression,
    events: gatewayEvents,
  },
  loggerFactory: recordingLogger,
  desiredProperties,
  events: {
    raw(packet) {
      summary.packets.push({ op: packet.op, s: packet.s ?? null, t: packet.t ?? null, conn: summary.connections.length });
      if (packet.t === "READY") {
        const d = packet.d;
        summary.ready.push({ s: packet.s, session_id: d.session_id, user: d.user, resume_gateway_url: d.resume_gateway_url, conn: summary.connections.length });
      } else if (packet.t === "RESUMED") {
        summary.resumed.push({ s: packet.s, conn: summary.connections.length });
        console.log(`RESUMED ${JSON.stringify({ s: packet.s })}`);
      }
      if (packet.t === "MESSAGE_CREATE") {
        seqOf.set(packet.d.id, packet.s);
        if (packet.d.author && packet.d.author.id === String(bot.id)) summary.own_raw.push({ id: packet.d.id, author: packet.d.author });
      }
    },
    ready(p) {
      readyPayload = { user: String(p.user.id), username: p.user.username, bot: p.user.bot, session_id: p.sessionId, shard: p.shard, v: p.v };
      summary.user = readyPayload;
      maybeReady();
    },
    guildCreate(g) {
      const channels = [...(g.channels ? g.channels.values() : [])].map((c) => ({ id: String(c.id), name: c.name, type: c.type }));
      guilds.set(g.name, { id: String(g.id), channels });
      maybeReady();
    },
    messageCreate(m) {
      const seen = {
        id: String(m.id),
        content: m.content,
        author: m.author ? m.author.username : null,
        author_id: m.author ? String(m.author.id) : null,
        author_bot: m.author ? m.author.bot : null,
        channel_id: m.channelId !== undefined ? String(m.channelId) : null,
        guild_id: m.guildId !== undefined ? String(m.guildId) : null,
        s: seqOf.get(String(m.id)) ?? null,
        at_ms: Date.now() - started,
      };
      summary.messages.push(seen);
      onMessage(m);
    },
    messageUpdate(m) {
      onUpdate(m);
    },
    messageDelete(m) {
      onDelete(m);
    },
    reactionAdd(r) {
      onReaction("add", r);
    },
    reactionRemove(r) {
      onReaction("remove", r);
    },
  },
});
if (restMode === "own") bot.rest.isProxied = false;

// The `s` of each MESSAGE_CREATE, by message id (discordeno's handlers run
// after an `await`, so several raw packets may come before them).
const seqOf = new Map();
let onMessage = () => {};
let onUpdate = () => {};
let onDelete = () => {};
let onReaction = () => {};
function lastSeq() {
  for (let i = summary.packets.length - 1; i >= 0; i--) if (summary.packets[i].s !== null) return summary.packets[i].s;
  return null;
}

// READY and the demo server's GUILD_CREATE both in: the test may go on.
let readyPrinted = false;
function maybeReady() {
  if (readyPrinted || !readyPayload) return;
  const demo = guilds.get("Demo Server");
  if (!demo) return;
  const general = demo.channels.find((c) => c.name === "general");
  if (!general) return;
  readyPrinted = true;
  place = { guild: demo.id, general: general.id };
  summary.guilds = Object.fromEntries(guilds);
  const line = { ...readyPayload, guild: demo.id, general: general.id, seq: lastSeq() };
  console.error(`${stamp()} ready`);
  console.log(`READY ${JSON.stringify(line)}`);
  MODES[mode]().catch((e) => {
    fail(`mode ${mode}`, e);
    finish();
  });
}

function demoMessages() {
  return summary.messages.filter((m) => m.content && m.content.startsWith("demo message "));
}

// ------------------------------------------------------------ the modes
const MODES = {
  async connect() {
    const heartbeatAcks = () => summary.packets.filter((p) => p.op === 11).length;
    await waitFor(() => demoMessages().length >= want && heartbeatAcks() >= acks);
    console.log("HOLDING");
    await waitFor(() => signal("done"));
    summary.expected = true;
    finish();
  },

  async act() {
    const me = String(bot.id);
    const seen = { updates: [], reactions_added: [], reactions_removed: [], deleted: [] };
    summary.seen = seen;
    onUpdate = (m) => seen.updates.push({ id: String(m.id), content: m.content, edited: m.editedTimestamp !== undefined });
    onDelete = (m) => seen.deleted.push(String(m.id));
    onReaction = (kind, r) =>
      (kind === "add" ? seen.reactions_added : seen.reactions_removed).push({
        message: String(r.messageId),
        emoji: r.emoji.name,
        user: String(r.userId),
      });
    const person = await new Promise((resolve) => {
      onMessage = (m) => {
        if (m.content === "!ping" && m.author && !m.author.bot) resolve(m);
      };
    });
    onMessage = () => {};
    const ch = person.channelId;
    const h = bot.helpers;
    const a = {};
    summary.actions = a;
    const shape = (m) => ({
      id: String(m.id),
      content: m.content,
      author_id: m.author ? String(m.author.id) : null,
      author_bot: m.author ? m.author.bot : null,
      channel_id: m.channelId !== undefined ? String(m.channelId) : null,
      edited: m.editedTimestamp !== undefined,
      reference: m.messageReference && m.messageReference.messageId !== undefined ? String(m.messageReference.messageId) : null,
      reactions: Object.fromEntries((m.reactions || []).map((r) => [r.emoji.name, { count: r.count, me: r.me }])),
    });
    a.person = { id: String(person.id), author: person.author.username };
    const pong = await h.sendMessage(ch, { content: "pong" });
    a.pong = shape(pong);
    const reply = await h.sendMessage(ch, {
      content: "pong, as a reply",
      messageReference: { messageId: person.id, failIfNotExists: true },
    });
    a.reply = shape(reply);
    a.edited = shape(await h.editMessage(ch, pong.id, { content: "pong (edited)" }));
    await h.addReaction(ch, pong.id, "👍");
    a.fetched_reacted = shape(await h.getMessage(ch, pong.id));
    await h.deleteOwnReaction(ch, pong.id, "👍");
    a.fetched_unreacted = shape(await h.getMessage(ch, pong.id));
    await h.deleteMessage(ch, reply.id);
    a.deleted = String(reply.id);
    const sent = [String(pong.id), String(reply.id)];
    const own = () => summary.messages.filter((m) => m.author_id === me).map((m) => m.id);
    const back = () =>
      sent.every((id) => own().includes(id)) &&
      seen.updates.some((u) => u.id === sent[0] && u.content === "pong (edited)") &&
      seen.reactions_added.some((r) => r.message === sent[0] && r.emoji === "👍") &&
      seen.reactions_removed.some((r) => r.message === sent[0] && r.emoji === "👍") &&
      seen.deleted.includes(sent[1]);
    await waitFor(back);
    // The gateway still delivers after the bot's own messages came back.
    const newest = sent.map(BigInt).reduce((x, y) => (x > y ? x : y));
    await waitFor(() => demoMessages().some((m) => BigInt(m.id) > newest));
    summary.alive_after_actions = true;
    summary.own_created = own();
    summary.expected = true;
    finish();
  },

  async resume() {
    const shard = bot.gateway.shards.get(0);
    const before = shard.sessionId;
    summary.session_before = before;
    if (arg("cut", "") === "terminate") {
      await sleep(500);
      summary.seq_at_cut = shard.previousSequenceNumber;
      // The connection dies under discordeno (no close frame, 1006): it
      // resumes by itself (Shard.js, handleClose: default -> resume()).
      shard.socket.terminate();
      console.log(`AWAY ${JSON.stringify({ seq: summary.seq_at_cut })}`);
    }
    await waitFor(() => summary.resumed.length > 0 || signal("done"));
    summary.session_after = shard.sessionId;
    const resumedAt = summary.packets.findIndex((p) => p.t === "RESUMED");
    const after = () => (resumedAt < 0 ? 0 : summary.packets.slice(resumedAt + 1).filter((p) => p.t === "MESSAGE_CREATE").length);
    await waitFor(() => after() >= want || signal("done"));
    await sleep(1000); // a late duplicate would come right behind
    summary.expected = summary.resumed.length > 0 && after() >= want && summary.session_after === before;
    finish();
  },

  async burst() {
    const ch = place.general;
    const per = Number(arg("per", "30"));
    const t0 = Date.now();
    const at = [];
    const results = await Promise.allSettled(
      Array.from({ length: per }, (_, i) =>
        bot.helpers.sendMessage(ch, { content: `burst ${i}` }).then((m) => {
          at[i] = (Date.now() - t0) / 1000;
          return m;
        }),
      ),
    );
    summary.burst_s = (Date.now() - t0) / 1000;
    summary.sent = [];
    summary.send_failures = [];
    results.forEach((r, i) => {
      if (r.status === "fulfilled") summary.sent.push({ id: String(r.value.id), content: r.value.content, at_s: at[i] });
      else summary.send_failures.push({ i, message: String(r.reason && r.reason.message), cause: r.reason && r.reason.cause });
    });
    const me = String(bot.id);
    const ids = summary.sent.map((s) => s.id);
    await waitFor(() => {
      const made = new Set(summary.messages.filter((m) => m.author_id === me).map((m) => m.id));
      const raw = new Set(summary.own_raw.map((r) => r.id));
      return ids.every((id) => made.has(id) && raw.has(id));
    });
    await sleep(1000); // a late duplicate
    summary.created = summary.messages.filter((m) => m.author_id === me).map((m) => m.id);
    summary.raw_created = summary.own_raw.map((r) => r.id);
    summary.expected = allow429 || (summary.send_failures.length === 0 && summary.sent.length === per);
    finish();
  },
};

// ------------------------------------------------------------ the end
function finish() {
  if (finished) return;
  finished = true;
  summary.elapsed_s = (Date.now() - started) / 1000;
  summary.statuses = {};
  for (const r of summary.rest) summary.statuses[r.status] = (summary.statuses[r.status] || 0) + 1;
  summary.ok =
    summary.expected === true &&
    summary.failures.length === 0 &&
    summary.logs.length === 0 &&
    (allow429 || summary.rest_429.length === 0);
  console.log(safeJson(summary));
  process.exit(summary.ok ? 0 : 1);
}

process.on("unhandledRejection", (e) => fail("unhandled rejection", e));
setTimeout(() => {
  summary.timeout_s = timeoutS;
  fail("timeout", `after ${timeoutS} s`);
  finish();
}, timeoutS * 1000);
bot.start().catch((e) => {
  fail("start", e);
  finish();
});
